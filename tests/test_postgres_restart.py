"""The PostgreSQL store as a service: a connection pool, retry on transient errors, statement timeouts,
and writes that stay exactly-once while the database server restarts under them.

The retry policy is checked on its own (no server), the store's handling of lost connections on the
shared test server (connections killed, a COMMIT whose answer is lost), and a server restart on a
PostgreSQL of this module's own (pgserver in a tmp dir), restarted and crashed under a writing process.
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest
from conftest import ROOT

from lightmem.errors import StoreError
from lightmem.stores import open_store
from lightmem.stores.postgres import conn as pg_conn
from lightmem.types import MemoryItem, Turn

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed (pip install -e '.[postgres]')")
pytest.importorskip("psycopg_pool", reason="the postgres extra is not installed (pip install -e '.[postgres]')")

T0 = 1_700_000_000.0
VEC = np.asarray([[1, 0, 0, 0]], dtype=np.float32)


# -- the retry policy, on its own ------------------------------------------------------------------------
def _failing(errors: list[BaseException], result: str = "done"):
    calls = []

    def fn() -> str:
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return result

    return fn, calls


def test_a_transient_error_is_retried_after_a_backoff_then_succeeds():
    fn, calls = _failing([psycopg.errors.AdminShutdown("terminating connection due to administrator command")])
    slept: list[float] = []
    checked: list[BaseException] = []
    policy = pg_conn.RetryPolicy(retries=3, first_delay=0.2)
    assert pg_conn.retrying(fn, policy, "a read", "db", checked.append, sleep=slept.append) == "done"
    assert len(calls) == 2 and len(checked) == 1
    assert len(slept) == 1 and 0.1 <= slept[0] <= 0.2  # the first delay, randomized between half and all of it


def test_retries_are_bounded_and_end_in_a_clear_store_error():
    lost = [psycopg.OperationalError("server closed the connection unexpectedly") for _ in range(10)]
    fn, calls = _failing(lost)
    slept: list[float] = []
    with pytest.raises(StoreError, match=r"a write on the PostgreSQL store at db failed 4 times on transient errors "
                                         r"\(the last: server closed the connection unexpectedly\)") as err:
        pg_conn.retrying(fn, pg_conn.RetryPolicy(retries=3, first_delay=0.1, max_delay=0.25), "a write", "db",
                         sleep=slept.append)
    assert len(calls) == 4 and isinstance(err.value.__cause__, psycopg.OperationalError)
    assert len(slept) == 3 and all(0.05 <= s <= 0.25 for s in slept) and slept[2] > 0.1  # doubling, capped


def test_only_transient_errors_are_retried():
    errors = psycopg.errors
    transient = [errors.AdminShutdown(), errors.CrashShutdown(), errors.CannotConnectNow(), errors.SerializationFailure(),
                 errors.DeadlockDetected(), errors.ConnectionFailure(), psycopg.OperationalError("connection lost")]
    final = [errors.QueryCanceled(), errors.DiskFull(), errors.UniqueViolation(), errors.UndefinedTable(),
             psycopg.InterfaceError("bad use"), ValueError("not a database error")]
    assert all(pg_conn.is_transient(e) for e in transient)
    assert not any(pg_conn.is_transient(e) for e in final)
    fn, calls = _failing([errors.UniqueViolation("duplicate key")])
    with pytest.raises(errors.UniqueViolation):
        pg_conn.retrying(fn, pg_conn.RetryPolicy(), "a write", "db", sleep=lambda s: None)
    fn, calls = _failing([errors.QueryCanceled("canceling statement due to statement timeout")])
    with pytest.raises(StoreError, match="statement_timeout"):
        pg_conn.retrying(fn, pg_conn.RetryPolicy(), "a read", "db", sleep=lambda s: None)
    assert len(calls) == 1


def test_pool_and_timeout_are_options_of_the_server_store_only(tmp_path):
    s = open_store(tmp_path / "s", dim=4, synchronous="NORMAL")
    s.close()
    for options in ({"pool_size": 8}, {"statement_timeout": pg_conn.DEFAULT_STATEMENT_TIMEOUT_MS}):
        with pytest.raises(ValueError, match=f"{next(iter(options))}: not a setting of the embedded store"):
            open_store(tmp_path / "s", dim=4, **options)
    with pytest.raises(ValueError, match="synchronous: not a setting of a postgresql:// store"):
        open_store("postgresql://nobody@localhost:1/none", dim=4, synchronous="FULL")


# -- the store on the shared test server -----------------------------------------------------------------
def _item(store, user: str, text: str, turn: str) -> MemoryItem:
    return MemoryItem(id=store.new_id(), user_id=user, text=text, provenance=[turn], created_at=T0, event_time=T0,
                      last_access=T0)


def _kill_connections(uri: str) -> int:
    """Terminate every other session on the store's database (what a restart does to them)."""
    with psycopg.connect(uri, autocommit=True) as c:
        return len(c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                             "WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchall())


def _counts(uri: str, user: str) -> tuple[int, int, int]:
    with psycopg.connect(uri) as c:
        (turns, items, adds), = c.execute(
            "SELECT (SELECT COUNT(*) FROM turns WHERE user_id = %(u)s), (SELECT COUNT(*) FROM items WHERE user_id = %(u)s), "
            "(SELECT COUNT(*) FROM history WHERE user_id = %(u)s AND event = 'ADD')", {"u": user}).fetchall()
    return turns, items, adds


def test_every_pooled_connection_gets_the_session_settings(pg_uri):
    store = open_store(pg_uri, dim=4, embedder="e", pool_size=3, statement_timeout=4321, ef_search=77)
    try:
        barrier = threading.Barrier(3, timeout=10)
        seen: list[tuple] = []

        def hold(conn):  # three threads hold three connections at once
            barrier.wait()
            return conn.execute("SELECT pg_backend_pid(), current_setting('statement_timeout'), "
                                "current_setting('hnsw.ef_search')").fetchone()

        threads = [threading.Thread(target=lambda: seen.append(store._db.read(hold))) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len({pid for pid, _, _ in seen}) == 3
        assert {(timeout, ef) for _, timeout, ef in seen} == {("4321ms", "77")}
    finally:
        store.close()


def test_threads_share_one_memory_through_the_pool(pg_uri):
    """Writers and searchers on several threads at once, each on a pooled connection: every write lands
    once and every search sees only its own user's memories."""
    from lightmem.memory import Memory
    from lightmem.models.embedder import HashingEmbedder
    from lightmem.retrieval.stage2 import Stage1Selector

    m = Memory.open(pg_uri, embedder=HashingEmbedder(dim=32), selector=Stage1Selector(), pool_size=3)
    failures: list[BaseException] = []

    def work(user: str) -> None:
        try:
            for i in range(12):
                m.add({"speaker": "x", "text": f"{user} keeps {i} green apples", "id": f"{user}-{i}"}, user_id=user,
                      timestamp=T0 + i)
                hits = m.search(f"How many green apples does {user} keep?", user, k=3)
                assert hits and {h.item.user_id for h in hits} == {user}
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    try:
        threads = [threading.Thread(target=work, args=(f"user{n}",)) for n in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == []
        assert {u: c["items"] for u, c in m.stats().items()} == {f"user{n}": 12 for n in range(5)}
    finally:
        m.close()


def test_lost_connections_are_replaced_and_the_call_retried(pg_uri, caplog):
    store = open_store(pg_uri, dim=4, embedder="e", pool_size=2)
    try:
        store.write("u", [Turn("t1", "u", "x", T0)], [_item(store, "u", "first note", "t1")], VEC, T0)
        assert _kill_connections(pg_uri) >= 1  # the pool's idle connection dies, as in a server restart
        with caplog.at_level(logging.WARNING, logger="lightmem.stores.postgres.conn"):
            assert store.size("u") == 1  # a read: retried on a fresh connection
            _kill_connections(pg_uri)
            written = store.write("u", [Turn("t2", "u", "x", T0)], [_item(store, "u", "second note", "t2")], VEC, T0)
            _kill_connections(pg_uri)
            with store.lock:  # a snapshot begun on a dead connection starts again on a fresh one
                assert store.size("u") == 2
        assert [it.text for it in written] == ["second note"] and _counts(pg_uri, "u") == (2, 2, 2)
        assert sum("retrying" in r.getMessage() for r in caplog.records) >= 3
    finally:
        store.close()


def test_a_search_after_a_restart_starts_its_snapshot_again_and_answers(pg_uri, caplog):
    """A search's snapshot begins with its first read; when that read finds the connection dead, nothing
    was read yet, so it is run again on a fresh connection instead of failing the search."""
    from lightmem.memory import Memory
    from lightmem.models.embedder import HashingEmbedder
    from lightmem.retrieval.stage2 import Stage1Selector

    m = Memory.open(pg_uri, embedder=HashingEmbedder(dim=32), selector=Stage1Selector(), pool_size=2)
    try:
        m.add({"speaker": "x", "text": "Ada keeps bees on the roof", "id": "b1"}, user_id="ada", timestamp=T0)
        before = [h.item.id for h in m.search("Where does Ada keep bees?", "ada", k=3)]
        m.store.drop_views()  # the next search rebuilds the BM25 view, reading inside its snapshot
        assert _kill_connections(pg_uri) >= 1
        with caplog.at_level(logging.WARNING, logger="lightmem.stores.postgres.conn"):
            after = [h.item.id for h in m.search("Where does Ada keep bees?", "ada", k=3)]
        assert after == before and len(after) == 1
        assert any("retrying" in r.getMessage() for r in caplog.records)
    finally:
        m.close()


def test_a_transaction_cut_before_its_commit_runs_again_once(pg_uri):
    """A consolidation cycle whose connection dies mid-transaction is rolled back by the server and
    committed by the retry: one cycle, not two."""
    from lightmem.stores import OfflineChanges

    store = open_store(pg_uri, dim=4, embedder="e")
    calls = []

    def die_once() -> None:  # inside the transaction, before its COMMIT
        calls.append(1)
        if len(calls) == 1:
            _kill_connections(pg_uri)

    try:
        done = store.commit_offline("u", OfflineChanges(), T0, before_commit=die_once)
        assert len(calls) == 2 and done.cycle == 1 and store.graph.last_cycle() == 1
        with psycopg.connect(pg_uri) as c:
            assert c.execute("SELECT COUNT(*) FROM ltm_cycles").fetchone()[0] == 1
    finally:
        store.close()


def _lose_the_reply_once(store, action: str):
    """Make the next COMMIT reach the server (``action``: COMMIT or ROLLBACK) and its answer get lost."""
    real, state = store._db.commit, {"n": 0}

    def commit(conn) -> None:
        state["n"] += 1
        if state["n"] > 1:
            return real(conn)
        conn.execute(action)
        conn.close()
        raise psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly")

    store._db.commit = commit
    return state


@pytest.mark.parametrize("server_did", ["COMMIT", "ROLLBACK"])
def test_a_write_whose_commit_answer_is_lost_is_applied_exactly_once(pg_uri, server_did):
    store = open_store(pg_uri, dim=4, embedder="e")
    try:
        item = _item(store, "u", "a note", "t1")
        state = _lose_the_reply_once(store, server_did)
        written = store.write("u", [Turn("t1", "u", "x", T0)], [item], VEC, T0)
        # committed: pg_xact_status says so, nothing runs again; rolled back: the write runs again, once
        assert state["n"] == (1 if server_did == "COMMIT" else 2)
        assert [it.id for it in written] == [item.id] and _counts(pg_uri, "u") == (1, 1, 1)
        state = _lose_the_reply_once(store, server_did)
        new = store.update("u", item.id, T0 + 1, metadata={"k": 1})
        assert new.metadata == {"k": 1} and [e.event for e in store.history("u", item.id)] == ["ADD", "UPDATE"]
    finally:
        store.close()


def test_a_commit_of_unknown_outcome_replays_only_the_idempotent_write(pg_uri):
    """When the server cannot say whether a COMMIT happened, ``write`` runs again and stores nothing twice
    (its turns and item ids are already there); any other write says its outcome is unknown."""
    store = open_store(pg_uri, dim=4, embedder="e")
    try:
        store._db.outcome = lambda xid: None
        items = [_item(store, "u", "a note", "t1"), _item(store, "u", "another", "t2")]
        turns = [Turn("t1", "u", "x", T0), Turn("t2", "u", "y", T0)]
        _lose_the_reply_once(store, "COMMIT")
        written = store.write("u", turns, items, np.vstack([VEC, VEC]), T0)
        assert [it.id for it in written] == [it.id for it in items] and _counts(pg_uri, "u") == (2, 2, 2)
        _lose_the_reply_once(store, "COMMIT")
        with pytest.raises(StoreError, match="cannot say yet whether it committed"):
            store.update("u", items[0].id, T0 + 1, metadata={"k": 1})
        assert store.get("u", items[0].id).metadata == {"k": 1}  # it had: the caller is told to check
    finally:
        store.close()


def test_a_statement_past_the_timeout_is_canceled_and_named(pg_uri):
    from lightmem.stores.postgres import schema as pg_schema

    store = open_store(pg_uri, dim=4, embedder="e", statement_timeout=200)
    try:
        with psycopg.connect(pg_uri, autocommit=True) as other:  # another writer holds user u's write lock
            other.execute("SELECT pg_advisory_lock(%s, hashtext('u'))", (pg_schema.USER_LOCK_CLASS,))
            t = time.monotonic()
            with pytest.raises(StoreError, match="statement_timeout; nothing of it was stored"):
                store.write("u", [Turn("t1", "u", "x", T0)], [_item(store, "u", "a note", "t1")], VEC, T0)
            assert time.monotonic() - t < 5  # canceled once, not retried
        assert store.write("u", [Turn("t1", "u", "x", T0)], [_item(store, "u", "a note", "t1")], VEC, T0)
        assert _counts(pg_uri, "u") == (1, 1, 1)
    finally:
        store.close()


# -- a server of this module's own, restarted under a writing process --------------------------------------
class Server:
    """A pgserver PostgreSQL in a tmp dir that the tests stop, crash and start."""

    def __init__(self, handle) -> None:
        self.handle = handle
        self.socket_dir = parse_qs(urlsplit(handle.get_uri()).query)["host"][0]

    def database(self, name: str) -> str:
        """A new database with pgvector; its URI."""
        with psycopg.connect(self.handle.get_uri(), autocommit=True) as c:
            c.execute(f"CREATE DATABASE {name}")
        with psycopg.connect(self.handle.get_uri(name), autocommit=True) as c:
            c.execute("CREATE EXTENSION vector")
        return self.handle.get_uri(name)

    def pg_ctl(self, *args: str) -> None:
        from pgserver._commands import pg_ctl

        pg_ctl(["-w", *args], pgdata=self.handle.pgdata, user=self.handle.system_user, timeout=60)

    def stop(self, mode: str = "fast") -> None:
        self.pg_ctl("-m", mode, "stop")

    def start(self) -> None:  # with the options pgserver started it with (its socket directory, no TCP)
        self.pg_ctl("-l", str(self.handle.log), "-o", '-h ""', "-o", f"-k {self.socket_dir}", "start")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pgserver = pytest.importorskip("pgserver", reason="no test PostgreSQL: pgserver is not installed")
    try:
        handle = pgserver.get_server(tmp_path_factory.mktemp("pg-restart"), cleanup_mode="delete")
        psycopg.connect(handle.get_uri(), autocommit=True).close()
    except Exception as exc:
        pytest.skip(f"the test PostgreSQL server (pgserver) could not start: {type(exc).__name__}: {exc}")
    yield Server(handle)
    handle.cleanup()


_WRITER = r"""
import json, logging, os, sys
from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector

uri, stop = sys.argv[1], sys.argv[2]
retried = []
handler = logging.Handler(logging.WARNING)
handler.emit = retried.append
logging.getLogger("lightmem.stores.postgres.conn").addHandler(handler)
m = Memory.open(uri, embedder=HashingEmbedder(dim=32), selector=Stage1Selector(), pool_size=2)
print("READY", flush=True)
i = 0
while not os.path.exists(stop):
    try:
        m.add({"speaker": "Ava", "text": f"Box {i} holds {i} blue marbles", "id": f"T{i}"}, user_id="ava",
              timestamp=1_700_000_000 + i)
        print("ACK", f"T{i}", flush=True)
    except Exception as exc:
        print("ERR", f"T{i}", type(exc).__name__, str(exc).replace("\n", " "), flush=True)
    i += 1
hits = m.search("Which box holds 7 blue marbles?", "ava", k=3)
m.add({"speaker": "Ava", "text": "The red box is empty", "id": "after"}, user_id="ava", timestamp=1_800_000_000)
print("AFTER", json.dumps({"top": [h.item.provenance[0] for h in hits], "retried": len(retried), "why": [r.getMessage() for r in retried]}), flush=True)
m.close()
"""


class _Lines:
    """A child's stdout lines, read as they come."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=lambda: self.lines.extend(line.rstrip("\n") for line in proc.stdout),
                                        daemon=True)
        self._thread.start()

    def acks(self) -> int:
        return sum(line.startswith("ACK ") for line in list(self.lines))

    def wait_for(self, n_acks: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.acks() < n_acks:
            assert proc.poll() is None, f"the writer died: {proc.stderr.read()}"
            assert time.monotonic() < deadline, f"the writer stalled at {self.acks()} writes: {self.lines[-3:]}"
            time.sleep(0.02)


@pytest.mark.postgres
@pytest.mark.multiprocess
def test_writes_stay_exactly_once_while_the_server_restarts_and_crashes(server, tmp_path):
    """A separate process writes turns through Memory while the server is restarted (fast shutdown),
    stopped for a second, and crashed (immediate shutdown, recovery at start): every acknowledged write
    is stored once, none fails, and the same Memory searches and writes afterwards without reopening."""
    stop, uri = tmp_path / "stop", server.database("writer")
    # the writer runs as shipped: its background indexer writes the vectors through the same restarts
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, uri, str(stop)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "LIGHTMEM_BACKGROUND_INDEX": "1"})
    out = _Lines(proc)
    try:
        out.wait_for(20, proc)
        server.pg_ctl("-m", "fast", "restart")  # every connection is terminated (57P01), the server is back at once
        out.wait_for(out.acks() + 20, proc)
        server.stop("fast")
        time.sleep(1.0)  # down for a while: writes wait for the pool to reconnect
        server.start()
        out.wait_for(out.acks() + 20, proc)
        server.stop("immediate")  # a crash: in-flight transactions are lost, committed ones recovered
        server.start()
        out.wait_for(out.acks() + 20, proc)
    finally:
        stop.touch()
        try:
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, proc.stderr.read()
    out._thread.join(timeout=5)
    errors = [line for line in out.lines if line.startswith("ERR ")]
    acked = [line.split()[1] for line in out.lines if line.startswith("ACK ")]
    after = json.loads(next(line for line in out.lines if line.startswith("AFTER "))[len("AFTER "):])
    assert errors == [] and len(acked) >= 80
    assert after["retried"] >= 3, after["why"]  # the writer did lose its connections (and retried)
    assert "T7" in after["top"]  # the same Memory searches after the restarts...
    with psycopg.connect(uri) as c:
        turns = [r[0] for r in c.execute("SELECT turn_id FROM turns WHERE user_id = 'ava'")]
        provenance = [json.loads(r[0])[0] for r in c.execute("SELECT provenance FROM items WHERE user_id = 'ava'")]
        adds = c.execute("SELECT COUNT(*) FROM history WHERE user_id = 'ava' AND event = 'ADD'").fetchone()[0]
    assert sorted(turns) == sorted(provenance) == sorted([*acked, "after"])  # ...and writes: all there, each once
    assert adds == len(turns)


@pytest.mark.postgres
@pytest.mark.multiprocess
def test_a_call_while_the_server_is_down_is_a_clear_error_and_the_store_recovers(server, monkeypatch):
    monkeypatch.setattr(pg_conn, "WAIT_S", 1.0)  # how long a call waits for a connection: short for the test
    store = open_store(server.database("down"), dim=4, embedder="e", retries=2)
    try:
        store.write("down", [Turn("t1", "down", "x", T0)], [_item(store, "down", "a note", "t1")], VEC, T0)
        server.stop("fast")
        try:
            t = time.monotonic()
            with pytest.raises(StoreError, match="no connection to the PostgreSQL store .* within 1 s"):
                store.size("down")
            assert time.monotonic() - t < 10
            with pytest.raises(StoreError, match="within 1 s"):
                store.write("down", [Turn("t2", "down", "x", T0)], [_item(store, "down", "lost", "t2")], VEC, T0)
        finally:
            server.start()
        deadline = time.monotonic() + 15
        while True:  # the pool reconnects in the background: the same store works again
            try:
                assert store.size("down") == 1
                break
            except StoreError:
                assert time.monotonic() < deadline, "the store did not recover after the server came back"
        store.write("down", [Turn("t2", "down", "x", T0)], [_item(store, "down", "kept", "t2")], VEC, T0)
        assert [it.text for it in store.list("down")] == ["a note", "kept"]
    finally:
        store.close()



def test_without_pipeline_mode_the_same_statements_run_one_by_one(pg_uri, monkeypatch):
    """An older client libpq (< 14) has no pipeline mode: writes and snapshot reads still work."""
    import psycopg

    monkeypatch.setattr(psycopg.Pipeline, "is_supported", classmethod(lambda cls: False))
    store = open_store(pg_uri, dim=4, embedder="e")
    try:
        store.write("u", [Turn("t1", "u", "x", T0)], [_item(store, "u", "first note", "t1")], VEC, T0)
        with store.lock:
            assert store.size("u") == 1
        assert _counts(pg_uri, "u") == (1, 1, 1)
    finally:
        store.close()
