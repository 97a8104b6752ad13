"""View snapshots of the embedded store: a large user's view stored whole loads back identical, the
changes made since (by this process or another) are replayed, an unreadable or outdated snapshot is
rebuilt from the tables, and erasing a memory leaves no copy of it in a snapshot."""
from __future__ import annotations

import logging
import sqlite3

import numpy as np
import pytest

from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.stores.embedded import faults as sqlite_faults
from lightmem.stores.embedded import snapshot as view_snapshot
from lightmem.stores.views.lexical import LexicalIndex
from lightmem.stores.views.vector import VectorIndex
from lightmem.types import Filters

PLACES = ["Lisbon", "Kyoto", "Oslo", "Lima", "Cairo", "Quito", "Perth", "Riga"]
HOBBIES = ["cello", "pottery", "chess", "climbing", "baking", "sailing", "astronomy", "running"]
QUERIES = ["Where did I take pottery lessons?", "Who went to Kyoto with friend 7?", "chess in Oslo", "the 31st trip"]


def _open(path, snapshot_min_items: int | None = 30) -> Memory:
    return Memory.open(str(path), embedder=HashingEmbedder(64), selector=Stage1Selector(), synchronous="NORMAL",
                       snapshot_min_items=snapshot_min_items)


def _fill(memory: Memory, user: str, n: int, start: int = 0) -> list:
    items = memory.add([{"speaker": "Ana", "text": f"On trip {i} I took {HOBBIES[i % 8]} lessons in {PLACES[(i * 3) % 8]} "
                         f"with friend {i % 11}."} for i in range(start, start + n)], user_id=user)
    memory.flush_index()  # snapshots are written of views whose items all have their vectors
    return items


def _answers(memory: Memory, user: str) -> list:
    out = []
    for q in QUERIES:
        for f in (None, Filters(tags=["Kyoto"]), Filters(include_superseded=True)):
            out.append([(h.item.id, round(h.score, 6)) for h in memory.search(q, user_id=user, k=8, filters=f)])
    return out


def _snapshot(memory: Memory, user: str):
    return memory.store.sql.view_snapshot(user)


def _cold(memory: Memory) -> None:
    memory.store.drop_views()


def test_a_snapshot_loads_back_the_same_view_and_the_same_answers(tmp_path, monkeypatch):
    with _open(tmp_path / "s") as memory:
        items = _fill(memory, "ana", 60)
        memory.update(items[3].id, user_id="ana", entities=["Kyoto"])
        memory.update(items[4].id, user_id="ana", superseded_by=items[5].id)
        _fill(memory, "bo", 10)  # below the threshold: no snapshot
        _cold(memory)
        expected = _answers(memory, "ana")  # built from the tables, and the snapshot written
        snap = _snapshot(memory, "ana")
        assert snap is not None and snap[1] == 60
        memory.search("cello", user_id="bo", k=3)
        assert _snapshot(memory, "bo") is None
        built = memory.store._parts.peek("ana")

        _cold(memory)
        calls = []
        real = memory.store.sql.active_vectors
        monkeypatch.setattr(memory.store.sql, "active_vectors", lambda *a: calls.append(a) or real(*a))
        assert _answers(memory, "ana") == expected
        assert calls == []  # nothing read from the items' rows: the snapshot had everything
        loaded = memory.store._parts.peek("ana")
        assert np.array_equal(built.vectors.ids, loaded.vectors.ids) and np.array_equal(built.vectors.vecs,
                                                                                       loaded.vectors.vecs)
        assert built.meta == loaded.meta and built.n_not_current == loaded.n_not_current == 1
        for q in QUERIES:
            a, b = built.lexical.scores(q), loaded.lexical.scores(q)
            assert dict(zip(a[0].tolist(), a[1].tolist())) == dict(zip(b[0].tolist(), b[1].tolist()))


