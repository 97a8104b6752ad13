"""Every MCP call gets an answer: hostile text in any field of any tool, sent as raw JSON-RPC over stdio.

The official client refuses to send a lone surrogate, so these tests speak JSON-RPC to the real server
(``lightmem mcp`` in a process of its own) byte for byte: ``"\\ud800"`` is written as the JSON escape. The
SDK's stdio transport cannot parse such a line (pydantic's JSON parser refuses lone surrogates) and used to
drop it: the call was never answered and nothing was logged. Each call here must be answered within a
timeout, with an error result (or a JSON-RPC error), logged as a warning naming the tool and the problem
without the hostile text, and the server must still answer a good call afterwards.
"""
from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from lightmem.validation import MAX_ID_CHARS, MAX_TURN_CHARS

pytestmark = [pytest.mark.fuzz, pytest.mark.multiprocess]

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
ANSWER_S = 15  # the first call also loads the models; later ones take milliseconds

# Hostile values, as the raw JSON text of a string (what a client could put on the wire).
LONE_HIGH = r'"I adopted a dog \ud800 named Rex"'
LONE_LOW = r'"\udc00 tail"'
NUL = r'"I adopted\u0000 a dog"'


def _long(n: int) -> str:
    return json.dumps("x" * n)


# (tool, field, the raw JSON of the other arguments, or None): each field of each tool that takes text.
FIELDS = [
    ("add_memory", "text", None, MAX_TURN_CHARS),
    ("add_memory", "speaker", '"text": "hello"', MAX_ID_CHARS),
    ("add_memory", "timestamp", '"text": "hello"', MAX_ID_CHARS),
    ("add_memories", "text", None, MAX_TURN_CHARS),  # in the second of two messages
    ("add_memories", "speaker", '"text": "hello"', MAX_ID_CHARS),
    ("add_memories", "timestamp", '"text": "hello"', MAX_ID_CHARS),
    ("search_memories", "query", None, MAX_TURN_CHARS),
    ("delete_memory", "memory_id", None, MAX_ID_CHARS),
    ("build_context", "query", None, MAX_TURN_CHARS),
    ("build_context", "stm", '"query": "dog"', MAX_TURN_CHARS),
]


def _case(tool: str, field: str, others: str | None, value: str) -> tuple[str, str]:
    """The raw ``arguments`` object of a call putting ``value`` (raw JSON) into ``field``."""
    if field == "stm":
        value = f'["a recent turn", {value}]'
    message = "{" + (f"{others}, " if others else "") + f'"{field}": {value}' + "}"
    if tool == "add_memories":
        return tool, '{"messages": [{"text": "a fine message"}, ' + message + "]}"
    return tool, message


CASES = [
    pytest.param(*_case(tool, field, others, value), id=f"{tool}-{field}-{kind}")
    for tool, field, others, limit in FIELDS
    for kind, value in (("lone-high-surrogate", LONE_HIGH), ("lone-low-surrogate", LONE_LOW), ("nul", NUL),
                        ("over-long", _long(limit + 1)))
] + [
    # where the tools take no text: a number given as hostile text, an unknown argument, an argument's name
    pytest.param("get_memories", r'{"limit": "\ud800"}', id="get_memories-limit-lone-surrogate"),
    pytest.param("get_memories", r'{"offset": "\u0000"}', id="get_memories-offset-nul"),
    pytest.param("search_memories", r'{"query": "dog", "k": "\udfff"}', id="search_memories-k-lone-surrogate"),
    pytest.param("search_memories", r'{"query": "dog", "extra": "\ud800"}', id="search_memories-unknown-argument"),
    pytest.param("add_memory", r'{"te\ud800xt": "hello"}', id="add_memory-argument-name-lone-surrogate"),
    pytest.param("build_context", r'{"query": "dog", "budget": "\ud800"}', id="build_context-budget-lone-surrogate"),
    pytest.param(r"add_\ud800memory", r'{"text": "hello"}', id="tool-name-lone-surrogate"),
    # valid JSON nested deeper than the SDK's parser goes (Python's reads it): was dropped unanswered too
    pytest.param("add_memory", '{"text": "hello", "deep": ' + "[" * 300 + "]" * 300 + "}", id="add_memory-nested-too-deep"),
]


