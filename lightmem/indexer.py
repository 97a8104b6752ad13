"""The background indexer: the vectors (and word keep-scores) of items written without them.

With it, ``Memory.add`` commits a turn's items with their text and BM25 terms and returns: the write
is durable and found by its words at once. A thread embeds the waiting items in batches, outside the
store's lock, and writes their vectors (``MemoryStore.set_vectors``). The work list is the store
itself (items whose embedding is empty), so a process killed mid-batch loses nothing: the next one
to open the store picks the rest up (``MemoryStore.unembedded``).

The queue in memory is bounded (``max_queue`` items): past it, ``submit`` only counts what it was given,
and when the queue runs dry the thread lists the next waiting items from the table. ``flush`` waits until
everything submitted is embedded (evaluations and tests call it before they measure); ``status`` is the
backlog the server reports.
"""
from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from lightmem import tracing
from lightmem.models.embedder import Embedder
from lightmem.models.word_scorer import keep_codes

log = logging.getLogger(__name__)

# Items per encoder call and per transaction. The int8 encoders run each text alone (a vector must not depend on
# its batch-mates), so this bounds the lag and a transaction's size, not the encoder's rate.
DEFAULT_BATCH = 64
MAX_QUEUE = 10_000  # items held in memory with their text; the rest wait in the table and are listed as the queue drains
ATTEMPTS = 3  # an item that fails alone is retried (a busy database) this many times in all, then left for the next open

_Entry = tuple[str, str, str, float, int]  # (user id, item id, text, queued at, attempt)

_RUNNING: weakref.WeakSet = weakref.WeakSet()  # indexers whose thread runs, stopped when the interpreter exits
_stop_registered = False


def _stop_running() -> None:
    """Stop every running indexer's thread before the interpreter shuts down (a process that exits without
    closing its Memory). A daemon thread still inside the encoder's native code when the interpreter is torn
    down aborts the process (SIGABRT, "terminate called without an active exception"); stopped here it
    finishes its batch first, and what was not embedded waits in the table for the next open."""
    for indexer in list(_RUNNING):
        indexer.close(wait=False)


def _register_stop() -> None:
    global _stop_registered
    if _stop_registered:
        return
    _stop_registered = True
    # threading's exit hooks run before daemon threads are abandoned and before concurrent.futures stops its
    # pools (hooks run newest first), so the batch being embedded can still use the encoder's threads.
    register = getattr(threading, "_register_atexit", None)
    try:
        (register or atexit.register)(_stop_running)
    except RuntimeError:  # the interpreter is already shutting down
        pass


