"""Background indexing: ``add`` stores a turn and its words and returns; a thread embeds the new memories.

What must hold: a memory is found by its words before its vector exists; once indexed, answers are the
same as with embedding on the caller's thread; an item edited meanwhile keeps its new vector; one text the
encoder cannot take does not stop the others; a process killed mid-batch loses nothing (the next open
embeds what is left)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector

TEXTS = [f"On day {i} I practised {w} with my neighbour in {p}." for i, (w, p) in enumerate(
    [("cello", "Lisbon"), ("pottery", "Kyoto"), ("chess", "Oslo"), ("climbing", "Lima"), ("baking", "Cairo"),
     ("sailing", "Quito"), ("astronomy", "Perth"), ("running", "Riga")] * 3)]


class GatedEmbedder(HashingEmbedder):
    """The hashing embedder, except that the indexer's documents wait for ``gate`` and a text containing ``poison``
    fails (a document embedded on the caller's thread, by ``update``, does not wait)."""

    def __init__(self, poison: str | None = None) -> None:
        super().__init__(dim=64)
        self.gate = threading.Event()
        self.waiting = threading.Event()  # set once the indexer's thread holds a batch at the gate
        self.poison = poison
        self.document_calls = 0

    def encode(self, texts, *, is_query: bool = False):
        if not is_query:
            if threading.current_thread().name == "lightmem-indexer":
                self.waiting.set()
                self.gate.wait(30)
            self.document_calls += 1
            if self.poison is not None and any(self.poison in t for t in texts):
                raise ValueError("the encoder cannot take this text")
        return super().encode(texts, is_query=is_query)


def _open(path, embedder, background: bool = True) -> Memory:
    return Memory.open(str(path), embedder=embedder, selector=Stage1Selector(), synchronous="NORMAL",
                       background_index=background)


def _stored_vectors(memory: Memory, user: str) -> dict[str, bytes]:
    return dict(memory.store.sql.query("SELECT text, embedding FROM items WHERE user_id = ?", (user,)))


def test_a_memory_is_found_by_its_words_before_its_vector_and_by_meaning_after(tmp_path):
    emb = GatedEmbedder()
    with _open(tmp_path / "s", emb) as memory:
        items = memory.add(TEXTS, user_id="ana")
        assert len(items) == len(TEXTS)
        assert memory.index_status()["backlog"] == len(TEXTS)
        assert all(len(v) == 0 for v in _stored_vectors(memory, "ana").values())  # stored, no vectors yet
        hits = memory.search("pottery Kyoto", user_id="ana", k=3)
        assert hits and "pottery" in hits[0].item.text and hits[0].scores["dense"] == 0.0  # BM25 found it
        emb.gate.set()
        assert memory.flush_index(timeout=30)
        status = memory.index_status()
        assert status["backlog"] == 0 and status["indexed"] == len(TEXTS) and status["failed"] == 0
        stored = _stored_vectors(memory, "ana")
        want = HashingEmbedder(64).encode(list(stored))
        assert all(np.array_equal(np.frombuffer(v, np.float32), w) for v, w in zip(stored.values(), want))
        hits = memory.search("pottery Kyoto", user_id="ana", k=3)
        assert hits[0].scores["dense"] > 0.3


def test_once_indexed_the_answers_are_those_of_embedding_on_the_callers_thread(tmp_path):
    queries = ["Where did I practise chess?", "sailing", "the neighbour in Riga", "day 17 baking"]
    answers = []
    for background in (False, True):
        with _open(tmp_path / f"s{background}", HashingEmbedder(64), background=background) as memory:
            for i in range(0, len(TEXTS), 5):
                memory.add(TEXTS[i:i + 5], user_id="ana", timestamp=1.7e9 + i)
            memory.flush_index()
            answers.append([[(h.item.text, round(h.score, 6)) for h in memory.search(q, user_id="ana", k=5)]
                            for q in queries])
    assert answers[0] == answers[1]


def test_an_item_edited_before_its_vector_came_keeps_the_new_texts_vector(tmp_path):
    emb = GatedEmbedder()
    with _open(tmp_path / "s", emb) as memory:
        [item] = memory.add("I keep my bike in the blue shed.", user_id="ana")
        memory.update(item.id, user_id="ana", text="I keep my bike in the garage now.")  # embeds at once
        emb.gate.set()
        memory.flush_index(timeout=30)
        [(text, vec)] = _stored_vectors(memory, "ana").items()
        assert text == "I keep my bike in the garage now."
        assert np.array_equal(np.frombuffer(vec, np.float32), HashingEmbedder(64).encode([text])[0])


def test_a_text_the_encoder_refuses_fails_alone_and_stays_findable(tmp_path, caplog):
    emb = GatedEmbedder(poison="POISON")
    with _open(tmp_path / "s", emb) as memory:
        memory.add([*TEXTS[:4], "POISON pill for the encoder, about pottery", *TEXTS[4:8]], user_id="ana")
        emb.gate.set()
        memory.flush_index(timeout=30)
        status = memory.index_status()
        assert status["failed"] == 1 and status["indexed"] == 8 and "cannot take" in status["last_error"]
        stored = _stored_vectors(memory, "ana")
        assert [t for t, v in stored.items() if not v] == ["user: POISON pill for the encoder, about pottery"]
        hits = memory.search("POISON pill", user_id="ana", k=1)
        assert hits and "POISON" in hits[0].item.text
    # The next open retries it (here with an encoder that takes it).
    with _open(tmp_path / "s", HashingEmbedder(64)) as memory:
        assert memory.flush_index(timeout=30)
        assert all(v for v in _stored_vectors(memory, "ana").values())


def test_past_its_bound_the_queue_leaves_the_items_in_the_table_and_lists_them_as_it_drains(tmp_path):
    emb = GatedEmbedder(poison="POISON")
    with _open(tmp_path / "s", emb) as memory:
        memory.indexer.max_queue = 3
        texts = [*TEXTS[:5], "POISON pill for the encoder, about pottery", *TEXTS[5:12]]
        for i, text in enumerate(texts):  # one turn per add, as an agent writes
            memory.add(text, user_id="ana" if i % 2 else "ben")
        # At most the bound queued and one batch (popped from the queue) waiting at the gate; the rest are counted.
        assert len(memory.indexer._queue) <= 3 and len(memory.indexer._queued) <= 6
        assert memory.index_status()["backlog"] == len(texts)
        emb.gate.set()
        assert memory.flush_index(timeout=30)
        status = memory.index_status()
        assert status["backlog"] == 0 and status["indexed"] == len(texts) - 1 and status["failed"] == 1
        waiting = [t for user in ("ana", "ben") for t, v in _stored_vectors(memory, user).items() if not v]
        assert waiting == ["user: POISON pill for the encoder, about pottery"]  # given up on, not listed again
        hits = memory.search("pottery in Kyoto", user_id="ben", k=1)
        assert hits and "Kyoto" in hits[0].item.text and hits[0].scores["dense"] > 0.3
        memory.add("One more after the spill, about sailing in Quito.", user_id="ana")  # the queue takes it again
        assert memory.flush_index(timeout=30) and memory.index_status()["indexed"] == len(texts)


def test_consolidation_waits_for_the_vectors(tmp_path):
    from lightmem.ltm import LTMOptions

    emb = GatedEmbedder()
    memory = Memory.open(str(tmp_path / "s"), embedder=emb, selector=Stage1Selector(), synchronous="NORMAL",
                         ltm=LTMOptions(background=False), background_index=True)
    try:
        memory.add(TEXTS[:6], user_id="ana")
        threading.Timer(0.3, emb.gate.set).start()
        memory.consolidate("ana")  # waits for the indexer, then selects every item
        assert memory.store.consolidation_state("ana")["unconsolidated"] == 0
    finally:
        memory.close()


CHILD = textwrap.dedent("""
    import sys, time
    from lightmem.memory import Memory
    from lightmem.models.embedder import HashingEmbedder
    from lightmem.retrieval.stage2 import Stage1Selector

    class Slow(HashingEmbedder):
        def encode(self, texts, *, is_query=False):
            if not is_query:
                print("batch", len(texts), flush=True)
                time.sleep(0.5)  # long enough to be killed inside a batch
            return super().encode(texts, is_query=is_query)

    memory = Memory.open(sys.argv[1], embedder=Slow(dim=64), selector=Stage1Selector(), background_index=True)
    for i in range(60):
        memory.add(f"Turn {i}: I planted {i} tulips along the north fence.", user_id="ana")
    print("added", flush=True)
    time.sleep(60)
""")


@pytest.mark.multiprocess
def test_a_process_killed_mid_batch_loses_nothing_and_the_next_open_finishes_the_work(tmp_path):
    store = tmp_path / "s"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(store)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        lines = []
        deadline = time.monotonic() + 120
        while "added" not in lines and time.monotonic() < deadline:
            lines.append(child.stdout.readline().strip())
        assert "added" in lines, lines
        assert any(line.startswith("batch") for line in lines)
        child.send_signal(signal.SIGKILL)  # in the middle of a batch: each takes 0.5 s
    finally:
        child.kill()
        child.wait()
    with _open(store, HashingEmbedder(64)) as memory:
        stored = _stored_vectors(memory, "ana")
        assert len(stored) == 60  # every acknowledged turn is there
        left = sum(1 for v in stored.values() if not v)
        assert left > 0  # the kill came before the backlog was done
        assert memory.search("tulips Turn 59", user_id="ana", k=1)[0].item.text.startswith("user: Turn 59")
        assert memory.flush_index(timeout=60)
        stored = _stored_vectors(memory, "ana")
        want = HashingEmbedder(64).encode(list(stored))
        assert all(np.array_equal(np.frombuffer(v, np.float32), w) for v, w in zip(stored.values(), want))
        assert memory.index_status()["indexed"] == left


EXITING = textwrap.dedent("""
    import sys
    from lightmem.memory import Memory
    memory = Memory.open(sys.argv[1])  # the default encoder: int8 ONNX Runtime on its own threads
    memory.add([f"turn {i} about cats and dogs" for i in range(31)], user_id="ana")
    raise SystemExit(3)  # an error before close(): the indexer is in the middle of its first batch
""")



@pytest.mark.slow  # the default (packaged) encoder, in the child and here
@pytest.mark.multiprocess
def test_a_process_that_exits_without_closing_exits_with_its_own_status_and_loses_nothing(tmp_path):
    # A daemon thread still inside the encoder's native code at interpreter teardown aborted the process
    # (SIGABRT, "terminate called without an active exception") instead of exiting with its status.
    store = tmp_path / "s"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", EXITING, str(store)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 3, done.stderr[-2000:]
    assert "terminate called" not in done.stderr
    with Memory.open(str(store), selector=Stage1Selector()) as memory:
        assert len(_stored_vectors(memory, "ana")) == 31  # every acknowledged turn; the next open embeds the rest
        assert memory.flush_index(timeout=120)
        assert all(_stored_vectors(memory, "ana").values())


def test_at_interpreter_exit_the_indexer_stops_after_its_batch_and_leaves_the_rest_in_the_table(tmp_path):
    from lightmem import indexer as indexer_module

    embedder = GatedEmbedder()
    memory = _open(tmp_path / "s", embedder)
    memory.indexer.batch_size = 4
    memory.add(TEXTS[:12], user_id="ana")  # three batches; the first waits at the gate
    assert memory.indexer in indexer_module._RUNNING
    assert embedder.waiting.wait(30)  # the thread holds its first batch (on a loaded machine it may start late)
    threading.Timer(0.3, embedder.gate.set).start()
    indexer_module._stop_running()  # what the exit hook runs: returns once the batch in hand is stored
    assert not memory.indexer._thread.is_alive() and memory.indexer not in indexer_module._RUNNING
    stored = _stored_vectors(memory, "ana")
    assert len(stored) == 12 and 0 < sum(1 for v in stored.values() if v) < 12
    memory.close()
    with _open(tmp_path / "s", HashingEmbedder(64)) as again:  # the next open embeds what was left
        assert again.flush_index(timeout=30) and all(_stored_vectors(again, "ana").values())


@pytest.mark.parametrize("background", [True, False])
def test_a_postgres_store_indexes_in_the_background_as_the_embedded_one_does(pg_uri, background):
    with Memory.open(pg_uri, embedder=HashingEmbedder(64), selector=Stage1Selector(),
                     background_index=background) as memory:
        assert memory.index_status()["mode"] == ("background" if background else "sync")
        memory.add(TEXTS[:3], user_id="ana")
        assert memory.flush_index(timeout=30)
        assert memory.search("cello Lisbon", user_id="ana", k=1)[0].scores["dense"] > 0.1


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_vectors_that_arrive_later_are_searched_in_every_index_kind(kind):
    from lightmem.stores.views.vector import VectorIndex

    rng = np.random.default_rng(0)
    real = rng.normal(size=(40, 16)).astype(np.float32)
    real /= np.linalg.norm(real, axis=1, keepdims=True)
    index = VectorIndex(16, kind)
    index.add(np.arange(40), np.vstack([np.zeros((20, 16), np.float32), real[20:]]))  # 0-19 wait for theirs
    assert index.search(real[3], 1)[0][0] != 3
    index.set([3, 7, 99], np.vstack([real[3], real[7], real[0]]))  # 99 is not held: skipped
    ids, scores = index.search(real[3], 1)
    assert ids[0] == 3 and scores[0] == pytest.approx(1.0, abs=1e-5)
    assert index.search(real[7], 1)[0][0] == 7 and 99 not in index
