"""``lightmem.client``: ``MemoryClient`` and ``AsyncMemoryClient`` against a real ``lightmem serve`` on 127.0.0.1,
on SQLite and on PostgreSQL: every method's round trip and return types, ``Memory``'s answers for the same store,
the same exception classes, batches, and a server that goes away."""
from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
from conftest import ROOT

from lightmem.client import AsyncMemoryClient, AuthError, MemoryClient, ServerError, ServerUnavailableError
from lightmem.errors import InvalidInputError, ItemNotFoundError, LightMemError, StoreError
from lightmem.server import launch
from lightmem.types import ComposedContext, Filters, HistoryEvent, Hit, ItemKind, MemoryItem

ALICE = "alice-key-" + "0" * 16  # alice and bob
CAROL = "carol-key-" + "0" * 16
ADMIN = "admin-key-" + "0" * 16
KEYS = {ALICE: ["alice", "bob"], CAROL: ["carol"], ADMIN: ["*"]}
# What a memory's JSON carries: the fields compared with Memory's own items.
SERVED = ("id", "user_id", "text", "provenance", "kind", "event_time", "created_at", "topic", "entities", "archived",
          "superseded_by", "metadata")


_free_port = launch.free_port


def _start(store: str, tmp: Path) -> tuple[subprocess.Popen, str]:
    """``lightmem serve`` (one worker: uvicorn in this process) on a free port, once ``/healthz`` answers."""
    keys = tmp / "keys.json"
    keys.write_text(json.dumps(KEYS))
    return launch.start(store, keys, tmp / "server.log", ["--workers", "1", "--encoder", "hashing", "--selector", "none"],
                        timeout=60, cwd=ROOT)


_stop = launch.stop


class Served:
    def __init__(self, base: str, store: str) -> None:
        self.base, self.store = base, store


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def served(request, tmp_path_factory):
    """One server per backend for the module; each test works with users of its own."""
    tmp = tmp_path_factory.mktemp(f"client_{request.param}")
    database = None
    if request.param == "postgres":
        import psycopg

        pg = request.getfixturevalue("pg_server")
        database = f"t_client_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(pg.get_uri(), autocommit=True) as c:
            c.execute(f"CREATE DATABASE {database} TEMPLATE lightmem_template")
        store = pg.get_uri(database)
    else:
        store = str(tmp / "store")
    proc, base = _start(store, tmp)
    try:
        yield Served(base, store)
    finally:
        _stop(proc)
        if database is not None:
            with psycopg.connect(pg.get_uri(), autocommit=True) as c:
                c.execute(f"DROP DATABASE {database} WITH (FORCE)")


def _local(store: str):
    """``Memory`` opened in this process on the server's store (as the server opens it): the reference answers."""
    from lightmem.memory import Memory
    from lightmem.retrieval.stage2 import Stage1Selector

    return Memory.open(store, selector=Stage1Selector())


