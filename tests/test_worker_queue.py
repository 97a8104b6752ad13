"""The shared embedding queue on PostgreSQL (issue 75) and the killed server's backlog (issue 74, item 7).

Jobs commit with the rows they describe and vanish with them; a claim leases a batch so that two claimers never
take the same job; a dead holder's jobs are claimed again once its lease runs out; the backlog is read from the
table, the same from every process. ``lightmem worker`` processes drain it, and ``lightmem serve
--no-index-here`` replicas write without embedding.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import psycopg
import pytest

from lightmem.errors import InvalidInputError
from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.stores.postgres.queue import MAX_FAILURES

DIM = 64


def _open(uri: str, **kw) -> Memory:
    return Memory.open(uri, embedder=HashingEmbedder(DIM), selector=Stage1Selector(), background_index=True, **kw)


def _count(uri: str, sql: str) -> int:
    with psycopg.connect(uri) as c:
        (n,), = c.execute(sql).fetchall()
    return int(n)


def _jobs(uri: str) -> int:
    return _count(uri, "SELECT COUNT(*) FROM embed_jobs")


def _unembedded(uri: str) -> int:
    return _count(uri, "SELECT COUNT(*) FROM items WHERE embedding IS NULL")


def test_a_job_commits_with_its_row_and_goes_with_its_vector_or_its_row(pg_uri):
    with _open(pg_uri, index_here=False) as writer:
        a, b, c = writer.add(["I keep bees", "I sail on Sundays", "My sister lives in Oslo"], user_id="alice")
        assert _jobs(pg_uri) == _unembedded(pg_uri) == 3
        writer.delete(a.id, "alice")  # its job goes with it
        assert _jobs(pg_uri) == 2
        queue = writer.store.embed_queue
        jobs = queue.claim("test-holder", 10, lease_s=30)
        assert sorted(j.item_id for j in jobs) == sorted([b.id, c.id])
        assert queue.claim("someone-else", 10) == []  # leased: nobody else gets them
        assert queue.status()["leased"] == 2
        text_b = next(j.text for j in jobs if j.item_id == b.id)
        assert writer.store.set_vectors("alice", [(b.id, text_b)], HashingEmbedder(DIM).encode([text_b])) == 1
        assert _jobs(pg_uri) == 1 and _unembedded(pg_uri) == 1  # the stored vector took its job away
        assert queue.release("test-holder") == 1
        assert [j.item_id for j in queue.claim("someone-else", 10)] == [c.id]


def test_a_job_whose_text_changes_while_held_is_queued_again_for_the_new_text(pg_uri):
    with _open(pg_uri, index_here=False) as writer:
        item, = writer.add(["I drive a red car"], user_id="bob")
        queue = writer.store.embed_queue
        held, = queue.claim("slow-holder", 1, lease_s=60)
        with psycopg.connect(pg_uri, autocommit=True) as c:  # an update of the text while the job is held
            c.execute("UPDATE items SET text = 'I drive a blue car' WHERE id = %s", (item.id,))
        again, = queue.claim("another", 1)  # the lease was dropped: claimable at once, with the new text
        assert again.item_id == item.id and "blue" in again.text
        vec = HashingEmbedder(DIM).encode([held.text])
        assert writer.store.set_vectors("bob", [(item.id, held.text)], vec) == 0  # the old text's vector is refused
        assert _jobs(pg_uri) == 1
        assert writer.store.set_vectors("bob", [(item.id, again.text)], HashingEmbedder(DIM).encode([again.text])) == 1
        assert _jobs(pg_uri) == 0


def test_a_dead_holders_jobs_are_claimed_again_once_its_lease_runs_out(pg_uri):
    with _open(pg_uri, index_here=False) as writer:
        writer.add([f"note {i}" for i in range(5)], user_id="carol")
        queue = writer.store.embed_queue
        assert len(queue.claim("dead-holder", 5, lease_s=0.5)) == 5
        assert queue.claim("live-holder", 5) == []
        time.sleep(0.7)
        retaken = queue.claim("live-holder", 5)
        assert len(retaken) == 5 and all(j.claims == 2 for j in retaken)


def test_a_job_that_keeps_failing_is_left_out_until_retried(pg_uri):
    with _open(pg_uri, index_here=False) as writer:
        item, = writer.add(["a poisonous note"], user_id="dan")
        queue = writer.store.embed_queue
        for _ in range(MAX_FAILURES):
            job, = queue.claim("h", 1)
            queue.fail("h", [job.rid], "ValueError: boom", retry_after_s=0)
        assert queue.claim("h", 1) == []
        assert queue.status()["failed"] == 1 and queue.waiting([item.id]) == set()
        assert queue.retry_failed() == 1 and len(queue.claim("h", 1)) == 1


class _Poisoned(HashingEmbedder):
    """Fails on any batch that holds a text with "POISON", as an encoder may on one bad input."""

    def encode(self, texts, *args, **kwargs):
        if any("POISON" in t for t in texts):
            raise ValueError("this text breaks the encoder")
        return super().encode(texts, *args, **kwargs)


def test_one_bad_item_fails_alone_and_its_batch_mates_are_embedded(pg_uri):
    """A batch that failed was charged whole: nine good items next to one bad one failed for good with it."""
    with Memory.open(pg_uri, embedder=_Poisoned(DIM), selector=Stage1Selector(), background_index=True) as m:
        m.add([f"good note {i}" for i in range(9)] + ["a POISON note"], user_id="gus")
        deadline = time.monotonic() + 60
        while m.store.embed_queue.status()["failed"] < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert m.flush_index(timeout=60)
        assert _unembedded(pg_uri) == 1 and m.store.embed_queue.status()["failed"] == 1
        assert m.index_status()["failed_here"] == MAX_FAILURES


class _Gated(HashingEmbedder):
    """Holds every memory encode until ``gate`` opens (a query is encoded at once)."""

    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.gate = threading.Event()

    def encode(self, texts, *args, is_query: bool = False, **kwargs):
        if not is_query:
            assert self.gate.wait(60), "the test never opened the gate"
        return super().encode(texts, *args, is_query=is_query, **kwargs)


def test_a_flush_after_close_returns_instead_of_waiting_forever(pg_uri):
    """A flush (a consolidation cycle's, say) on an indexer being closed waited for items nobody here would embed."""
    gated = _Gated(DIM)
    m = Memory.open(pg_uri, embedder=gated, selector=Stage1Selector(), background_index=True)
    try:
        m.add(["held at the gate"], user_id="hal")
        closer = threading.Thread(target=m.indexer.close, kwargs={"wait": False})
        closer.start()  # the indexer's thread is inside the encoder: closing waits for it
        deadline = time.monotonic() + 30
        while not m.indexer._closed and time.monotonic() < deadline:
            time.sleep(0.01)
        started = time.monotonic()
        assert m.indexer.flush(timeout=5) is False
        assert time.monotonic() - started < 2  # said at once, not after the timeout
    finally:
        gated.gate.set()
        closer.join(30)
        m.close()


def test_a_slow_batch_keeps_its_lease(pg_uri):
    """A batch slower than its lease was claimed again by others: the holder now renews it while it embeds."""
    with _open(pg_uri, index_here=False) as writer:
        writer.add(["a slow note"], user_id="ida")
        queue = writer.store.embed_queue
        from lightmem.queue_indexer import QueueIndexer

        indexer = QueueIndexer(writer.store, HashingEmbedder(DIM), lease_s=0.6, run=False)
        job, = queue.claim(indexer.holder, 1, lease_s=0.6)
        with indexer._renewing([job.rid]):
            time.sleep(1.5)  # two and a half leases
            assert queue.claim("another", 1) == []  # still held: renewed
        time.sleep(0.8)
        assert len(queue.claim("another", 1)) == 1  # no longer renewed: taken once the lease ran out


def test_every_process_reports_the_same_backlog_read_from_the_table(pg_uri):
    """Issue 74, item 7: a server that did not write the rows reported backlog 0 while another's waited."""
    writer = _open(pg_uri, index_here=False)
    other = _open(pg_uri, index_here=False)
    try:
        writer.add([f"fact {i} about the lake" for i in range(7)], user_id="erin")
        for m in (writer, other):
            status = m.index_status()
            assert status["backlog"] == 7 and status["oldest_wait_s"] >= 0
        assert writer.flush_index(timeout=0.3) is False  # nobody embeds: the wait is bounded and says so
    finally:
        writer.close()
        other.close()
    with _open(pg_uri) as indexing:  # a process that embeds takes them all, and flush waits for those leftovers
        assert indexing.flush_index(timeout=60)
        assert indexing.index_status()["backlog"] == 0 and _unembedded(pg_uri) == 0


def test_index_here_false_needs_a_shared_queue(tmp_path):
    with pytest.raises(InvalidInputError, match="PostgreSQL"):
        Memory.open(tmp_path / "s", embedder=HashingEmbedder(DIM), selector=Stage1Selector(), background_index=True,
                    index_here=False)
    with pytest.raises(InvalidInputError, match="True or False"):  # "no" would have read as True
        Memory.open(tmp_path / "s", embedder=HashingEmbedder(DIM), selector=Stage1Selector(), index_here="no")


def test_a_migrated_store_queues_the_rows_waiting_for_vectors(pg_uri):
    with _open(pg_uri, index_here=False) as writer:
        writer.add(["one", "two", "three"], user_id="fay")
    with psycopg.connect(pg_uri, autocommit=True) as c:  # as a version-4 store: no queue yet
        c.execute("DROP TRIGGER items_embed_job ON items; DROP TABLE embed_jobs; UPDATE schema_version SET version = 4")
    with _open(pg_uri, index_here=False) as again:
        assert again.index_status()["backlog"] == 3 and _jobs(pg_uri) == 3


# -- separate processes: workers, and replicas that do not embed --------------------------------------------
def _worker(uri: str, *args: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "lightmem.cli", "-v", "worker", "--store", uri, "--report-every", "0.5", *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _embedded_by(out: str) -> int:
    found = re.search(r"embedded ([\d,]+) memories", out)
    assert found, out[-2000:]
    return int(found.group(1).replace(",", ""))


def _fill(uri: str, n: int, users: int = 20) -> None:
    with _open(uri, index_here=False) as writer:
        for u in range(users):
            writer.add([f"user {u} fact {i}: I went hiking near lake {i % 37} with my friend {i % 11}"
                        for i in range(n // users)], user_id=f"user{u}")


@pytest.mark.multiprocess
def test_two_workers_drain_the_queue_and_embed_each_row_once(pg_uri):
    _fill(pg_uri, 2000)
    procs = [_worker(pg_uri, "--drain", "--batch-size", "32") for _ in range(2)]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    counts = [_embedded_by(o) for o in outs]
    assert sum(counts) == 2000  # each row once: the two workers never took the same job
    assert _unembedded(pg_uri) == 0 and _jobs(pg_uri) == 0


@pytest.mark.multiprocess
def test_a_killed_workers_batch_is_taken_by_another_within_its_lease(pg_uri):
    n, lease = 3000, 3.0
    _fill(pg_uri, n)
    victim = _worker(pg_uri, "--batch-size", "16", "--lease", str(lease))
    held = 0
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # freeze it while it holds a batch, then kill it there
            if _count(pg_uri, "SELECT COUNT(*) FROM items WHERE embedding IS NOT NULL") >= 100:
                victim.send_signal(signal.SIGSTOP)
                held = _count(pg_uri, f"SELECT COUNT(*) FROM embed_jobs WHERE holder LIKE '%:{victim.pid}:%'")
                if held:
                    break
                victim.send_signal(signal.SIGCONT)
            assert victim.poll() is None, victim.stdout.read()
            time.sleep(0.05)
        assert held, "the worker never held a batch"
    finally:
        victim.kill()
        victim.wait(30)
    killed_at = time.monotonic()
    left = _unembedded(pg_uri)
    assert 0 < left < n
    rescuer = _worker(pg_uri, "--drain", "--batch-size", "64")
    out = rescuer.communicate(timeout=240)[0]
    assert rescuer.returncode == 0, out
    assert _unembedded(pg_uri) == 0 and _jobs(pg_uri) == 0  # none lost
    assert _embedded_by(out) == left  # the dead worker's batch embedded once more, nothing else twice
    assert time.monotonic() - killed_at < 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(uri: str, keys: str, *args: str) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    cmd = [sys.executable, "-m", "lightmem.cli", "serve", "--store", uri, "--keys", keys, "--port", str(port),
           "--selector", "none", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ})
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return proc, base
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the server did not start: {proc.communicate()[0][-3000:]}")
        time.sleep(0.2)


@pytest.mark.multiprocess
def test_two_replicas_that_do_not_embed_and_two_workers_one_killed(pg_uri, tmp_path):
    """The deployment of docs/deploy.md on one machine: two `serve --no-index-here` replicas take the writes, two
    workers embed them, one worker is killed mid-work; every memory ends up embedded and found by either replica."""
    with Memory.open(pg_uri, embedder=HashingEmbedder(DIM), selector=Stage1Selector()):
        pass  # the store exists with its encoder, as `lightmem serve --encoder hashing` would make it
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"k-admin-0123456789abcdef": ["*"]}))
    head = {"Authorization": "Bearer k-admin-0123456789abcdef"}
    servers = [_serve(pg_uri, str(keys), "--no-index-here") for _ in range(2)]
    workers: list[subprocess.Popen] = []
    try:
        for r in range(40):  # 40 requests of 25 turns, alternating replicas
            _, base = servers[r % 2]
            msgs = [{"speaker": "U", "text": f"request {r} turn {i}: the boat is moored at pier {r * 25 + i}"}
                    for i in range(25)]
            resp = httpx.post(f"{base}/v1/memories", headers=head, timeout=60, json={"user_id": f"u{r % 4}", "messages": msgs})
            assert resp.status_code == 201, resp.text
        backlogs = [httpx.get(f"{base}/healthz", timeout=10).json()["index"]["backlog"] for _, base in servers]
        assert backlogs == [1000, 1000]  # the table's backlog, the same from both replicas
        workers = [_worker(pg_uri, "--batch-size", "16", "--lease", "3") for _ in range(2)]
        deadline = time.monotonic() + 120
        while _unembedded(pg_uri) > 600 and time.monotonic() < deadline:
            time.sleep(0.05)
        workers[0].kill()  # mid-work: its batch waits for its lease, then the other takes it
        deadline = time.monotonic() + 120
        while _unembedded(pg_uri) and time.monotonic() < deadline:
            assert workers[1].poll() is None
            time.sleep(0.2)
        assert _unembedded(pg_uri) == 0 and _jobs(pg_uri) == 0
        for _, base in servers:
            assert httpx.get(f"{base}/healthz", timeout=10).json()["index"]["backlog"] == 0
            hits = httpx.post(f"{base}/v1/search", headers=head, timeout=60,
                              json={"user_id": "u1", "query": "boat moored at pier 130", "k": 3}).json()["hits"]
            assert any("pier 130" in h["text"] for h in hits)
    finally:
        for w in workers:
            w.kill()
            w.wait(30)
        for proc, _ in servers:
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=30)


