"""MCP over Streamable HTTP at /mcp of `lightmem serve` (its app under uvicorn; two real server processes for the
replicas): the keys of /v1, a key's users only, stateless (any replica answers), the stdio tools' checks; clients: the
official `mcp` client's Streamable HTTP transport and the OpenAI Agents SDK's MCPServerStreamableHttp."""
from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import httpx2
import pytest
import uvicorn
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

import lightmem
from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.server import KeyRing, create_app, launch
from lightmem.server.mcp_server import create_mcp_server

ALICE, BOB, TEAM, ADMIN = "alice-key-0000000001", "bob-key-00000000002", "team-key-00000000004", "admin-key-0000000003"
FRED, HANK = "fred-key-00000000005", "hank-key-00000000006"
KEYS = {ALICE: ["alice"], BOB: ["bob"], TEAM: ["alice", "carol"], ADMIN: ["*"], FRED: ["fred"], HANK: ["hank"]}
TOOLS = {"add_memory", "add_memories", "search_memories", "get_memories", "delete_memory", "build_context"}
OPTIONS = ["--workers", "1", "--encoder", "hashing", "--selector", "none"]
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "test", "version": "0"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def keys_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "keys.json"
    path.write_text(json.dumps(KEYS))
    return path


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """The app of `lightmem serve` under uvicorn in a thread, for the module's tests (each uses users of its own)."""
    store = tmp_path_factory.mktemp("mcp_http") / "store"
    app = create_app(lambda: Memory.open(store, embedder=HashingEmbedder(64), selector=Stage1Selector(),
                                         synchronous="NORMAL"), KeyRing(KEYS))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=launch.free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{server.config.port}"
    server.should_exit = True  # the lifespan's end: the MCP session manager stops, the memory closes
    thread.join(30)
    assert not thread.is_alive(), "the server did not shut down"


def run(url: str, key: str, calls, transport: httpx2.AsyncBaseTransport | None = None):
    """Connect the official client to ``url``/mcp with ``key`` as its bearer token and make ``calls(client)``."""

    async def go():
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, transport=transport) as http:
            async with Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
                return await calls(client)

    return asyncio.run(go())


def texts(url: str, user: str) -> list[str]:
    """What ``user`` holds, read through /v1 with the admin key."""
    r = httpx.get(f"{url}/v1/memories", params={"user_id": user}, headers={"Authorization": f"Bearer {ADMIN}"},
                  timeout=60)
    assert r.status_code == 200, r.text
    return [i["text"] for i in r.json()["items"]]


def error(result) -> str:
    assert result.is_error, result
    return result.content[0].text


def test_a_request_without_a_valid_key_is_401_and_reaches_no_tool(base):
    tool_call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                 "params": {"name": "add_memory", "arguments": {"text": "written without a key", "user_id": "dora"}}}
    for headers in ({}, {"Authorization": "Bearer not-a-key-of-the-file"}, {"Authorization": f"Basic {ALICE}"},
                    {"Authorization": "Bearer"}):
        for body in (INITIALIZE, tool_call):
            r = httpx.post(f"{base}/mcp", json=body, headers={**MCP_HEADERS, **headers}, timeout=60)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
            assert "Authorization: Bearer" in r.json()["detail"]
    assert httpx.get(f"{base}/mcp", headers=MCP_HEADERS, timeout=60).status_code == 401
    assert texts(base, "dora") == []
    ok = httpx.post(f"{base}/mcp", json=INITIALIZE, headers={**MCP_HEADERS, "Authorization": f"Bearer {ALICE}"},
                    timeout=60)
    assert ok.status_code == 200 and ok.headers["content-type"].startswith("application/json")
    assert "mcp-session-id" not in ok.headers  # stateless: nothing ties the next request to this worker
    assert ok.json()["result"]["serverInfo"] == {"name": "lightmem", "version": lightmem.__version__}