@pytest.mark.multiprocess
def test_every_method_round_trips_with_memory_s_types_and_answers(served):
    tag = uuid.uuid4().hex[:8]  # this test's memories, on a store other tests share
    with MemoryClient(served.base, ALICE) as memory:
        written = memory.add([f"I adopted a dog named Rex {tag}",
                              {"role": "assistant", "content": f"Rex is a fine name {tag}", "mood": "glad",
                               "metadata": {"topic": tag, "rank": 2}, "timestamp": "2024-05-08"}],
                             user_id="bob", session_id="s1")
        assert [type(i) for i in written] == [MemoryItem, MemoryItem]
        first, second = written
        assert first.user_id == "bob" and first.kind is ItemKind.EPISODIC and first.text == f"user: I adopted a dog named Rex {tag}"
        assert second.text.startswith("assistant: Rex") and second.metadata["mood"] == "glad"
        assert second.metadata["topic"] == tag and second.metadata["rank"] == 2
        assert second.event_time == pytest.approx(1715126400.0) and second.provenance and not second.archived
        assert memory.add({"speaker": "Bob", "text": f"I run marathons {tag}", "metadata": {"topic": tag, "rank": 5}},
                          user_id="bob", timestamp=1715126400)[0].event_time == 1715126400
        # the write policy travels by name: under "agent" a question and its short answer are turns, not memories
        assert memory.add([f"Where do I live {tag}?", {"role": "assistant", "content": "Lisbon."}], user_id="bob",
                          policy="agent") == []
        with pytest.raises(InvalidInputError, match="policy"):
            memory.add("x", user_id="bob", policy="some")

        # reads: Memory's items for the same store, on every field the API carries
        got = memory.get(first.id, "bob")
        listed = memory.get_all("bob", metadata={"topic": tag})
        assert [i.id for i in listed] == [second.id, memory.get_all("bob")[-1].id]
        assert [i.id for i in memory.get_all("bob", metadata={"rank": {"$gte": 3}}) if i.metadata.get("topic") == tag] \
            == [listed[1].id]
        page = memory.get_all("bob", limit=1, offset=1)
        assert len(page) == 1 and page[0].id == memory.get_all("bob")[1].id
        hits = memory.search(f"dog named Rex {tag}", "bob", k=3)
        assert hits and all(isinstance(h, Hit) and isinstance(h.item, MemoryItem) for h in hits)
        assert hits[0].item.id == first.id and hits[0].item.user_id == "bob" and set(hits[0].scores)
        only = memory.search(f"Rex {tag}", "bob", k=5, filters={"metadata": {"topic": tag, "rank": 2}})
        assert [h.item.id for h in only] == [second.id]
        as_filters = Filters.from_mapping({"metadata": {"topic": tag, "rank": {"$lte": 2}}, "kinds": ["episodic"],
                                           "time_from": "2024-05-01"})
        assert [h.item.id for h in memory.search(f"Rex {tag}", "bob", k=5, filters=as_filters)] == [second.id]
        local = _local(served.store)
        try:
            assert {f: getattr(got, f) for f in SERVED} == {f: getattr(local.get(first.id, "bob"), f) for f in SERVED}
            assert [{f: getattr(i, f) for f in SERVED} for i in memory.get_all("bob")] == \
                   [{f: getattr(i, f) for f in SERVED} for i in local.get_all("bob")]
            mine = local.search(f"dog named Rex {tag}", "bob", k=3)
            assert [(h.item.id, h.item.text) for h in hits] == [(h.item.id, h.item.text) for h in mine]
            assert [h.score for h in hits] == pytest.approx([h.score for h in mine])
        finally:
            local.close()

        ctx = memory.build_context(f"What is my dog called? {tag}", "bob", stm=["user: hi"], budget=300)
        assert isinstance(ctx, ComposedContext) and ctx.budget == 300 and 0 < ctx.n_tokens <= 300
        local = _local(served.store)
        try:  # the same memories in the same rank order, and the prompt's order of them, as Memory gives
            mine = local.build_context(f"What is my dog called? {tag}", "bob", stm=["user: hi"], budget=300)
            assert [m.id for m in ctx.memories] == [m.id for m in mine.memories]
            assert [m.id for m in ctx.in_prompt_order()] == [m.id for m in mine.in_prompt_order()]
            shown = [mine.prompt.index(m.text.split(": ", 1)[-1][:40]) for m in mine.in_prompt_order()]
            assert shown == sorted(shown)  # in_prompt_order is the order the prompt shows them
        finally:
            local.close()
        assert "Rex" in ctx.prompt and first.id in {m.id for m in ctx.memories} and ctx.stm_turns_kept == 1
        assert all(isinstance(m, MemoryItem) and m.user_id == "bob" for m in ctx.memories)
        narrow = memory.build_context(f"Rex {tag}", "bob", filters={"metadata": {"topic": tag, "rank": 2}})
        assert [m.id for m in narrow.memories] == [second.id]
        assert len(memory.build_context(f"Rex {tag}", "bob", k=1).memories) == 1

        # changes
        changed = memory.update(first.id, "bob", text=f"I adopted a dog named Max {tag}", keep_history=True,
                                metadata={"topic": tag, "renamed": True})
        assert isinstance(changed, MemoryItem) and changed.text.endswith(f"Max {tag}") and changed.metadata["renamed"]
        history = memory.history(first.id, "bob")
        assert all(isinstance(e, HistoryEvent) and e.item_id == first.id for e in history)
        assert [e.event for e in history][-1] == "UPDATE" and history[-1].old_text.endswith(f"Rex {tag}")
        assert memory.archive(first.id, "bob").archived is True
        with pytest.raises(ItemNotFoundError):
            memory.get(first.id, "bob")  # as Memory.get: an archived memory only with include_archived
        assert memory.get(first.id, "bob", include_archived=True).archived
        assert first.id not in {i.id for i in memory.get_all("bob")}
        assert first.id in {i.id for i in memory.get_all("bob", include_archived=True)}
        assert memory.restore(first.id, "bob").archived is False and memory.get(first.id, "bob").id == first.id

        # memories addressed by a key
        put = memory.put(f"pref-{tag}", "likes tea", "bob", metadata={"ns": "prefs"}, timestamp="2024-01-02")
        assert isinstance(put, MemoryItem) and put.text == "likes tea" and put.metadata == {"ns": "prefs", "key": f"pref-{tag}"}
        again = memory.put(f"pref-{tag}", "likes coffee", "bob")
        assert again.id == put.id and memory.get_by_key(f"pref-{tag}", "bob").text == "likes coffee"
        odd = memory.put("a key, with spaces & ü?#", "x", "bob")  # quoted as one path segment
        assert memory.get_by_key("a key, with spaces & ü?#", "bob").id == odd.id

        # erasure
        removed = memory.delete(second.id, "bob")
        assert removed["items"] == 1 and isinstance(removed, dict)
        with pytest.raises(ItemNotFoundError):
            memory.get(second.id, "bob")
        assert memory.history(second.id, "bob")[-1].event == "DELETE"

    with MemoryClient(served.base, ADMIN) as admin:
        assert {"bob"} <= set(admin.users())
        assert admin.delete_user("bob")["items"] >= 3
        assert admin.get_all("bob") == [] and "bob" not in admin.users()


