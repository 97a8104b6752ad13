"""The background indexer's backlog is exact after a reopen (issue 65).

A store killed with more items waiting for vectors than the indexer's in-memory queue holds (``max_queue``)
reported the bound plus one (10,001 after a kill with 12,500 waiting): the items past the bound were
guessed, not counted. Now the table's waiting rows are counted whenever the indexer lists them, so the
backlog equals the number of items without a vector, from the reopen until the last is embedded."""
from __future__ import annotations

import threading
import time

import pytest

from lightmem.indexer import BackgroundIndexer
from lightmem.models.embedder import HashingEmbedder
from lightmem.stores.embedded.store import SQLiteStore
from lightmem.types import MemoryItem, Turn

T0 = 1_600_000_000.0
DIM = 64


class SteppedEmbedder(HashingEmbedder):
    """The hashing embedder, except that each batch of the indexer's thread waits for one ``step``; ``arrived`` is
    released as a batch reaches the gate (its items are popped from the queue, still counted as being embedded)."""

    def __init__(self) -> None:
        super().__init__(dim=DIM)
        self.arrived = threading.Semaphore(0)
        self.steps = threading.Semaphore(0)
        self.free = threading.Event()

    def encode(self, texts, *, is_query: bool = False):
        if not is_query and threading.current_thread().name == "lightmem-indexer" and not self.free.is_set():
            self.arrived.release()
            assert self.steps.acquire(timeout=30), "the test never let the batch through"
        return super().encode(texts, is_query=is_query)

    def step(self) -> None:
        self.steps.release()

    def wait_arrival(self) -> None:
        assert self.arrived.acquire(timeout=30), "no batch reached the encoder"


def _store(path) -> SQLiteStore:
    return SQLiteStore(path, dim=DIM, embedder=f"hashing-{DIM}", synchronous="NORMAL")


def _write_without_vectors(path, n: int, users: tuple[str, ...] = ("ana", "ben")) -> None:
    """Write ``n`` turns, one item each, with no vectors (what ``add`` commits before the indexer embeds), across users;
    then close without embedding any: a process killed with its backlog."""
    store = _store(path)
    try:
        for i in range(n):
            user = users[i % len(users)]
            turn = Turn(turn_id=f"t{i}", speaker="user", text=f"note {i} about herons and tulips", timestamp=T0 + i)
            item = MemoryItem(id=f"i{i:05d}", user_id=user, text=f"user: note {i} about herons and tulips",
                              provenance=[turn.turn_id], created_at=T0 + i, event_time=T0 + i, last_access=T0 + i)
            store.write(user, [turn], [item], None, now=T0 + i)
    finally:
        store.close()


def _next_batch(emb: SteppedEmbedder, indexer: BackgroundIndexer) -> bool:
    """Let the batch at the gate through: True once the next one is at the gate, False once nothing is left."""
    emb.step()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if emb.arrived.acquire(timeout=0.02):
            return True
        if indexer.backlog() == 0:
            return False
    raise AssertionError("the indexer neither took a next batch nor finished")


def _waiting(store: SQLiteStore) -> int:
    (n,), = store.sql.query("SELECT COUNT(*) FROM items WHERE length(embedding) = 0")
    return int(n)


@pytest.mark.parametrize("n", [25, 10, 37])
def test_the_backlog_after_a_reopen_is_every_waiting_item_not_the_queues_bound(tmp_path, n):
    path = tmp_path / "s"
    _write_without_vectors(path, n)
    store = _store(path)
    emb = SteppedEmbedder()
    indexer = BackgroundIndexer(store, emb, batch_size=4, max_queue=10)
    try:
        indexer.start()  # lists the leftovers (up to the bound) and starts the thread
        emb.wait_arrival()  # the first batch is at the gate: nothing is embedded yet
        assert indexer.backlog() == indexer.status()["backlog"] == n
        assert store.unembedded_count() == _waiting(store) == n
        # Batch by batch, through the refills from the table, the backlog is what the table still holds.
        batches = 1
        while _next_batch(emb, indexer):
            batches += 1
            assert indexer.backlog() == _waiting(store), (batches, indexer.backlog(), _waiting(store))
        assert batches > n // 4  # every batch was seen (4 items each, shorter ones where the queue ran dry)
        assert indexer.flush(timeout=30)
        assert _waiting(store) == 0
        assert indexer.backlog() == indexer.status()["backlog"] == 0 and indexer.indexed == n
    finally:
        emb.free.set()
        emb.step()
        indexer.close(wait=False)
        store.close()


def test_submits_past_the_bound_after_a_reopen_are_counted_once(tmp_path):
    path = tmp_path / "s"
    _write_without_vectors(path, 23)
    store = _store(path)
    emb = SteppedEmbedder()
    indexer = BackgroundIndexer(store, emb, batch_size=4, max_queue=10)
    try:
        indexer.start()
        emb.wait_arrival()
        assert indexer.backlog() == 23
        # This process writes more while the leftovers wait: each is counted once, in the table.
        for i in range(23, 30):
            turn = Turn(turn_id=f"t{i}", speaker="user", text=f"note {i} about owls", timestamp=T0 + i)
            item = MemoryItem(id=f"i{i:05d}", user_id="ana", text=f"user: note {i} about owls", provenance=[turn.turn_id],
                              created_at=T0 + i, event_time=T0 + i, last_access=T0 + i)
            store.write("ana", [turn], [item], None, now=T0 + i)
            indexer.submit("ana", [(item.id, item.text)])
        assert indexer.backlog() == _waiting(store) == 30
        emb.free.set()
        emb.step()
        assert indexer.flush(timeout=30)
        assert _waiting(store) == 0 and indexer.backlog() == 0 and indexer.indexed == 30
    finally:
        emb.free.set()
        indexer.close(wait=False)
        store.close()


def test_a_memory_reopened_with_leftovers_reports_them_all(tmp_path):
    # Through Memory.open (the default max_queue, 10,000), a backlog under the bound: the count the server reports.
    from lightmem.memory import Memory
    from lightmem.retrieval.stage2 import Stage1Selector

    path = tmp_path / "s"
    _write_without_vectors(path, 12)
    emb = SteppedEmbedder()
    memory = Memory.open(str(path), embedder=emb, selector=Stage1Selector(), synchronous="NORMAL", background_index=True)
    try:
        emb.wait_arrival()
        assert memory.index_status()["backlog"] == 12
        emb.free.set()
        emb.step()
        assert memory.flush_index(timeout=30)
        assert memory.index_status()["backlog"] == 0
    finally:
        emb.free.set()
        memory.close()