@pytest.mark.gpu
@pytest.mark.multiprocess
def test_a_gpu_worker_drains_a_store_written_by_the_fp32_encoder(pg_uri):
    """`lightmem worker --device cuda`: the fp32 encoder on the GPU writes the vectors a CPU replica's fp32 encoder
    would (a store first opened on a GPU host records the fp32 encoder)."""
    from lightmem.models.embedder import SentenceTransformerEmbedder

    gpu = SentenceTransformerEmbedder("all-MiniLM-L6-v2", backend="torch", device="cuda", max_seq_length=128)
    texts = [f"note {i}: the ferry to the island leaves at {i % 24} o'clock" for i in range(300)]
    with Memory.open(pg_uri, embedder=gpu, selector=Stage1Selector(), background_index=True, index_here=False) as w:
        w.add(texts, user_id="g")
    proc = _worker(pg_uri, "--drain", "--device", "cuda")
    out = proc.communicate(timeout=600)[0]
    assert proc.returncode == 0, out
    assert _embedded_by(out) == 300 and _unembedded(pg_uri) == 0
    cpu = SentenceTransformerEmbedder("all-MiniLM-L6-v2", backend="onnx", device="cpu", max_seq_length=128)
    with psycopg.connect(pg_uri) as c:
        from pgvector.psycopg import register_vector

        register_vector(c)
        stored = c.execute("SELECT text, embedding FROM items ORDER BY rid LIMIT 20").fetchall()
    for text, vec in stored:
        assert float(cpu.encode([text])[0] @ vec.to_numpy()) > 0.999


@pytest.mark.multiprocess
def test_a_worker_answers_prometheus_on_its_metrics_port(pg_uri):
    from prometheus_client.parser import text_string_to_metric_families

    _fill(pg_uri, 400)
    port = _free_port()
    proc = _worker(pg_uri, "--metrics-port", str(port))
    try:
        deadline = time.monotonic() + 120
        while _unembedded(pg_uri) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.5)  # a queue refresh after the last batch (every --report-every 0.5 s)
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, out  # SIGTERM: a clean stop after the batch
    samples = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples["lightmem_index_embedded_items_total"] == 400
    assert samples["lightmem_worker_stored_items_total"] == 400
    assert samples["lightmem_index_backlog"] == 0 and samples["lightmem_worker_batch_seconds_count"] >= 1
