"""One validation for every entry point: the same hostile input gets the same answer from the Python API, the
HTTP API and the MCP tools, on the embedded store and on PostgreSQL.

"Refused" is ``InvalidInputError`` in Python, 422 over HTTP and an error result over MCP; nothing refused
reaches the store (PostgreSQL would answer NUL with a ``DataError``, the HTTP API with a 500).
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from mcp.server.mcpserver.exceptions import ToolError

from lightmem.errors import InvalidInputError
from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.server import KeyRing, create_app
from lightmem.server.mcp_server import create_mcp_server
from lightmem.stores import is_server
from lightmem.validation import MAX_ID_CHARS, MAX_K

ADMIN = "admin-key-0000000003"
USER = "alice"
MAX_TURN = 2_000  # a small per-turn limit, so that the test sends small bodies


def _open(location: str) -> Memory:
    fast = {} if is_server(location) else {"synchronous": "NORMAL"}
    return Memory.open(location, embedder=HashingEmbedder(64), selector=Stage1Selector(), max_turn_chars=MAX_TURN, **fast)


@dataclass(frozen=True)
class Case:
    """One input, as each entry point takes it; ``mcp`` is None where MCP has no such argument."""

    name: str
    python: Callable[[Memory], Any]
    http: tuple[str, str, dict[str, Any]]  # method, path, json body / query params
    mcp: tuple[str, dict[str, Any]] | None
    accepted: bool


def _add(text: str = "I adopted a dog named Rex.", speaker: str = "Alice", turn_id: str | None = None,
         session_id: str | None = None, user: str = USER, timestamp: str | None = None, accepted: bool = False,
         name: str = "") -> Case:
    when = {"timestamp": timestamp} if timestamp is not None else {}
    msg: dict[str, Any] = {"speaker": speaker, "text": text, **({"id": turn_id} if turn_id is not None else {}), **when}
    body: dict[str, Any] = {"user_id": user, "messages": [msg], **({"session_id": session_id} if session_id else {})}
    mcp = (("add_memory", {"text": text, "speaker": speaker, **when})
           if turn_id is None and session_id is None and user == USER else None)
    return Case(name, lambda m: m.add(dict(msg), user_id=user, session_id=session_id), ("POST", "/v1/memories", body),
                mcp, accepted)


def _search(query: str = "dog", k: Any = 3, user: str = USER, metadata: dict[str, Any] | None = None,
            accepted: bool = False, name: str = "") -> Case:
    where = {"metadata": metadata} if metadata is not None else {}
    body = {"user_id": user, "query": query, "k": k, **({"filters": where} if where else {})}
    mcp = ("search_memories", {"query": query, "k": k, **where}) if user == USER else None
    return Case(name, lambda m: m.search(query, user, k=k, filters=where or None), ("POST", "/v1/search", body), mcp,
                accepted)


def _context(stm: list[str], accepted: bool = False, name: str = "") -> Case:
    body = {"user_id": USER, "query": "dog", "stm": stm, "budget": 300}
    return Case(name, lambda m: m.build_context("dog", USER, stm=stm, budget=300), ("POST", "/v1/context", body),
                ("build_context", {"query": "dog", "stm": stm, "budget": 300}), accepted)


def _delete(item_id: str, name: str = "") -> Case:
    return Case(name, lambda m: m.delete(item_id, USER), ("DELETE", f"/v1/memories/{quote(item_id, safe='')}", {"user_id": USER}),
                ("delete_memory", {"memory_id": item_id}), False)


CASES = [
    _add(name="a plain turn", accepted=True),
    _add(text="I adopted a dog\x00 named Rex.", name="NUL in the text"),
    _add(speaker="Al\x00ice", name="NUL in the speaker"),
    _add(turn_id="t-\x00", name="NUL in the turn id"),
    _add(session_id="s\x00", name="NUL in the session id"),
    _add(user="al\x00ice", name="NUL in the user id"),
    _add(user="u" * MAX_ID_CHARS, accepted=True, name="the longest user id"),
    _add(user="u" * (MAX_ID_CHARS + 1), name="a user id one too long"),
    _add(speaker="s" * (MAX_ID_CHARS + 1), name="a speaker one too long"),
    _add(turn_id="t" * (MAX_ID_CHARS + 1), name="a turn id one too long"),
    _add(session_id="s" * (MAX_ID_CHARS + 1), name="a session id one too long"),
    _add(text="word " * (MAX_TURN // 5), accepted=True, name="the longest turn"),
    _add(text="word " * (MAX_TURN // 5) + "x", name="a turn one character too long"),
    _search(accepted=True, name="a plain search"),
    _search(query="d\x00g", name="NUL in the query"),
    _search(k="5", name="k as a string"),
    _search(k=True, name="k as a boolean"),
    _search(k=MAX_K, accepted=True, name="the largest k"),
    _search(k=MAX_K + 1, name="k one too large"),
    _search(user="bob\x00", name="NUL in the searching user id"),
    _context(["I have a dog."], accepted=True, name="a context with recent turns"),
    _context(["I have a\x00 dog."], name="NUL in a recent turn"),
    _add(timestamp="2023-05-08\x00", name="NUL in a timestamp"),  # was taken by Python and HTTP, refused by MCP
    _add(timestamp="2023-05-08\ud800", name="a lone surrogate in a timestamp"),  # HTTP: 500, its 422 unencodable
    _add(timestamp="2023-05-08" + " " * MAX_ID_CHARS, name="a timestamp longer than a name"),
    _search(metadata={"topic": "sport"}, accepted=True, name="a metadata filter"),
    _search(metadata={"topic": "sp\ud800rt"}, name="a lone surrogate in a metadata filter"),  # the driver's error
    _search(metadata={"topic": {}}, name="an empty operator object"),  # matched every memory
    _delete("m\x00", name="NUL in an item id"),
    _delete("m" * (MAX_ID_CHARS + 1), name="an item id one too long"),
]


def _python(memory: Memory, case: Case) -> bool:
    try:
        case.python(memory)
    except InvalidInputError:
        return False
    return True


def _http(client: TestClient, case: Case) -> bool:
    method, path, payload = case.http
    # a body as ASCII JSON text: httpx refuses to encode a lone surrogate, a client writing "\ud800" does not
    kw = {"params": payload} if method in ("GET", "DELETE") else {"content": json.dumps(payload)}
    r = client.request(method, path, headers={"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"},
                       **kw)
    assert r.status_code in (200, 201, 422), (case.name, r.status_code, r.text)
    return r.status_code != 422


def _mcp(memory: Memory, case: Case) -> bool | str | None:
    """The MCP answer; a turn is given to ``add_memory`` and, as a list of one, to ``add_memories``, which must agree."""
    if case.mcp is None:
        return None
    tool, args = case.mcp
    server = create_mcp_server(memory, USER)
    calls = [(tool, args)] + ([("add_memories", {"messages": [args]})] if tool == "add_memory" else [])
    answers = set()
    for name, arguments in calls:
        try:
            asyncio.run(server.call_tool(name, arguments))
            answers.add(True)
        except ToolError:
            answers.add(False)
    return answers.pop() if len(answers) == 1 else "add_memory and add_memories differ"


@pytest.fixture(params=["sqlite", "postgres"])
def location(request, tmp_path) -> str:
    return request.getfixturevalue("pg_uri") if request.param == "postgres" else str(tmp_path / "store")


def test_every_entry_point_accepts_and_refuses_the_same_inputs_on_both_backends(location):
    app = create_app(lambda: _open(location), KeyRing({ADMIN: ["*"]}), max_body_bytes=1 << 20)
    with TestClient(app) as client:
        memory = client.app.state.memory
        wrong = {}
        for case in CASES:
            got = (_python(memory, case), _http(client, case), _mcp(memory, case))
            if any(answer is not None and answer != case.accepted for answer in got):
                wrong[case.name] = got
        assert not wrong, f"(python, http, mcp) answers that differ from the expected one: {wrong}"
        # nothing refused reached the store: the plain turn and the longest turn, once per entry point (twice by MCP)
        texts = [i.text for i in memory.get_all(USER)]
        assert len(texts) == 8 and all("\x00" not in t for t in texts)


def test_mcp_refuses_an_agent_bound_to_an_impossible_user(tmp_path):
    memory = _open(str(tmp_path / "store"))
    try:
        for user in ("al\x00ice", "u" * (MAX_ID_CHARS + 1), " "):
            with pytest.raises(InvalidInputError):
                create_mcp_server(memory, user)
    finally:
        memory.close()
