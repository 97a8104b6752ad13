"""The background indexer on PostgreSQL (issue 65: a request of many turns used to embed inside the request,
holding its worker): ``add`` commits the turns and their words and returns; the vectors follow."""
from __future__ import annotations

import threading

import numpy as np
import psycopg
import pytest

from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector


class GatedEmbedder(HashingEmbedder):
    """A hashing embedder whose memory encodes wait for ``gate`` (a query is encoded at once)."""

    def __init__(self, dim: int = 64) -> None:
        super().__init__(dim)
        self.gate = threading.Event()
        self.calls_waiting = 0

    def encode(self, texts, *args, **kwargs):
        if len(texts) > 1 or (texts and texts[0].startswith("user:")):
            self.calls_waiting += 1
            assert self.gate.wait(60), "the test never opened the gate"
        return super().encode(texts, *args, **kwargs)


@pytest.fixture
def gated():
    return GatedEmbedder()


def _open(uri: str, embedder) -> Memory:
    return Memory.open(uri, embedder=embedder, selector=Stage1Selector(), background_index=True)


def test_add_returns_before_the_vectors_and_the_indexer_writes_them(pg_uri, gated):
    m = _open(pg_uri, gated)
    try:
        assert m.index_status()["mode"] == "background"
        items = m.add([f"I keep bees number {i} in the garden" for i in range(40)], user_id="alice")
        assert len(items) == 40  # returned while the encoder is still held at its gate
        assert m.stats()["alice"]["unembedded"] == 40
        assert m.search("bees garden", "alice", k=3)  # found by its words before any vector exists
        with psycopg.connect(pg_uri) as c:
            (n,), = c.execute("SELECT COUNT(*) FROM items WHERE embedding IS NULL").fetchall()
        assert n == 40
        gated.gate.set()
        assert m.flush_index(timeout=60)
        assert m.stats()["alice"]["unembedded"] == 0 and m.index_status()["backlog"] == 0
        ids, scores = m.store.search_dense("alice", gated.encode(["bees number 3"])[0], 5, _filters())
        assert len(ids) == 5 and np.all(np.isfinite(scores))
    finally:
        gated.gate.set()
        m.close()


def test_a_killed_writers_leftovers_are_embedded_by_the_next_open(pg_uri, gated):
    m = _open(pg_uri, gated)
    m.add([f"fact {i} about the lake house" for i in range(12)], user_id="bob")
    m.indexer.close(wait=False)  # as a killed process: the rows wait with NULL embeddings
    m.store.close()
    gated.gate.set()
    with _open(pg_uri, HashingEmbedder(64)) as again:
        assert again.index_status()["backlog"] == 12
        assert again.flush_index(timeout=60)
        assert again.stats()["bob"]["unembedded"] == 0


def test_a_memory_deleted_or_rewritten_before_its_vector_is_left_alone(pg_uri, gated):
    with _open(pg_uri, gated) as m:
        gone, changed, kept = m.add(["first note", "second note", "third note"], user_id="carol")
        m.delete(gone.id, "carol")
        gated.gate.set()
        m.update(changed.id, "carol", text="second note, rewritten")  # embedded by update itself
        assert m.flush_index(timeout=60)
        assert m.stats()["carol"]["unembedded"] == 0
        assert [i.id for i in m.get_all("carol")] == [changed.id, kept.id]


def _filters():
    from lightmem.types import Filters

    return Filters()