def test_the_tools_take_the_user_and_a_one_user_key_may_leave_it_out(base):
    async def calls(c):
        tools = {t.name: t.input_schema for t in (await c.list_tools()).tools}
        added = await c.call_tool("add_memories", {"messages": [{"text": "I adopted a dog named Rex"},
                                                                {"text": "He is a beagle", "speaker": "Alice"}]})
        named = await c.call_tool("search_memories", {"query": "dog Rex", "k": 1, "user_id": "alice"})
        context = await c.call_tool("build_context", {"query": "What breed is my dog?"})
        return tools, added, named, context

    tools, added, named, context = run(base, ALICE, calls)
    assert set(tools) == TOOLS
    for schema in tools.values():
        assert schema["properties"]["user_id"]["anyOf"][0]["type"] == "string"
        assert "user_id" not in schema.get("required", [])
    assert not any(r.is_error for r in (added, named, context))
    assert {i["user_id"] for i in added.structured_content["items"]} == {"alice"}
    assert named.structured_content["hits"][0]["text"] == "user: I adopted a dog named Rex"
    assert "beagle" in context.structured_content["prompt"]


def test_a_key_cannot_read_or_write_another_users_memory(base):
    seed = run(base, BOB, lambda c: c.call_tool("add_memory", {"text": "my locker code is 918273"}))
    bob_item = seed.structured_content["items"][0]["id"]

    async def as_alice(c):
        return {
            "add": await c.call_tool("add_memory", {"text": "alice writing into bob", "user_id": "bob"}),
            "adds": await c.call_tool("add_memories", {"messages": [{"text": "and more"}], "user_id": "bob"}),
            "search": await c.call_tool("search_memories", {"query": "locker code", "user_id": "bob"}),
            "list": await c.call_tool("get_memories", {"user_id": "bob"}),
            "delete": await c.call_tool("delete_memory", {"memory_id": bob_item, "user_id": "bob"}),
            "context": await c.call_tool("build_context", {"query": "locker code", "user_id": "bob"}),
            "own": await c.call_tool("delete_memory", {"memory_id": bob_item}),  # as alice: not her item
        }

    answers = run(base, ALICE, as_alice)
    for name in ("add", "adds", "search", "list", "delete", "context"):
        message = error(answers[name])
        assert message.endswith("this API key may not act for user 'bob'"), message
        assert "918273" not in message and bob_item not in message
    assert "918273" not in error(answers["own"])  # another user's id reads as an unknown one
    assert texts(base, "bob") == ["user: my locker code is 918273"]  # nothing written, nothing erased


def test_a_key_of_several_users_names_one_and_an_admin_key_any(base):
    async def as_team(c):
        bare = await c.call_tool("add_memory", {"text": "whose is this?"})
        carol = await c.call_tool("add_memory", {"text": "I play the cello", "user_id": "carol"})
        dave = await c.call_tool("get_memories", {"user_id": "dave"})
        return bare, carol, dave

    bare, carol, dave = run(base, TEAM, as_team)
    assert "pass user_id" in error(bare) and "alice" not in error(bare)
    assert not carol.is_error and error(dave).endswith("may not act for user 'dave'")

    async def as_admin(c):
        return (await c.call_tool("get_memories", {}),
                await c.call_tool("get_memories", {"user_id": "carol"}))

    bare, listed = run(base, ADMIN, as_admin)
    assert "pass user_id" in error(bare)
    assert [i["text"] for i in listed.structured_content["items"]] == ["user: I play the cello"]