def test_changes_since_the_snapshot_are_replayed_whoever_made_them(tmp_path):
    with _open(tmp_path / "s") as memory, _open(tmp_path / "s") as other:
        items = _fill(memory, "ana", 50)
        _cold(memory)
        memory.search("cello", user_id="ana", k=3)  # writes the snapshot
        seq = _snapshot(memory, "ana")[0]
        # Another process changes the user after the snapshot: adds, an update, an archive.
        new = _fill(other, "ana", 5, start=50)
        other.update(items[0].id, user_id="ana", text="I moved to Reykjavik in the spring.", keep_history=True)
        other.archive(items[1].id, user_id="ana")
        _cold(memory)
        got = _answers(memory, "ana")
        assert _snapshot(memory, "ana")[0] == seq  # 8 changes: replayed, not worth a rewrite
        with _open(tmp_path / "s", snapshot_min_items=0) as plain:  # the same store without snapshots
            assert _answers(plain, "ana") == got
        ids = {h.item.id for h in memory.search("Reykjavik trip 52", user_id="ana", k=60)}
        assert items[0].id in ids and new[2].id in ids and items[1].id not in ids


def test_many_changes_rewrite_the_snapshot_and_a_pruned_log_rebuilds_from_the_tables(tmp_path):
    with _open(tmp_path / "s") as memory:
        _fill(memory, "ana", 40)
        _cold(memory)
        memory.search("cello", user_id="ana", k=3)
        first = _snapshot(memory, "ana")
        with _open(tmp_path / "s") as other:
            _fill(other, "ana", 300, start=40)  # more than the replay limit: rebuilt, then re-snapshotted
        _cold(memory)
        memory.search("cello", user_id="ana", k=3)
        second = _snapshot(memory, "ana")
        assert second[0] > first[0] and second[1] == 340
        with _open(tmp_path / "s") as other:
            _fill(other, "ana", 3, start=340)
            other.store.sql.prune_changes(keep=0)  # the changes since the snapshot are gone from the log
        _cold(memory)
        assert memory.store.size("ana") == 343
        assert len({h.item.id for h in memory.search("trip 341", user_id="ana", k=400)}) == 343
        assert _snapshot(memory, "ana")[1] == 343  # rebuilt and written again


def test_an_unreadable_snapshot_is_rebuilt_from_the_tables(tmp_path, caplog):
    with _open(tmp_path / "s") as memory:
        _fill(memory, "ana", 40)
        _cold(memory)
        expected = _answers(memory, "ana")
        with memory.store.sql.transaction() as c:
            c.execute("UPDATE view_snapshots SET data = ? WHERE user_id = 'ana'", (b"not a snapshot",))
        _cold(memory)
        with caplog.at_level(logging.WARNING, logger="lightmem.stores.embedded.store"):
            assert _answers(memory, "ana") == expected
        assert "ignoring the view snapshot" in caplog.text
    with pytest.raises(view_snapshot.SnapshotError, match="dimension"):
        with _open(tmp_path / "s") as memory:
            view_snapshot.load(_snapshot(memory, "ana")[2], dim=32)


def test_erasing_a_memory_drops_its_users_snapshot(tmp_path):
    with _open(tmp_path / "s") as memory:
        items = _fill(memory, "ana", 40)
        _fill(memory, "bo", 40)
        _cold(memory)
        for user in ("ana", "bo"):
            memory.search("cello", user_id=user, k=3)
        memory.delete(items[7].id, user_id="ana")
        assert _snapshot(memory, "ana") is None and _snapshot(memory, "bo") is not None
        memory.search("cello", user_id="ana", k=3)  # the view in memory stays; no new snapshot is written
        _cold(memory)
        memory.search("cello", user_id="ana", k=3)
        assert _snapshot(memory, "ana")[1] == 39
        memory.update(items[8].id, user_id="ana", text="A redacted memory.")  # the old text is forgotten
        assert _snapshot(memory, "ana") is None
        memory.delete_user("bo")
        assert _snapshot(memory, "bo") is None
    raw = sqlite3.connect(tmp_path / "s" / "lightmem.sqlite")
    assert raw.execute("SELECT COUNT(*) FROM view_snapshots").fetchone()[0] == 0
    raw.close()