@pytest.mark.multiprocess
def test_the_same_exceptions_as_memory(served):
    with MemoryClient(served.base, ALICE) as memory:
        with pytest.raises(InvalidInputError, match="text") as bad:
            memory.add({"speaker": "Alice", "text": "   "}, user_id="alice")
        assert bad.value.status_code == 422 and isinstance(bad.value, ValueError)
        with pytest.raises(InvalidInputError, match="k"):
            memory.search("anything", "alice", k=0)
        with pytest.raises(InvalidInputError, match=r"\$near"):
            memory.get_all("alice", metadata={"rank": {"$near": 3}})
        with pytest.raises(InvalidInputError, match="user_id"):
            memory.search("anything", "", k=1)
        with pytest.raises(InvalidInputError):  # not JSON: refused before a request, as Memory refuses it
            memory.add({"text": "x", "metadata": {"n": float("nan")}}, user_id="alice")
        slashed = memory.put("a/b", "x", "alice")  # a key may hold '/': its route takes the rest of the path
        assert memory.get_by_key("a/b", "alice").id == slashed.id
        memory.delete(slashed.id, "alice")
        for call in (lambda: memory.get("0123456789abcdef", "alice"), lambda: memory.delete("nope", "alice"),
                     lambda: memory.update("nope", "alice", text="x"), lambda: memory.archive("nope", "alice"),
                     lambda: memory.get_by_key("never-put", "alice"), lambda: memory.get("a/b", "alice")):
            with pytest.raises(ItemNotFoundError, match="has no item"):
                call()
        assert memory.history("nope", "alice") == []  # as Memory.history
        item = memory.add("a private thing", user_id="alice")[0]
        with pytest.raises(ItemNotFoundError):  # another user's id: not found, as an unknown one
            memory.get(item.id, "bob")
        with pytest.raises(AuthError, match="may not act for user 'carol'") as denied:
            memory.search("anything", "carol")
        assert denied.value.status_code == 403 and isinstance(denied.value, LightMemError)
        with pytest.raises(AuthError, match="admin"):
            memory.users()
    with MemoryClient(served.base, "not-a-key-of-the-server-000") as stranger:
        with pytest.raises(AuthError, match="API key") as unknown:
            stranger.get_all("alice")
        assert unknown.value.status_code == 401
    with MemoryClient(served.base + "/not-lightmem", ALICE) as lost:
        with pytest.raises(ServerError, match="no such route"):
            lost.get_all("alice")