def test_each_argument_is_checked_as_the_stdio_tools_check_it(base, memory):
    bad = [("add_memory", {"text": "a NUL\u0000 here"}),
           ("add_memory", {"text": "   "}),
           ("add_memories", {"messages": [{"text": "fine"}, {"text": "x", "speaker": "s" * 300}]}),
           ("add_memories", {"messages": [{"text": "hi", "mood": "glad"}]}),
           ("search_memories", {"query": "q", "k": 0}),
           ("build_context", {"query": "q", "stm": ["ok", "y" * 100_001]}),
           ("delete_memory", {"memory_id": "no-such-memory"})]

    async def calls(c):
        return [await c.call_tool(name, args) for name, args in bad]

    over_http = run(base, FRED, calls)

    async def stdio_calls():
        async with Client(create_mcp_server(memory, "fred")) as c:
            return await calls(c)

    over_stdio = asyncio.run(stdio_calls())
    for (name, _), http, stdio in zip(bad, over_http, over_stdio):
        assert http.is_error and stdio.is_error, name
        assert http.content[0].text == stdio.content[0].text, name
    assert texts(base, "fred") == []

    async def bad_users(c):
        return [await c.call_tool("get_memories", {"user_id": u}) for u in ("", "   ", "u" * 300)]

    for result in run(base, FRED, bad_users):
        assert result.is_error and "user_id" in result.content[0].text


class RoundRobin(httpx2.AsyncBaseTransport):
    """Sends each request to the next of ``urls``' servers in turn, as a load balancer would."""

    def __init__(self, urls: list[str]) -> None:
        self.ports = itertools.cycle([httpx2.URL(u).port for u in urls])
        self.served: Counter[int] = Counter()
        self.inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        port = next(self.ports)
        self.served[port] += 1
        request.url = request.url.copy_with(port=port)
        request.headers["Host"] = f"127.0.0.1:{port}"
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.multiprocess
def test_two_replicas_answer_one_client_in_turn(keys_file, tmp_path):
    """Two `lightmem serve` processes on one store, behind a balancer that sends the client's requests to each in
    turn: the stateless transport needs no session affinity, and each sees what the other wrote."""
    store = tmp_path / "store"
    first, base = launch.start(store, keys_file, tmp_path / "first.log", OPTIONS)
    try:
        proc, other = launch.start(store, keys_file, tmp_path / "second.log", OPTIONS)
    except BaseException:
        launch.stop(first)
        raise
    balancer = RoundRobin([base, other])

    async def calls(c):
        tools = await c.list_tools()
        written = [await c.call_tool("add_memory", {"text": f"replica note {n} about sailing", "user_id": "erin"})
                   for n in range(3)]
        found = await c.call_tool("search_memories", {"query": "sailing", "k": 5, "user_id": "erin"})
        listed = await c.call_tool("get_memories", {"user_id": "erin"})
        return tools, written, found, listed

    try:
        tools, written, found, listed = run(base, ADMIN, calls, balancer)
    finally:
        launch.stop(proc)
        launch.stop(first)
    assert {t.name for t in tools.tools} == TOOLS
    assert not any(r.is_error for r in (*written, found, listed))
    assert len(found.structured_content["hits"]) == 3
    assert [i["text"] for i in listed.structured_content["items"]] == [f"user: replica note {n} about sailing"
                                                                       for n in range(3)]
    assert len(balancer.served) == 2 and min(balancer.served.values()) >= 3, balancer.served


def test_the_openai_agents_sdk_lists_the_tools_and_calls_one(base):
    from agents.mcp import MCPServerStreamableHttp

    async def go():
        async with MCPServerStreamableHttp(params={"url": f"{base}/mcp", "headers": {"Authorization": f"Bearer {HANK}"},
                                                   "timeout": 60},
                                           name="lightmem") as server:
            tools = await server.list_tools()
            added = await server.call_tool("add_memory", {"text": "I fly to Oslo on Friday"})
            refused = await server.call_tool("search_memories", {"query": "Oslo", "user_id": "bob"})
            found = await server.call_tool("search_memories", {"query": "Oslo", "user_id": "hank"})
            return tools, added, refused, found

    tools, added, refused, found = asyncio.run(go())
    assert {t.name for t in tools} == TOOLS
    assert all("user_id" in t.input_schema["properties"] for t in tools)
    assert not added.is_error and not found.is_error
    assert refused.is_error and "may not act for user 'bob'" in refused.content[0].text
    assert found.structured_content["hits"][0]["text"] == "user: I fly to Oslo on Friday"