def test_a_snapshot_built_before_an_erasure_is_never_written_after_it(tmp_path):
    """A view read before another process's deletion or redacting update may hold the erased text: its
    snapshot is refused, one read afterwards is written, and changes that erase nothing refuse none.
    (Two real processes racing: ``test_snapshot_race``.)"""
    with _open(tmp_path / "s") as memory, _open(tmp_path / "s") as other:
        items = _fill(memory, "ana", 40)
        _fill(memory, "bo", 40)
        sql = memory.store.sql
        blob = view_snapshot.dump(memory.store._part("ana"))
        for erase in (lambda: other.delete(items[0].id, user_id="ana"),
                      lambda: other.update(items[1].id, user_id="ana", text="A redacted memory."),
                      lambda: other.delete_user("bo")):
            seq = sql.last_change()
            erase()
            assert sql.put_view_snapshot("ana", seq, 40, blob) is False
            assert sql.put_view_snapshot("ana", sql.last_change(), 40, blob) is True
        seq = sql.last_change()
        other.update(items[2].id, user_id="ana", text="A new text, the old one kept.", keep_history=True)
        other.archive(items[3].id, user_id="ana")
        _fill(other, "ana", 2, start=40)
        assert sql.put_view_snapshot("ana", seq, 40, blob) is True


def test_a_snapshot_that_outlived_a_deletion_is_rewritten_without_the_item(tmp_path):
    """A snapshot that holds an item deleted after it was written (as the race left them before writes
    checked for erasures) is rewritten without it on its next load."""
    with _open(tmp_path / "s") as memory:
        items = _fill(memory, "ana", 40)
        _cold(memory)
        memory.search("cello", user_id="ana", k=3)
        stale = _snapshot(memory, "ana")
        rid = memory.store.sql.rid_of("ana", items[5].id)
        assert rid in view_snapshot.load(stale[2], 64).vectors
        memory.delete(items[5].id, user_id="ana")
        with memory.store.sql.transaction() as c:
            c.execute("INSERT INTO view_snapshots (user_id, seq, n, data) VALUES ('ana', ?, ?, ?)", stale)
        _cold(memory)
        assert items[5].id not in {h.item.id for h in memory.search("trip 5", user_id="ana", k=40)}
        snap = _snapshot(memory, "ana")
        assert snap[0] > stale[0] and snap[1] == 39 and rid not in view_snapshot.load(snap[2], 64).vectors


def test_a_read_only_store_reads_snapshots_and_writes_none(tmp_path, monkeypatch):
    with _open(tmp_path / "s") as memory:
        _fill(memory, "ana", 40)
        _fill(memory, "bo", 40)
        _cold(memory)
        expected = _answers(memory, "ana")
    # Opened as a process that may not write it is (SQLite's read-only mode; chmod does not stop root).
    monkeypatch.setattr(sqlite_faults, "read_only_reason", lambda db: "this user may not write the file")
    with _open(tmp_path / "s") as memory:
        assert memory.store.sql.read_only
        assert _answers(memory, "ana") == expected
        memory.search("cello", user_id="bo", k=3)
        assert _snapshot(memory, "bo") is None