@pytest.mark.multiprocess
def test_batch_checks_every_op_first_and_atomic_is_all_or_nothing(served):
    with MemoryClient(served.base, ALICE) as memory:
        keep = memory.add("I live in Oslo", user_id="alice")[0]
        before = memory.get_all("alice")
        bad = [{"op": "add", "messages": ["I moved to Bergen"]},
               {"op": "update", "item_id": keep.id, "keep_history": "yes"},
               {"op": "delete", "item_id": keep.id}]
        with pytest.raises(InvalidInputError, match=r"ops(\.1\.|\[1\])"):
            memory.batch(bad, user_id="alice")
        with pytest.raises(AuthError, match=r"ops\[1\]"):
            memory.batch([{"op": "add", "messages": ["x"]}, {"op": "add", "user_id": "carol", "messages": ["y"]}],
                         user_id="alice")
        assert memory.get_all("alice") == before  # nothing written

        results = memory.batch([{"op": "add", "messages": ["I moved to Bergen", {"role": "assistant", "content": "Nice",
                                                                                  "metadata": {"n": 1}}],
                                 "timestamp": "2024-06-01"},
                                {"op": "update", "item_id": keep.id, "text": "I lived in Oslo", "topic": "home"},
                                {"op": "delete", "user_id": "alice", "item_id": "missing-id"},
                                {"op": "add", "user_id": "bob", "messages": "bob's turn"}], user_id="alice")
        assert [(r["index"], r["op"], r["status"]) for r in results] == \
            [(0, "add", "ok"), (1, "update", "ok"), (2, "delete", "not_found"), (3, "add", "ok")]
        assert [type(i) for i in results[0]["items"]] == [MemoryItem, MemoryItem] and "item" not in results[0]
        assert results[0]["items"][1].metadata["n"] == 1 and results[0]["items"][0].event_time == pytest.approx(1717200000)
        assert isinstance(results[1]["item"], MemoryItem) and results[1]["item"].topic == "home"
        assert "has no item" in results[2]["error"] and results[3]["items"][0].user_id == "bob"
        deleted = memory.batch([{"op": "delete", "item_id": results[0]["items"][0].id}], user_id="alice")
        assert deleted[0]["status"] == "ok" and deleted[0]["removed"]["items"] == 1

        before = memory.get_all("alice")
        with pytest.raises(ItemNotFoundError, match=r"ops\[1\]"):
            memory.batch([{"op": "add", "messages": ["never stored"]}, {"op": "delete", "item_id": "missing-id"}],
                         user_id="alice", atomic=True)
        assert memory.get_all("alice") == before
        done = memory.batch([{"op": "add", "messages": ["stored together"]},
                             {"op": "update", "item_id": keep.id, "metadata": {"atomic": True}}], "alice", atomic=True)
        assert [r["status"] for r in done] == ["ok", "ok"] and memory.get(keep.id, "alice").metadata == {"atomic": True}


