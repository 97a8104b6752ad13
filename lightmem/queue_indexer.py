"""The indexer over a shared queue: embeds the items of a PostgreSQL store, claimed from its ``embed_jobs``.

Where the ``BackgroundIndexer`` embeds what its own process wrote, this one takes whatever any process wrote: it
claims a batch with a lease (``stores.postgres.queue``), embeds it, stores the vectors (which removes the jobs in
the same transaction) and claims the next. Many run at once, in server processes (``lightmem serve``'s own
indexer) and in ``lightmem worker`` processes on any host; a process that dies leaves its batch to the others when
its lease runs out, and the backlog is the table's, the same from every process.

It keeps the ``BackgroundIndexer``'s interface (``submit``, ``start``, ``flush``, ``status``, ``close``), so a
``Memory`` over PostgreSQL uses it where an embedded store uses the other. With ``run=False`` it claims nothing (an
API replica that leaves the embedding to workers): ``flush`` then waits for the workers.
"""
from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from lightmem.errors import InvalidInputError
from lightmem.indexer import _RUNNING, DEFAULT_BATCH, BackgroundIndexer, _register_stop, embed_and_store
from lightmem.models.embedder import Embedder

log = logging.getLogger(__name__)

POLL_S = 1.0  # an idle indexer looks at the queue this often even without a notification (expired leases)
FLUSH_POLL_S = 0.05
MAX_TRACKED = 50_000  # item ids held for flush(); past it the done ones are dropped


