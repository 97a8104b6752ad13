"""The PostgreSQL store chosen by a postgresql:// URI: Memory.open, the CLI, Hydra, several
processes on one database, and clear errors. (The store contract itself: test_store_contract.py.)"""
from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import TINY_LOCOMO, compose

from lightmem.cli import main
from lightmem.errors import StoreError
from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.stores import OfflineChanges, describe, open_store, stored_embedder
from lightmem.types import Filters, MemoryItem, Turn

T0 = 1_700_000_000.0


def test_memory_open_round_trips_on_a_postgresql_uri(pg_uri):
    assert stored_embedder(pg_uri) is None  # an empty database holds no store yet
    with Memory.open(pg_uri, embedder=HashingEmbedder(dim=64), selector=Stage1Selector()) as m:
        assert type(m.store).__name__ == "PostgresStore"
        m.add([{"speaker": "Ava", "text": "I bake sourdough every Sunday", "id": "T1"},
               {"speaker": "Ava", "text": "My sister lives in Porto", "id": "T2"}], user_id="ava", timestamp="2023-05-07")
        m.add([{"speaker": "Bo", "text": "I bake bagels on Sunday", "id": "T1"}], user_id="bo", timestamp="2023-05-07")
        first = m.search("What does Ava bake?", "ava", k=1)
    assert stored_embedder(pg_uri) == "hashing-64"
    with Memory.open(pg_uri, selector=Stage1Selector()) as again:  # reopens with the embedder the store records
        assert again.embedder.name == "hashing-64"
        hits = again.search("What does Ava bake?", "ava", k=5)
        assert hits[0].item.id == first[0].item.id and hits[0].item.provenance == ["T1"]
        assert {h.item.user_id for h in hits} == {"ava"}
        assert again.stats()["bo"]["items"] == 1
    with pytest.raises(StoreError, match="hashing-64"):
        Memory.open(pg_uri, embedder=HashingEmbedder(dim=32), selector=Stage1Selector())