def test_index_exports_round_trip():
    rng = np.random.default_rng(0)
    lex = LexicalIndex(k1=1.2, b=0.6)
    texts = [f"{HOBBIES[i % 8]} {PLACES[i % 5]} trip {i} {'again ' * (i % 3)}" for i in range(200)]
    lex.add_many(list(enumerate(texts)))
    lex.remove(range(0, 200, 3))  # tombstones: the export holds live rows only
    copy = LexicalIndex.from_export(lex.export())
    assert (copy.k1, copy.b, len(copy)) == (1.2, 0.6, len(lex))
    for q in ("cello Lisbon", "trip 17 again", "nothing here"):
        a, b = lex.scores(q), copy.scores(q)
        assert dict(zip(a[0].tolist(), a[1].tolist())) == dict(zip(b[0].tolist(), b[1].tolist()))
    copy.add(1000, "cello in Riga")  # it keeps working as an index
    assert copy.top("Riga cello", 1).ids.tolist() == [1000]
    vecs = rng.standard_normal((50, 16)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    ids = np.arange(100, 150)
    index, rebuilt = VectorIndex(16), VectorIndex.from_arrays(ids, vecs.copy())
    index.add(ids, vecs)
    assert [a.tolist() for a in index.search(vecs[3], 5)] == [a.tolist() for a in rebuilt.search(vecs[3], 5)]
    rebuilt.remove([103])
    rebuilt.add(np.asarray([7]), vecs[3:4])
    assert rebuilt.search(vecs[3], 1)[0].tolist() == [7]
    with pytest.raises(ValueError, match="distinct"):
        VectorIndex.from_arrays(np.asarray([1, 1]), vecs[:2])


def test_an_hnsw_graph_is_kept_in_the_snapshot_not_rebuilt(tmp_path, monkeypatch):
    with Memory.open(str(tmp_path / "s"), embedder=HashingEmbedder(64), selector=Stage1Selector(), index="hnsw",
                     synchronous="NORMAL", snapshot_min_items=30) as memory:
        _fill(memory, "ana", 60)
        _cold(memory)
        expected = _answers(memory, "ana")
        _cold(memory)
        monkeypatch.setattr(VectorIndex, "_new_index", lambda self: pytest.fail("the HNSW graph was rebuilt"))
        assert _answers(memory, "ana") == expected
        assert memory.store._parts.peek("ana").vectors.kind == "hnsw"
    monkeypatch.undo()
    with _open(tmp_path / "s") as memory:  # the same store opened with exact search: vectors from the graph
        assert _answers(memory, "ana") == expected
        assert memory.store._parts.peek("ana").vectors.kind == "flat"


def test_a_snapshot_that_cannot_be_written_costs_nothing_but_the_snapshot(tmp_path, monkeypatch, caplog):
    from lightmem.errors import StoreFullError

    with _open(tmp_path / "s") as memory:
        _fill(memory, "ana", 40)
        _cold(memory)

        def full(*a, **k):
            raise StoreFullError("database or disk is full")

        monkeypatch.setattr(memory.store.sql, "put_view_snapshot", full)
        with caplog.at_level(logging.WARNING, logger="lightmem.stores.embedded.store"):
            hits = memory.search("pottery lessons", user_id="ana", k=5)
        assert len(hits) == 5 and _snapshot(memory, "ana") is None
        assert "could not write the view snapshot: StoreFullError" in caplog.text


def test_loading_a_view_pauses_the_garbage_collector_and_restores_it(tmp_path, monkeypatch):
    import gc

    seen = []
    real = view_snapshot.load
    monkeypatch.setattr(view_snapshot, "load", lambda *a, **k: seen.append(gc.isenabled()) or real(*a, **k))
    with _open(tmp_path / "s") as memory:
        _fill(memory, "ana", 40)
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            try:
                _cold(memory)
                memory.search("cello", user_id="ana", k=3)
                assert gc.isenabled() is enabled  # as it was before the load
            finally:
                gc.enable()
    assert seen == [False]  # the second load came from the snapshot (the first wrote it), with no collections


def test_a_snapshot_is_skipped_not_waited_for_while_another_process_writes(tmp_path):
    with _open(tmp_path / "s") as memory:
        _fill(memory, "ana", 40)
        other = sqlite3.connect(tmp_path / "s" / "lightmem.sqlite", isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        try:
            assert memory.store.sql.put_view_snapshot("ana", 1, 40, b"x", wait_ms=20) is False
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert memory.store.sql.put_view_snapshot("ana", 1, 40, b"x") is True
        assert _snapshot(memory, "ana") == (1, 40, b"x")
        with memory.store.sql.transaction() as c:  # the usual busy timeout is back
            assert c.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000