@pytest.mark.multiprocess
def test_the_async_client_does_the_same(served):
    async def main() -> None:
        async with AsyncMemoryClient(served.base, CAROL) as memory:
            items = await memory.add([{"speaker": "Carol", "text": "My sister lives in Lima", "metadata": {"who": "sis"}},
                                      "I play the cello"], user_id="carol")
            assert [type(i) for i in items] == [MemoryItem, MemoryItem]
            found = await asyncio.gather(*(memory.search(q, "carol", k=2) for q in ("sister Lima", "cello", "Lima")))
            assert [hits[0].item.id for hits in found] == [items[0].id, items[1].id, items[0].id]
            assert isinstance(found[0][0], Hit)
            ctx = await memory.build_context("Where does my sister live?", "carol", filters={"metadata": {"who": "sis"}})
            assert isinstance(ctx, ComposedContext) and [m.id for m in ctx.memories] == [items[0].id]
            assert (await memory.get(items[0].id, "carol")).metadata["who"] == "sis"
            assert [i.id for i in await memory.get_all("carol", metadata={"who": "sis"})] == [items[0].id]
            assert (await memory.update(items[1].id, "carol", text="I play the viola")).text.endswith("viola")
            assert [e.event for e in await memory.history(items[1].id, "carol")][-1] == "UPDATE"
            assert (await memory.archive(items[1].id, "carol")).archived
            assert (await memory.restore(items[1].id, "carol")).archived is False
            put = await memory.put("k1", "prefers mornings", "carol")
            assert (await memory.get_by_key("k1", "carol")).id == put.id
            results = await memory.batch([{"op": "delete", "item_id": put.id}, {"op": "delete", "item_id": "nope"}],
                                         user_id="carol")
            assert [r["status"] for r in results] == ["ok", "not_found"]
            with pytest.raises(InvalidInputError, match=r"ops(\.0\.|\[0\])"):
                await memory.batch([{"op": "update", "item_id": items[0].id}], "carol", atomic=True)
            assert (await memory.delete(items[0].id, "carol"))["items"] == 1
            with pytest.raises(ItemNotFoundError):
                await memory.get(items[0].id, "carol")
            with pytest.raises(AuthError):
                await memory.get_all("alice")
            with pytest.raises(AuthError):
                await memory.users()
            assert (await memory.delete_user("carol"))["items"] >= 1
            assert await memory.get_all("carol") == []

    asyncio.run(main())


@pytest.mark.multiprocess
def test_a_server_that_goes_away_raises_server_unavailable(tmp_path):
    proc, base = _start(str(tmp_path / "store"), tmp_path)
    memory, later = MemoryClient(base, ALICE, timeout=10), AsyncMemoryClient(base, ALICE, timeout=10)
    try:
        memory.add("said before the crash", user_id="alice")  # a kept-alive connection to the server
        proc.kill()
        proc.wait()
        with pytest.raises(ServerUnavailableError, match=f"server at {base}") as gone:
            memory.add("said after the crash", user_id="alice")
        assert isinstance(gone.value, StoreError) and gone.value.status_code is None
        assert isinstance(gone.value.__cause__, httpx.HTTPError)  # chained, not raised
        with pytest.raises(ServerUnavailableError, match="could not be reached.*nothing was sent"):
            memory.search("crash", "alice")

        async def after() -> None:
            with pytest.raises(ServerUnavailableError, match=f"server at {base}"):
                await later.get_all("alice")

        asyncio.run(after())
    finally:
        memory.close()
        asyncio.run(later.aclose())
        _stop(proc)


class _Broken(threading.Thread):
    """A TCP server on 127.0.0.1 that reads each request, then ``answer``s it (bytes), or drops the connection
    (None), or never answers ("hang")."""

    def __init__(self, answer: bytes | str | None) -> None:
        super().__init__(daemon=True)
        self.answer, self.sock = answer, socket.create_server(("127.0.0.1", 0))
        self.base = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: list[socket.socket] = []

    def run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.recv(65536)
            if self.answer == "hang":
                self.held.append(conn)
                continue
            if self.answer is not None:
                conn.sendall(self.answer)
            conn.close()

    def __enter__(self) -> _Broken:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # Stop the thread before closing its socket: closed first, the number of the socket could go to the next
        # server's socket while this thread is about to accept on it, and this one would answer that server's calls.
        self.sock.shutdown(socket.SHUT_RDWR)  # wakes the thread's accept, which returns
        self.join(5)
        self.sock.close()
        for conn in self.held:
            conn.close()