def test_cli_ingests_and_searches_a_postgresql_store_without_cross_user_hits(pg_uri, capsys):
    assert main(["ingest", str(TINY_LOCOMO), "--store", pg_uri, "--encoder", "hashing", "-q"]) == 0
    assert main(["stats", "--store", pg_uri, "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert set(stats["users"]) == {"tiny-a", "tiny-b"} and stats["embedder"] == "hashing-256"
    with Memory.open(pg_uri, selector=Stage1Selector()) as m:
        owned = {u: {it.id for it in m.get_all(u, include_archived=True)} for u in ("tiny-a", "tiny-b")}
    queries = [t["text"] for c in json.loads(TINY_LOCOMO.read_text()) for k, s in c["conversation"].items()
               if k.startswith("session_") and isinstance(s, list) for t in s if t.get("text", "").strip()]
    checked = 0
    for user in owned:
        for q in queries:  # every turn of both conversations, as a query for each user
            assert main(["search", q, "--user", user, "--store", pg_uri, "-k", "5", "--json", "--selector", "none"]) == 0
            ids = {h["id"] for h in json.loads(capsys.readouterr().out)}
            assert ids and ids <= owned[user], f"{user} got another user's items for {q!r}"
            checked += 1
    assert checked == 2 * len(queries)
    assert main(["delete-user", "tiny-a", "--store", pg_uri, "-y"]) == 0
    assert main(["search", "Biscuit", "--user", "tiny-a", "--store", pg_uri, "--json", "--selector", "none"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_cli_error_for_an_empty_database(pg_uri, capsys):
    assert main(["search", "x", "--user", "u", "--store", pg_uri]) == 2
    assert "no lightmem store" in capsys.readouterr().err


def test_hydra_store_postgres_builds_a_memory(pg_uri, tmp_path):
    from lightmem.config import build_memory

    cfg = compose("locomo", ["store=postgres", f"store.uri='{pg_uri}'", "encoder=hashing", "selector=none",
                             "store.pool_size=2", "store.statement_timeout=5000", "store.retries=2"])
    assert cfg.store.index == "flat"
    m = build_memory(cfg, tmp_path / "unused-folder")
    try:
        assert type(m.store).__name__ == "PostgresStore" and not (tmp_path / "unused-folder").exists()
        assert m.store._db._pool.max_size == 2 and m.store._query("SHOW statement_timeout") == [("5s",)]
        assert m.store._db.policy.retries == 2
        m.add([{"speaker": "Ava", "text": "I bake sourdough every Sunday", "id": "T1"}], user_id="u", timestamp="2023-05-07")
        assert m.search("What does Ava bake?", "u", k=1)[0].item.provenance == ["T1"]
    finally:
        m.close()


def _item(store, user: str, text: str, turn: str) -> MemoryItem:
    return MemoryItem(id=store.new_id(), user_id=user, text=text, provenance=[turn], created_at=T0, event_time=T0,
                      last_access=T0)


def test_two_processes_see_each_others_commits(pg_uri):
    """Two stores on one database stand for two server workers: each call sees the other's commits."""
    a, b = (open_store(pg_uri, dim=4, embedder="e") for _ in range(2))
    try:
        vec = np.asarray([[1, 0, 0, 0]], dtype=np.float32)
        assert b.search_lexical("u", "sourdough", 5, Filters())[0].size == 0  # b's BM25 view exists, empty
        item = a.write("u", [Turn("t1", "u", "x", T0)], [_item(a, "u", "I bake sourdough", "t1")], vec, T0)[0]
        ids, _, _ = b.search_lexical("u", "sourdough", 5, Filters())
        assert [it.id for it in b.fetch("u", ids.tolist()).values()] == [item.id]
        assert b.search_dense("u", vec[0], 5, Filters())[0].tolist() == ids.tolist()
        a.update("u", item.id, T0 + 1, vector=vec[0], text="I bake rye bread")
        assert b.search_lexical("u", "sourdough", 5, Filters())[0].size == 0
        assert b.search_lexical("u", "rye", 5, Filters())[0].tolist() == ids.tolist()
        a.delete("u", item.id, T0 + 2)
        assert b.search_lexical("u", "rye", 5, Filters())[0].size == 0 and b.search_dense("u", vec[0], 5, Filters())[0].size == 0
        a.write("u", [Turn("t2", "u", "x", T0)], [_item(a, "u", "rye again", "t2")], vec, T0)
        assert b.search_lexical("u", "rye", 5, Filters())[0].size == 1
        a.delete_user("u")
        assert b.search_lexical("u", "rye", 5, Filters())[0].size == 0 and b.users() == []
        a.commit_offline("v", OfflineChanges(), T0)
        assert b.graph.last_cycle() == 1 and b.graph.data_version() != 0
    finally:
        a.close()
        b.close()


def test_reads_under_the_lock_share_one_snapshot_and_writes_wait(pg_uri):
    a, b = (open_store(pg_uri, dim=4, embedder="e") for _ in range(2))
    try:
        vec = np.asarray([[1, 0, 0, 0]], dtype=np.float32)
        a.write("u", [Turn("t1", "u", "x", T0)], [_item(a, "u", "first note", "t1")], vec, T0)
        with b.lock:
            assert b.size("u") == 1
            a.write("u", [Turn("t2", "u", "x", T0)], [_item(a, "u", "second note", "t2")], vec, T0)
            assert b.size("u") == 1 and len(b.search_lexical("u", "note", 5, Filters())[0]) == 1  # same snapshot
            with pytest.raises(StoreError, match="inside `with store.lock:`"):
                b.delete_user("u")
        assert b.size("u") == 2 and len(b.search_lexical("u", "note", 5, Filters())[0]) == 2
    finally:
        a.close()
        b.close()


def test_an_unreachable_server_is_a_clear_error_without_the_password():
    pytest.importorskip("psycopg", reason="the postgres extra is not installed (pip install -e '.[postgres]')")
    uri = "postgresql://lightmem:s3cret@127.0.0.1:1/nowhere?connect_timeout=2"
    assert describe(uri) == "postgresql://lightmem:***@127.0.0.1:1/nowhere?connect_timeout=2"
    with pytest.raises(StoreError) as err:
        open_store(uri, dim=4)
    assert "cannot connect" in str(err.value) and "s3cret" not in str(err.value)
    with pytest.raises(StoreError):
        stored_embedder(uri)


def test_both_backends_rank_alike(pg_uri, tmp_path):
    """Same turns, same queries: the same hits with the same scores (dense cosine, BM25, fusion) on either store
    (hits scoring 0 tie, and ties may come in any order)."""
    from lightmem.datasets import load_conversations

    convs = load_conversations(str(TINY_LOCOMO), "auto")
    ranked = []
    for where in (tmp_path / "s", pg_uri):
        with Memory.open(where, embedder=HashingEmbedder(dim=64), selector=Stage1Selector()) as m:
            for conv in convs:
                for session in conv.sessions:
                    m.add_turns(conv.conv_id, session.turns)
            queries = [t.text for c in convs for s in c.sessions for t in s.turns if t.text.strip()]
            ranked.append([(len(hits), [(h.item.text, round(h.score, 4)) for h in hits if h.score > 1e-6])
                           for u in ("tiny-a", "tiny-b") for q in queries for hits in [m.search(q, u, k=5)]])
    assert ranked[0] == ranked[1] and sum(len(r[1]) for r in ranked[0]) > 40


def test_the_hnsw_index_exists_only_for_an_hnsw_store_and_is_never_dropped(pg_uri, caplog):
    import logging

    def has_index() -> bool:
        s = open_store(pg_uri, dim=4, embedder="e")
        try:
            return s._query("SELECT to_regclass('items_embedding_hnsw')")[0][0] is not None
        finally:
            s.close()

    flat = open_store(pg_uri, dim=4, embedder="e")
    flat.write("u", [Turn("t1", "u", "x", 1.0)], [MemoryItem(id="i1", user_id="u", text="oak tree", provenance=["t1"],
                                                            created_at=1.0, event_time=1.0, last_access=1.0)],
               np.ones((1, 4), dtype=np.float32), 1.0)
    flat.close()
    assert not has_index()  # the default (flat) writes no index entries
    hnsw = open_store(pg_uri, dim=4, embedder="e", index="hnsw")  # made on open, over the rows already there
    try:
        assert hnsw.search_dense("u", np.ones(4, dtype=np.float32), 1, Filters())[0].size == 1
    finally:
        hnsw.close()
    with caplog.at_level(logging.WARNING, logger="lightmem.stores.postgres.schema"):
        assert has_index()  # a flat store over it keeps it, and says what it costs
    assert any("every insert still updates it" in r.getMessage() for r in caplog.records)