class BackgroundIndexer:
    """Embeds a store's items written without vectors, on one daemon thread.

    Args:
        store: A store with ``deferred_vectors`` (``write(..., vectors=None)``, ``set_vectors``, ``unembedded``).
        embedder: Encodes the items' texts (the store's embedder).
        word_scorer: Scores each item's words for keeping (``metadata["keep"]``); None: no scores.
        batch_size: Items per encoder call at most.
        recover: Queue the items a previous process left without vectors when the thread starts.
        max_queue: Items held in memory at most; what is submitted past it waits in the table.
    """

    def __init__(self, store: Any, embedder: Embedder, word_scorer: Any = None, batch_size: int = DEFAULT_BATCH,
                 recover: bool = True, max_queue: int = MAX_QUEUE) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if max_queue < 1:
            raise ValueError("max_queue must be at least 1")
        self.store, self.embedder, self.word_scorer, self.batch_size = store, embedder, word_scorer, batch_size
        self.max_queue = max_queue
        self._cond = threading.Condition()
        self._queue: deque[_Entry] = deque()
        self._queued: set[str] = set()  # item ids queued or being embedded
        self._spilled = 0  # items submitted while the queue was full (they wait in the table): the rest of the backlog
        self._given_up: set[str] = set()  # items that failed ATTEMPTS times in this process: the next open retries them
        self._recover = recover  # the table is to be listed: at the start (a restart's leftovers) and after a spill
        self._listed = False  # the first listing (a restart's leftovers) was done
        self._closed = False
        self._submitted = False  # close() waits only for work this process queued
        self._thread: threading.Thread | None = None
        self.indexed = 0
        self.failed = 0
        self.batches = 0
        self.busy_seconds = 0.0
        self.last_lag = 0.0  # seconds from queueing to stored vector, of the last batch's oldest item
        self.max_lag = 0.0
        self.last_error: str | None = None

    # -- the caller's side -------------------------------------------------------------------
    def submit(self, user_id: str, items: Sequence[tuple[str, str]]) -> None:
        """Queue (item id, text) of a user's items just written without vectors."""
        if not items:
            return
        now = time.monotonic()
        with self._cond:
            if self._closed:
                raise RuntimeError("the background indexer is closed")
            self._submitted = True
            for item_id, text in items:
                if item_id in self._queued:
                    continue
                if len(self._queue) >= self.max_queue or self._spilled:  # in order: the table lists them later
                    self._spilled += 1
                    self._recover = True
                else:
                    self._queued.add(item_id)
                    self._queue.append((user_id, item_id, text, now, 1))
            self._start()
            self._cond.notify_all()

    def start(self) -> None:
        """Queue what a previous process left without vectors (listed here, before this process writes, so
        that only those count as leftovers) and start the thread (it also starts at the first ``submit``)."""
        if self._recover and self._thread is None and not self._closed:
            self._list_waiting()
        with self._cond:
            if not self._closed:
                self._start()

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="lightmem-indexer", daemon=True)
            _register_stop()
            _RUNNING.add(self)
            self._thread.start()

    def backlog(self) -> int:
        """Items queued or being embedded, and those waiting in the table past the queue's bound (counted in the
        table whenever it is listed, so a reopened store reports all its leftovers, not the bound)."""
        with self._cond:
            return len(self._queued) + self._spilled

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the items queued when it was called (and a restart's leftovers) are embedded or have
        failed for good; items queued meanwhile are not waited for, except while the queue is past its bound
        (the items waiting in the table are waited for as they are listed). False when ``timeout`` ran out
        first or the indexer's thread is gone (``status()["last_error"]`` says why)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            if self._thread is None and self._recover and not self._closed:
                self._start()  # a store reopened with leftovers: flushing means embedding them
            while self._recover and self._thread is not None:  # leftovers or spilled items are still to be listed
                if not self._wait(deadline):
                    return False
            waiting = set(self._queued)
            while not waiting.isdisjoint(self._queued):
                if not self._wait(deadline):
                    return False
            return True

    def _wait(self, deadline: float | None) -> bool:
        """One wait on the condition (held); False when the deadline passed or the thread died."""
        if self._thread is not None and not self._thread.is_alive() and not self._closed:
            self.last_error = self.last_error or "the indexer thread stopped"
            return False
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return False
        self._cond.wait(left if left is not None else 1.0)  # wakes now and then to see the thread alive
        return True

    def status(self) -> dict[str, float | int | str | None]:
        """Backlog, items indexed and failed in this process, throughput while busy, lags, last error."""
        with self._cond:
            oldest = self._queue[0][3] if self._queue else None
            return {
                "running": self._thread is not None and self._thread.is_alive(),
                "backlog": len(self._queued) + self._spilled,
                "indexed": self.indexed,
                "failed": self.failed,
                "batches": self.batches,
                "items_per_s": round(self.indexed / self.busy_seconds, 1) if self.busy_seconds else None,
                "oldest_wait_s": round(time.monotonic() - oldest, 3) if oldest is not None else 0.0,
                "last_lag_s": round(self.last_lag, 3),
                "max_lag_s": round(self.max_lag, 3),
                "last_error": self.last_error,
            }

    def close(self, wait: bool = True) -> None:
        """Stop the thread; ``wait``: after embedding the backlog, when this process added to it (a process that
        only reads, such as ``lightmem stats``, does not stay to finish another's leftovers; the next open does).
        What is left waits, stored and found by its words, for the next open."""
        if wait and self._submitted:
            self.flush()
        with self._cond:
            self._closed = True
            self._queue.clear()
            self._queued.clear()
            self._spilled = 0
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        _RUNNING.discard(self)

    # -- the thread --------------------------------------------------------------------------
    def _list_waiting(self) -> None:
        """Queue, up to the bound, the items the table holds without vectors (a restart's leftovers at the
        start, the spilled ones after): called at the start and on the thread while nothing is being embedded."""
        first, self._listed = not self._listed, True
        with self._cond:
            room, skip = self.max_queue - len(self._queue), set(self._queued) | self._given_up
        try:
            left = self.store.unembedded(limit=room + len(skip)) if room > 0 else []
        except Exception as exc:  # noqa: BLE001 - a failed scan leaves the rows for the next open
            log.warning("indexer: could not list the items waiting for vectors (they wait for the next open): %s: %s",
                        type(exc).__name__, exc)
            with self._cond:
                self._spilled, self._recover = 0, False
                self._cond.notify_all()
            return
        more = len(left) >= room + len(skip)  # the table holds more than was listed
        with self._cond:
            spilled_before = self._spilled
        waiting = self._waiting_in_table() if more else None
        now = time.monotonic()
        with self._cond:
            fresh = [row for row in left if row[1] not in skip][:room]
            for user_id, item_id, text in fresh:
                self._queued.add(item_id)
                self._queue.append((user_id, item_id, text, now, 1))
            if first and fresh:
                log.info("indexer: %d items written before a restart wait for their vectors", len(fresh))
            if not more or self._closed:  # the table has no more: nothing is left out
                self._spilled, self._recover = 0, False
            elif waiting is not None:  # exact: the table's waiting rows less those held here, and submits since the count
                rest = waiting - len(self._queued) - len(self._given_up) + (self._spilled - spilled_before)
                self._spilled = max(rest, 0)  # still listed again when the queue drains (_recover stays set)
            else:
                self._spilled = max(self._spilled - len(fresh), 1)
            self._cond.notify_all()

    def _waiting_in_table(self) -> int | None:
        """How many items the store holds without vectors (None when it cannot count them): the backlog past the
        queue's bound is counted, not guessed, so that a reopened store with more leftovers than the bound
        reports them all."""
        count = getattr(self.store, "unembedded_count", None)
        if count is None:
            return None
        try:
            return int(count())
        except Exception as exc:  # noqa: BLE001 - the backlog is then an estimate; the listing goes on
            log.debug("indexer: could not count the items waiting for vectors: %s: %s", type(exc).__name__, exc)
            return None

    def _run(self) -> None:
        while True:
            if self._recover:
                with self._cond:
                    listing = not self._queue  # the queue ran dry (or the thread just started): list the table
                if listing:
                    self._list_waiting()
            with self._cond:
                while not self._queue and not self._recover and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                if not self._queue:
                    continue
                batch = [self._queue.popleft() for _ in range(min(self.batch_size, len(self._queue)))]
            started = time.monotonic()
            retry: list[_Entry] = []
            try:
                retry = self._index(batch)
            finally:
                with self._cond:
                    for entry in batch:
                        if entry not in retry:
                            self._queued.discard(entry[1])
                    self._queue.extend((u, i, t, q, a + 1) for u, i, t, q, a in retry)
                    self.batches += 1
                    self.busy_seconds += time.monotonic() - started
                    self._cond.notify_all()
            if retry:  # a busy or failing database: give it a moment
                time.sleep(min(0.25 * 2 ** retry[0][4], 2.0))

    def _index(self, batch: list[_Entry]) -> list[_Entry]:
        """Embed and store a batch; returns the items to try again."""
        try:
            self._embed_and_store(batch)
            return []
        except Exception as exc:  # noqa: BLE001 - one bad item must not stop the others
            if len(batch) > 1:
                log.warning("indexer: a batch of %d failed (%s: %s); trying its items one by one",
                            len(batch), type(exc).__name__, exc)
            errors: list[tuple[_Entry, Exception]] = []
            if len(batch) == 1:
                errors.append((batch[0], exc))
            else:
                for one in batch:
                    try:
                        self._embed_and_store([one])
                    except Exception as exc1:  # noqa: BLE001
                        errors.append((one, exc1))
            retry = []
            for one, err in errors:
                if one[4] < ATTEMPTS:
                    retry.append(one)
                else:
                    self._failed(one, err)
            return retry

    def _failed(self, entry: _Entry, exc: BaseException) -> None:
        # The row keeps its empty embedding: found by its words, and retried when the store is next opened.
        with self._cond:
            self._given_up.add(entry[1])
        self.failed += 1
        self.last_error = f"{type(exc).__name__}: {exc}"
        log.error("indexer: item %s of user %s not embedded after %d tries (it is still found by its words; the "
                  "next open retries it): %s", entry[1], entry[0], entry[4], self.last_error)

    def _embed_and_store(self, batch: list[_Entry]) -> None:
        done = embed_and_store(self.store, self.embedder, self.word_scorer, [(e[0], e[1], e[2]) for e in batch])
        lag = time.monotonic() - min(e[3] for e in batch)
        self.indexed += len(batch)
        self.last_lag, self.max_lag = lag, max(self.max_lag, lag)
        if done < len(batch):
            log.debug("indexer: %d of %d items changed or went before their vectors came", len(batch) - done, len(batch))


@tracing.embed_span
def embed_and_store(store: Any, embedder: Embedder, word_scorer: Any, batch: Sequence[tuple[str, str, str]]) -> int:
    """Embed (user id, item id, index text) entries in one encoder call, score their words (when a scorer is given),
    and store the vectors per user (``set_vectors``); returns how many items took their vector (an item changed or
    deleted meanwhile keeps waiting or is gone)."""
    texts = [e[2] for e in batch]
    vecs = np.asarray(embedder.encode(texts), dtype=np.float32)
    keep = None
    if word_scorer is not None:
        try:
            keep = keep_codes(word_scorer, texts)
        except Exception as exc:  # noqa: BLE001 - the vectors are worth storing without the scores
            log.warning("indexer: word scores failed (%s: %s); %d items stored without them",
                        type(exc).__name__, exc, len(texts))
    by_user: dict[str, list[int]] = {}
    for i, e in enumerate(batch):
        by_user.setdefault(e[0], []).append(i)
    done = 0
    for user_id, rows in by_user.items():
        done += store.set_vectors(user_id, [(batch[i][1], batch[i][2]) for i in rows], vecs[rows],
                                  keep=[keep[i] for i in rows] if keep is not None else None)
    return done