def holder_name() -> str:
    """This indexer's name in the queue's ``holder`` column: host, process and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class QueueIndexer:
    """Embeds jobs claimed from a store's shared queue, on one daemon thread.

    Args:
        store: A store with an ``embed_queue`` (``PostgresStore``) and ``set_vectors``.
        embedder: Encodes the items' texts (the store's embedder).
        word_scorer: Scores each item's words for keeping; None: no scores.
        batch_size: Jobs claimed (and embedded in one encoder call) at a time.
        lease_s: Seconds a claimed batch is this indexer's; past it, another may take it.
        run: Claim and embed (True), or only report and wait for others (False: an API replica beside workers).
        on_batch: Called after each stored batch with (items embedded, items stored, seconds): the worker's
            progress and the metrics hook.
    """

    def __init__(self, store: Any, embedder: Embedder, word_scorer: Any = None, batch_size: int = DEFAULT_BATCH,
                 lease_s: float | None = None, run: bool = True, on_batch: Any = None) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.store, self.embedder, self.word_scorer, self.batch_size = store, embedder, word_scorer, batch_size
        self.queue = store.embed_queue
        from lightmem.stores.postgres.queue import DEFAULT_LEASE_S

        self.lease_s = float(lease_s if lease_s is not None else DEFAULT_LEASE_S)
        if self.lease_s <= 0:
            raise ValueError("lease_s must be positive")
        self.runs, self.on_batch = run, on_batch
        self.holder = holder_name()
        self._cond = threading.Condition()
        self._submitted: set[str] = set()  # item ids this process wrote that flush() waits for
        self._leftovers_through = 0  # jobs queued before this indexer started, up to this item row: flush() waits too
        self._closed = False
        self._wake = False
        self._thread: threading.Thread | None = None
        self.indexed = 0  # items embedded by this indexer
        self.stored = 0  # of them, stored (the rest changed or went meanwhile, or another holder was first)
        self.failed = 0
        self.batches = 0
        self.busy_seconds = 0.0
        self.last_lag = 0.0
        self.max_lag = 0.0
        self.last_error: str | None = None

    # -- the caller's side -------------------------------------------------------------------
    def submit(self, user_id: str, items: Sequence[tuple[str, str]]) -> None:
        """Note (item id, text) of items just written without vectors: their jobs are in the table already (the
        write's transaction queued them); ``flush`` waits for them and this process's thread wakes for them."""
        if not items:
            return
        with self._cond:
            if self._closed:
                raise RuntimeError("the background indexer is closed")
            self._submitted.update(item_id for item_id, _ in items)
            self._wake = True
            self._cond.notify_all()
            grown = len(self._submitted) > MAX_TRACKED
        if grown:  # a process that writes and never flushes: forget what is done (a query, now and then)
            self.flush(timeout=0, leftovers=False)
        self._start()

    def start(self) -> None:
        """Start claiming (a process that runs the queue also takes what a killed one left)."""
        if self.runs:
            try:  # what a killed process left: flush() waits for it too, as it would after a restart on one host
                self._leftovers_through = self.queue.last_rid()
            except Exception as exc:  # noqa: BLE001 - flush then waits only for this process's writes
                log.debug("indexer: could not read the queue: %s: %s", type(exc).__name__, exc)
            try:
                n = self.queue.retry_failed()
                if n:
                    log.info("indexer: %d items that failed to embed before are queued again", n)
            except Exception as exc:  # noqa: BLE001 - they stay failed; the rest runs
                log.warning("indexer: could not requeue failed items: %s: %s", type(exc).__name__, exc)
        self._start()

    def _start(self) -> None:
        with self._cond:
            if self.runs and self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="lightmem-queue-indexer", daemon=True)
                _register_stop()
                _RUNNING.add(self)
                self._thread.start()

    @property
    def alive(self) -> bool:
        """Whether the claiming thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def backlog(self) -> int:
        return int(self.queue.status()["backlog"])

    def flush(self, timeout: float | None = None, leftovers: bool = True) -> bool:
        """Wait until the items this process wrote so far have their vectors (whoever embedded them) or failed for
        good, and (``leftovers``) those the queue held when this indexer started. False when ``timeout`` ran out
        first, or this process embeds and its thread is gone."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            asked = set(self._submitted)
        waiting, ok = asked, True
        while leftovers and self._leftovers_through and ok:
            try:
                if not self.queue.waiting_through(self._leftovers_through):
                    self._leftovers_through = 0
                    break
            except Exception as exc:  # noqa: BLE001 - a database hiccup: look again
                log.debug("indexer: reading the queue failed (%s: %s)", type(exc).__name__, exc)
            ok = self._may_wait(deadline)
        while waiting and ok:
            try:
                waiting = self.queue.waiting(sorted(waiting))
            except Exception as exc:  # noqa: BLE001 - a database hiccup: look again
                log.debug("indexer: reading the queue failed (%s: %s)", type(exc).__name__, exc)
            if not waiting:
                break
            ok = self._may_wait(deadline)
        with self._cond:
            self._submitted -= asked - waiting  # done: no longer waited for (the set would grow with every write)
        return ok

    def _may_wait(self, deadline: float | None) -> bool:
        """Sleep a poll's length; False instead when the deadline passed or this process's thread died."""
        if self.runs and (self._closed or (self._thread is not None and not self._thread.is_alive())):
            self.last_error = self.last_error or "the indexer thread stopped"
            return False  # nobody here embeds any more: waiting would never end
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(FLUSH_POLL_S)
        return True

    def status(self) -> dict[str, Any]:
        """The queue's backlog and oldest wait (read from the database: the same in every process) and this
        indexer's own counts."""
        try:
            queue = self.queue.status()
        except Exception as exc:  # noqa: BLE001 - the status page must answer
            queue = {"backlog": None, "leased": None, "failed": None, "oldest_wait_s": None}
            self.last_error = f"{type(exc).__name__}: {exc}"
        return {
            "queue": "postgres",
            "running": self.alive,
            "claims": self.runs,
            **queue,
            "indexed": self.indexed,
            "stored": self.stored,
            "failed_here": self.failed,
            "batches": self.batches,
            "items_per_s": round(self.indexed / self.busy_seconds, 1) if self.busy_seconds else None,
            "last_lag_s": round(self.last_lag, 3),
            "max_lag_s": round(self.max_lag, 3),
            "last_error": self.last_error,
        }

    def close(self, wait: bool = True) -> None:
        """Stop the thread (``wait``: after this process's own writes are embedded, when it embeds) and give back
        its leases, so that what it held is claimable at once."""
        if wait and self.runs and self.alive:
            self.flush(leftovers=False)  # what this process wrote; others' leftovers stay queued for anyone
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        _RUNNING.discard(self)
        if self.runs:
            try:
                self.queue.release(self.holder)
            except Exception as exc:  # noqa: BLE001 - the leases then run out on their own
                log.debug("indexer: could not release leases: %s: %s", type(exc).__name__, exc)
        self.queue.close()

    # -- the thread --------------------------------------------------------------------------
    def _run(self) -> None:
        idle = 0
        while True:
            with self._cond:
                if self._closed:
                    return
                self._wake = False
            try:
                jobs = self.queue.claim(self.holder, self.batch_size, self.lease_s)
            except Exception as exc:  # noqa: BLE001 - the database is away: try again later
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("indexer: claiming failed (%s); retrying", self.last_error)
                self._sleep(min(0.5 * 2 ** idle, 5.0))
                idle += 1
                continue
            idle = 0
            if not jobs:
                self._idle_wait()
                continue
            self._index(jobs)

    def _sleep(self, seconds: float) -> None:
        with self._cond:
            if not self._closed:
                self._cond.wait(seconds)

    def _idle_wait(self) -> None:
        """Wait for a job: this process's own submit, another's NOTIFY, or the poll (leases that ran out)."""
        with self._cond:
            if self._closed or self._wake:
                return
        self.queue.wait(POLL_S)

    def _index(self, jobs: list[Any]) -> None:
        started = time.monotonic()
        rids = [j.rid for j in jobs]
        with self._renewing(rids):
            done, failed, untried = self._embed(jobs)
        self.busy_seconds += time.monotonic() - started
        self.batches += 1
        embedded = len(jobs) - len(failed) - len(untried)
        if done < len(jobs) - len(failed):  # an item changed meanwhile was queued again; anything else left is ours
            try:
                self.queue.release(self.holder, [r for r in rids if r not in failed])
            except Exception:  # noqa: BLE001 - the lease runs out instead
                pass
        seconds = time.monotonic() - started
        lag = max(j.waited_s for j in jobs) + seconds
        self.indexed += embedded
        self.stored += done
        with self._cond:
            self._submitted.difference_update(j.item_id for j in jobs if j.rid not in failed and j.rid not in untried)
        self.last_lag, self.max_lag = lag, max(self.max_lag, lag)
        if self.on_batch is not None:
            self.on_batch(embedded, done, seconds)
        with self._cond:
            self._cond.notify_all()

    def _embed(self, jobs: list[Any]) -> tuple[int, set[int], set[int]]:
        """Embed and store a batch; when it fails, each job alone, so that one bad item fails only itself. Returns
        the items stored, the row ids of the jobs that failed (counted against them in the queue) and of those left
        untried because the indexer is closing."""
        entries = [(j.user_id, j.item_id, j.text) for j in jobs]
        try:
            return embed_and_store(self.store, self.embedder, self.word_scorer, entries), set(), set()
        except Exception as exc:  # noqa: BLE001 - one bad item must not stop the others
            if self._closed:  # closing: the batch goes back to the queue as it is (released by _index)
                return 0, set(), {j.rid for j in jobs}
            if len(jobs) == 1:
                return 0, self._failed(jobs, exc), set()
            log.warning("indexer: a batch of %d failed (%s: %s); trying its items one by one", len(jobs),
                        type(exc).__name__, exc)
        done, failed, untried = 0, set(), set()
        for job, entry in zip(jobs, entries):
            if self._closed:  # the rest goes back to the queue for another process (or the next start)
                untried.add(job.rid)
                continue
            try:
                done += embed_and_store(self.store, self.embedder, self.word_scorer, [entry])
            except Exception as exc:  # noqa: BLE001 - counted against this job alone
                failed |= self._failed([job], exc)
        return done, failed, untried

    def _failed(self, jobs: list[Any], exc: BaseException) -> set[int]:
        """Count a failure against ``jobs`` in the queue (claimable again later, left out after ``max_failures``)."""
        rids = {j.rid for j in jobs}
        self.failed += len(rids)
        self.last_error = f"{type(exc).__name__}: {exc}"
        log.warning("indexer: %d item(s) failed (%s); queued again, %d tries at most", len(rids), self.last_error,
                    self.queue.max_failures)
        try:
            self.queue.fail(self.holder, sorted(rids), self.last_error)
        except Exception:  # noqa: BLE001 - the lease runs out instead
            pass
        return rids

    @contextlib.contextmanager
    def _renewing(self, rids: list[int]) -> Iterator[None]:
        """Extend the batch's lease every third of it while it is embedded (a slow batch is not taken by another)."""
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(self.lease_s / 3):
                try:
                    self.queue.renew(self.holder, rids, self.lease_s)
                except Exception as exc:  # noqa: BLE001 - the lease may then run out: double work, never loss
                    log.debug("indexer: renewing a lease failed: %s: %s", type(exc).__name__, exc)

        thread = threading.Thread(target=renew, name="lightmem-lease", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()


def make_indexer(store: Any, embedder: Embedder, word_scorer: Any, background: bool,
                 index_here: bool = True) -> BackgroundIndexer | QueueIndexer | None:
    """The indexer a ``Memory`` over ``store`` runs: none (``add`` embeds before it returns), the shared queue's
    (a store with an ``embed_queue``: PostgreSQL) or the in-process one (the embedded store).

    Args:
        background: ``add`` returns before the vectors exist; an indexer writes them.
        index_here: This process embeds (True), or leaves it to ``lightmem worker`` processes (False; needs a
            store with a shared queue and ``background``).

    Raises:
        InvalidInputError: ``index_here=False`` on a store without a shared queue, or without ``background``.
    """
    if not isinstance(index_here, bool):
        raise InvalidInputError(f"index_here must be True or False, got {type(index_here).__name__}")
    queue = getattr(store, "embed_queue", None)
    if not index_here and (queue is None or not background):
        raise InvalidInputError(
            "index_here=False leaves embedding to `lightmem worker` processes, which drain a PostgreSQL store's "
            "queue: open a postgresql:// store with background_index on, or keep index_here=True"
            if queue is None else "index_here=False needs background_index=True (workers embed after add returns)")
    if not background or not getattr(store, "deferred_vectors", False):
        return None
    if queue is not None:
        return QueueIndexer(store, embedder, word_scorer, run=index_here)
    return BackgroundIndexer(store, embedder, word_scorer)