def test_a_dropped_connection_a_timeout_and_a_foreign_answer(tmp_path):
    with _Broken(None) as dropping, MemoryClient(dropping.base, ALICE) as memory:
        with pytest.raises(ServerUnavailableError, match="dropped the connection.*whether the write was applied is unknown"):
            memory.add("mid-call", user_id="alice")
    with _Broken("hang") as hanging, MemoryClient(hanging.base, ALICE, timeout=0.3) as memory:
        t0 = time.monotonic()
        with pytest.raises(ServerUnavailableError, match=r"did not answer within 0\.3 s"):
            memory.search("anything", "alice")
        assert time.monotonic() - t0 < 5

        async def hang() -> None:
            async with AsyncMemoryClient(hanging.base, ALICE, timeout=0.3) as slow:
                with pytest.raises(ServerUnavailableError, match="did not answer"):
                    await slow.get_all("alice")

        asyncio.run(hang())
    html = b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/html\r\nContent-Length: 5\r\n\r\noops!"
    with _Broken(html) as foreign, MemoryClient(foreign.base, ALICE) as memory:
        with pytest.raises(ServerError, match="500"):
            memory.get_all("alice")
    with pytest.raises(InvalidInputError, match="base_url"):
        MemoryClient("127.0.0.1:8000", ALICE)


@pytest.mark.multiprocess
def test_the_client_needs_no_server_package():
    code = "import sys, lightmem.client; assert 'lightmem.server' not in sys.modules and 'fastapi' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env={**os.environ})


METHODS = ("add", "batch", "put", "get_by_key", "search", "build_context", "get", "get_all", "update", "archive",
           "restore", "delete", "delete_user", "history", "users")


def test_the_clients_have_memory_s_methods_and_arguments():
    import inspect

    from lightmem.memory import Memory

    for name in METHODS:
        mine, theirs = inspect.signature(getattr(MemoryClient, name)), inspect.signature(getattr(Memory, name))
        assert set(mine.parameters) <= set(theirs.parameters), name  # nothing Memory does not take
        for p in mine.parameters.values():  # the same defaults, and a positional argument in Memory's place
            assert p.default == theirs.parameters[p.name].default, (name, p.name)
            if p.kind is p.POSITIONAL_OR_KEYWORD:
                assert list(mine.parameters).index(p.name) == list(theirs.parameters).index(p.name), (name, p.name)
        assert inspect.iscoroutinefunction(getattr(AsyncMemoryClient, name)), name
        assert inspect.signature(getattr(AsyncMemoryClient, name)) == mine, name


def test_what_the_api_cannot_carry_is_refused_before_any_request():
    nobody = f"http://127.0.0.1:{_free_port()}"  # nothing listens: a request would be ServerUnavailableError
    with MemoryClient(nobody, ALICE) as memory:
        for call, why in [(lambda: memory.add({"text": "a photo", "caption": "a dog"}, "alice"), "caption"),
                          (lambda: memory.add([{"text": "a", "session_id": "s1"}, {"text": "b", "session_id": "s2"}],
                                              "alice"), "one session_id"),
                          (lambda: memory.add([], "alice"), "empty"),
                          (lambda: memory.add(42, "alice"), "messages must be"),
                          (lambda: memory.batch([{"op": "add", "messages": ["x"], "context": ["y"]}], "alice"),
                           r"ops\[0\] \(add\): the HTTP API carries no context"),
                          (lambda: memory.batch({"op": "add"}, "alice"), "list of operations"),
                          (lambda: memory.build_context("q", "alice", stm="one turn"), "list of recent turns"),
                          (lambda: memory.search("q", "alice", filters=["time_from"]), "dict or Filters"),
                          (lambda: memory.get("  ", "alice"), "item_id")]:
            with pytest.raises(InvalidInputError, match=why):
                call()
        with pytest.raises(ServerUnavailableError, match="could not be reached"):
            memory.add({"text": "x", "session_id": "s1"}, "alice", session_id="s1")  # one session: sent