class Server:
    """``lightmem mcp`` in a process of its own, spoken to in raw JSON-RPC lines."""

    def __init__(self, store: Path, log: Path) -> None:
        self.log_path = log
        self._log = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lightmem.cli", "mcp", "--store", str(store), "--user", "alice", "--encoder", "hashing",
             "--selector", "none"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, cwd=ROOT, env=ENV)
        self.lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.next_id = 0

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)

    def send(self, raw: str) -> None:
        self.proc.stdin.write(raw.encode("utf-8") + b"\n")  # raw: ASCII JSON, escapes written as they are
        self.proc.stdin.flush()

    def answer(self, timeout: float = ANSWER_S) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no answer within {timeout} s; server log:\n{self.log_path.read_text(errors='replace')}") from None
        return json.loads(line)

    def request(self, method: str, params_json: str) -> dict[str, Any]:
        self.next_id += 1
        self.send(f'{{"jsonrpc": "2.0", "id": {self.next_id}, "method": "{method}", "params": {params_json}}}')
        reply = self.answer()
        assert reply.get("id") == self.next_id, reply
        return reply

    def call(self, tool: str, arguments_json: str) -> dict[str, Any]:
        return self.request("tools/call", f'{{"name": "{tool}", "arguments": {arguments_json}}}')

    def close(self) -> str:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()
        return self.log_path.read_text(encoding="utf-8", errors="strict")  # a raw surrogate could not be in it


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("mcp-hostile")
    srv = Server(root / "store", root / "stderr.log")
    init = srv.request("initialize", json.dumps({"protocolVersion": "2025-06-18", "capabilities": {},
                                                 "clientInfo": {"name": "raw", "version": "0"}}))
    assert "result" in init, init
    srv.send('{"jsonrpc": "2.0", "method": "notifications/initialized"}')
    yield srv
    srv.close()


def _is_error(reply: dict[str, Any]) -> bool:
    return "error" in reply or reply.get("result", {}).get("isError") is True


def _text(reply: dict[str, Any]) -> str:
    return reply["error"]["message"] if "error" in reply else reply["result"]["content"][0]["text"]


@pytest.mark.parametrize("tool, arguments", CASES)
def test_hostile_text_in_any_field_is_an_error_result(server, tool, arguments):
    reply = server.call(tool, arguments)
    assert _is_error(reply), reply
    text = _text(reply)
    assert len(text) < 1000 and "\x00" not in text and "x" * 300 not in text  # the hostile value is not echoed
    good = server.call("add_memory", '{"text": "still here"}')
    assert not _is_error(good), good


def test_the_error_names_the_field_and_the_problem(server):
    reply = server.call("build_context", r'{"query": "dog", "stm": ["fine", "bad \ud800"]}')
    assert reply["result"]["isError"] and "stm[1]" in _text(reply) and "lone surrogate" in _text(reply)
    reply = server.call("search_memories", '{"query": ' + _long(MAX_TURN_CHARS + 1) + "}")
    assert "query" in _text(reply) and f"{MAX_TURN_CHARS:,}" in _text(reply)


def test_requests_that_are_not_tool_calls_are_answered_too(server):
    for params in (r'{"uri": "file:///\ud800"}', r'{"name": "x", "arguments": {"a": "\udc00"}}'):
        reply = server.request("resources/read" if "uri" in params else "prompts/get", params)
        assert "error" in reply and reply["error"]["code"] == -32602, reply
    server.send(r'{"jsonrpc": "2.0", "method": "notifications/progress", "params": {"x": "\ud800"}}')  # no answer due
    server.send('{"jsonrpc": "2.0", "id": 9999, "method": "tools/call", "params": {')  # not JSON: a parse error, id null
    reply = server.answer()
    assert reply["id"] is None and reply["error"]["code"] == -32700, reply
    assert not _is_error(server.call("search_memories", '{"query": "still here"}'))


def test_every_refusal_is_logged_without_the_hostile_text(server):
    server.call("delete_memory", r'{"memory_id": "m-\ud800"}')
    server.call("add_memory", '{"text": "hello", "speaker": "Al\\u0000ice"}')
    server.call("search_memories", r'{"query": "find \udc01"}')
    log = server.log_path.read_text(encoding="utf-8", errors="strict")  # strict: no raw surrogate was written
    warnings = [line for line in log.splitlines() if line.startswith("WARNING")]
    for tool, problem in (("delete_memory", "lone surrogate (U+D800)"), ("add_memory", "NUL character"),
                          ("search_memories", "lone surrogate (U+DC01)")):
        assert any(tool in line and problem in line for line in warnings), (tool, problem, warnings)
    assert "\x00" not in log and "Logging error" not in log and "Traceback" not in log
    assert "x" * 300 not in log  # over-long values are counted, not copied