class _Hostile(threading.Thread):
    """An HTTP server on 127.0.0.1 that reads each whole request, then hands the connection to ``answer(conn)`` on
    a thread of its own (a server that drips, floods or answers nonsense); ``sent`` counts the bytes it sent."""

    def __init__(self, answer) -> None:
        super().__init__(daemon=True)
        self.answer, self.sock, self.sent = answer, socket.create_server(("127.0.0.1", 0)), 0
        self.base = f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head, body = data.split(b"\r\n\r\n", 1)
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(body) < length:
            body += conn.recv(65536)
        try:
            self.answer(self, conn)
        except OSError:  # the client hung up: what these servers are for
            pass
        finally:
            conn.close()

    def send(self, conn: socket.socket, data: bytes) -> None:
        conn.sendall(data)
        self.sent += len(data)

    def __enter__(self) -> _Hostile:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.join(5)
        self.sock.close()


def _head(length: int | None = None) -> bytes:
    size = b"" if length is None else b"Content-Length: %d\r\n" % length
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + size + b"Connection: close\r\n\r\n"


def _drip(server: _Hostile, conn: socket.socket, data: bytes) -> None:
    for i in range(len(data)):
        server.send(conn, data[i:i + 1])
        time.sleep(0.25)


def test_timeout_bounds_the_whole_call_even_when_the_server_drips_its_answer():
    # Issue 74: a server sending one byte a second made a call with timeout=3 take 42 s and return normally.
    answer = b'{"hits": []}' + b" " * 40  # 13 s at 4 bytes a second
    body_drip = lambda server, conn: (server.send(conn, _head(len(answer))), _drip(server, conn, answer))  # noqa: E731
    head_drip = lambda server, conn: (_drip(server, conn, _head(len(answer))), server.send(conn, answer))  # noqa: E731
    for answer_slowly in (body_drip, head_drip):
        with _Hostile(answer_slowly) as slow:
            with MemoryClient(slow.base, ALICE, timeout=1) as memory:
                t0 = time.monotonic()
                with pytest.raises(ServerUnavailableError, match=r"did not answer within 1 s"):
                    memory.search("anything", "alice")
                assert time.monotonic() - t0 < 5

            async def call() -> None:
                async with AsyncMemoryClient(slow.base, ALICE, timeout=1) as memory:
                    with pytest.raises(ServerUnavailableError, match=r"did not answer within 1 s"):
                        await memory.search("anything", "alice")

            t0 = time.monotonic()
            asyncio.run(call())
            assert time.monotonic() - t0 < 5


def test_an_answer_larger_than_the_cap_is_refused_as_it_streams():
    def flood(server: _Hostile, conn: socket.socket, declared: bool) -> None:
        server.send(conn, _head(64 * 2**20 + 12 if declared else None) + b'{"hits": ["')
        for _ in range(64):
            server.send(conn, b"x" * 2**20)
        server.send(conn, b'"]}')

    with MemoryClient("http://127.0.0.1:1", ALICE) as unused:
        assert unused.max_response_bytes == 64 * 2**20  # the documented default
    for declared in (True, False):  # a Content-Length that says so, or a body that only grows
        with _Hostile(lambda server, conn, declared=declared: flood(server, conn, declared)) as big:
            with MemoryClient(big.base, ALICE, max_response_bytes=2**20) as memory:
                with pytest.raises(ServerError, match=r"larger than max_response_bytes \(1,048,576 bytes\)") as refused:
                    memory.search("anything", "alice")
                assert refused.value.status_code == 200

            async def call() -> None:
                async with AsyncMemoryClient(big.base, ALICE, max_response_bytes=2**20) as memory:
                    with pytest.raises(ServerError, match="larger than max_response_bytes"):
                        await memory.search("anything", "alice")

            asyncio.run(call())
            time.sleep(0.2)
            assert big.sent < 2 * 32 * 2**20  # both calls hung up long before the 64 MiB each was offered
    hits = {"hits": [{"id": f"m{i}", "text": "x" * 1000, "score": 1.0, "provenance": [], "event_time": 0, "kind":
                      "episodic"} for i in range(1500)]}  # 1.6 MB: under the default cap, read whole
    whole = json.dumps(hits).encode()
    with _Hostile(lambda server, conn: server.send(conn, _head(len(whole)) + whole)) as fine, \
            MemoryClient(fine.base, ALICE) as memory:
        assert len(memory.search("anything", "alice")) == 1500
    for bad in (0, -1, True, 2.5, "64MB"):
        with pytest.raises(InvalidInputError, match="max_response_bytes"):
            MemoryClient("http://127.0.0.1:1", ALICE, max_response_bytes=bad)


def test_a_compressed_answer_is_refused_before_it_is_expanded():
    """A client that let httpx decode gzip counted the cap after each decompressed chunk: 822 bytes of gzip inside gzip
    became 400 MB in memory. The client asks for identity and reads the body raw, so a compressed answer is refused."""
    import gzip

    bomb = gzip.compress(gzip.compress(b" " * (200 * 2**20)))

    def answer(server: _Hostile, conn: socket.socket) -> None:
        server.send(conn, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip, gzip\r\n"
                    + f"Content-Length: {len(bomb)}\r\n\r\n".encode() + bomb)

    with _Hostile(answer) as server, MemoryClient(server.base, ALICE, max_response_bytes=2**20) as memory:
        with pytest.raises(ServerError, match="compressed"):
            memory.search("anything", "alice")

        async def call() -> None:
            async with AsyncMemoryClient(server.base, ALICE, max_response_bytes=2**20) as client:
                with pytest.raises(ServerError, match="compressed"):
                    await client.search("anything", "alice")

        asyncio.run(call())
    assert memory._options["headers"]["Accept-Encoding"] == "identity"


MALFORMED = {"a list": b"[1, 2]", "a string": b'"ok"', "null": b"null", "no hits": b"{}", "hits a number": b'{"hits": 5}',
             "a hit without score": b'{"hits": [{"id": "a", "text": "t"}]}',
             "a hit of the wrong types": b'{"hits": [{"id": 5, "text": [], "score": 1}]}',
             "an unknown kind": b'{"hits": [{"id": "a", "text": "t", "score": 1, "kind": "zz"}]}',
             "a null item": b'{"items": [null], "hits": [null]}', "items an object": b'{"items": {"a": 1}}',
             "nested 100,000 deep": b"[" * 100_000 + b"]" * 100_000, "not JSON": b"<html>hi</html>",
             "invalid UTF-8": b'{"hits": "\xff"}', "removed a list": b'{"removed": [1], "prompt": 5}'}


@pytest.mark.parametrize("body", MALFORMED.values(), ids=MALFORMED.keys())
def test_every_malformed_answer_is_server_error(body):
    calls = [lambda m: m.search("q", "alice"), lambda m: m.get_all("alice"), lambda m: m.get("a", "alice"),
             lambda m: m.delete("a", "alice"), lambda m: m.delete_user("alice"), lambda m: m.history("a", "alice"),
             lambda m: m.build_context("q", "alice"), lambda m: m.users(), lambda m: m.add("hi", "alice"),
             lambda m: m.batch([{"op": "delete", "id": "a"}], "alice"), lambda m: m.put("k", "v", "alice")]
    with _Hostile(lambda server, conn: server.send(conn, _head(len(body)) + body)) as odd, \
            MemoryClient(odd.base, ALICE) as memory:
        for call in calls:
            with pytest.raises(ServerError, match="is not"):  # the API's, or JSON
                call(memory)

        async def call_async() -> None:
            async with AsyncMemoryClient(odd.base, ALICE) as later:
                with pytest.raises(ServerError):
                    await later.search("q", "alice")

        asyncio.run(call_async())
