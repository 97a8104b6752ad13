"""The consolidation scheduler over a shared queue: cycles as jobs in PostgreSQL that any process claims.

Where ``ConsolidationScheduler`` queues a due user in its own process (and forgets it when the process dies), this
one writes the request to the store's ``consolidation_jobs`` table (``stores.postgres.queue.ConsolidationQueue``):
the request survives the process, and the cycle runs in whichever process claims it first, one holder per user at a
time, with a lease that a live holder renews and a dead one lets run out.

Which processes run cycles: a ``Memory`` with LTM in the background on a PostgreSQL store (``Memory.open(
"postgresql://...", ltm=LTMOptions())``) requests its users' cycles and runs cycles from the table (anyone's) once
its first request is made, as the in-process scheduler did; one opened with ``index_here=False`` leaves the queue's
jobs, embedding and consolidation alike, to other processes and only requests (``run=False``). ``lightmem worker
--consolidate`` runs them from its start. ``lightmem serve`` opens no LTM, so its replicas neither request nor run
cycles: a deployment that wants the graph runs ``lightmem worker --consolidate`` beside writers that request.

``wait`` keeps its meaning: the cycles this process asked for have run, here or in another process (it watches the
users this process requested until their rows are gone, or failed for good).
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Protocol

from lightmem.ltm.consolidation import Consolidator, CycleReport
from lightmem.ltm.scheduler import count_turns

log = logging.getLogger(__name__)

DEFAULT_LEASE_S = 60.0  # stores.postgres.queue.DEFAULT_CYCLE_LEASE_S; renewed every third of it during a cycle
POLL_S = 1.0  # an idle runner looks at the table this often (requests from other processes, expired leases)
WAIT_POLL_S = 0.1  # wait() reads the table this often


class CycleQueue(Protocol):
    """The statements a ``QueueScheduler`` needs (``ConsolidationQueue``)."""

    def request(self, user_id: str) -> None: ...
    def claim(self, holder: str, n: int = 1, lease_s: float = DEFAULT_LEASE_S) -> list[str]: ...
    def renew(self, holder: str, user_ids: Sequence[str], lease_s: float = DEFAULT_LEASE_S) -> int: ...
    def done(self, holder: str, user_id: str) -> bool: ...
    def fail(self, holder: str, user_id: str, error: str, retry_after_s: float = 5.0) -> None: ...
    def release(self, holder: str, user_ids: Sequence[str] | None = None) -> int: ...
    def waiting(self, user_ids: Sequence[str]) -> set[str]: ...


class QueueScheduler:
    """``ConsolidationScheduler``'s interface (``notify``, ``wait``, ``busy``, ``close``, ``before_cycle``,
    ``reports``, ``errors``) over a shared queue of users due for a cycle.

    Args:
        consolidator: Does the cycles.
        queue: The store's ``consolidation_queue``.
        every_n_turns: New turns of a user that make a cycle due.
        nice: Priority increment of the runner thread (0 keeps the caller's).
        on_report: Called with each cycle's report (metrics, tests, the worker's counts).
        run: Claim and run cycles (True), or only request them (False: workers run them).
        lease_s: Seconds a claimed user stays this runner's without a renewal.
        poll_s: Seconds between looks at the table when idle.
    """

    def __init__(self, consolidator: Consolidator, queue: CycleQueue, every_n_turns: int = 12, nice: int = 10,
                 on_report: Callable[[CycleReport], None] | None = None, run: bool = True,
                 lease_s: float = DEFAULT_LEASE_S, poll_s: float = POLL_S) -> None:
        if every_n_turns <= 0:
            raise ValueError("every_n_turns must be positive")
        if lease_s <= 0 or poll_s <= 0:
            raise ValueError("lease_s and poll_s must be positive")
        self.consolidator, self.queue, self.every_n_turns = consolidator, queue, every_n_turns
        self.nice, self.on_report, self.runs, self.lease_s, self.poll_s = nice, on_report, run, lease_s, poll_s
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._turns: dict[str, int] = {}
        self._requested: set[str] = set()  # users this process asked for whose cycle it has not seen run yet
        self._running: str | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.reports: list[CycleReport] = []
        self.errors: list[BaseException] = []
        # Called before each cycle this process runs: the Memory waits there for its indexer (the claim already
        # skips a user whose memories queued before the request still wait for vectors, from any process).
        self.before_cycle: Callable[[], object] | None = None

    # -- the writer's side ---------------------------------------------------------------------------------
    def notify(self, user_id: str, new_turns: int, pressure: bool = False) -> bool:
        """Count a write; request the user's cycle in the table when due. Returns True when it requested."""
        with self._lock:
            due = count_turns(self._turns, user_id, new_turns, self.every_n_turns, pressure)
            if not due or self._stopping:
                return False
        try:
            self.queue.request(user_id)
        except Exception as exc:  # noqa: BLE001 - the write committed; the user's next write asks again
            log.warning("could not request a consolidation cycle for user %s: %s: %s", user_id, type(exc).__name__, exc)
            self.errors.append(exc)
            with self._lock:
                self._turns[user_id] = self.every_n_turns
            return False
        with self._lock:
            self._requested.add(user_id)
        self.start()
        self._wake.set()
        return True

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the cycles this process requested have run, here or elsewhere (or failed for good).
        True when none is left; False when ``timeout`` seconds ran out first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                asked = set(self._requested)
            if not asked:
                return True
            try:
                left = self.queue.waiting(sorted(asked))
            except Exception as exc:  # noqa: BLE001 - a lost connection: read again on the next look
                log.debug("consolidation queue: could not read it: %s: %s", type(exc).__name__, exc)
                left = asked
            with self._lock:
                self._requested -= asked - left
            remaining = None if deadline is None else deadline - time.monotonic()
            if left and remaining is not None and remaining <= 0:
                return False
            if left:
                time.sleep(WAIT_POLL_S if remaining is None else min(WAIT_POLL_S, remaining))

    @property
    def busy(self) -> bool:
        """A cycle runs here, or one this process requested has not been seen to run (no database read)."""
        with self._lock:
            return bool(self._requested) or self._running is not None

    # -- the runner ----------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start claiming cycles (with ``run``; a no-op otherwise, and once started)."""
        with self._lock:
            if self.runs and not self._stopping and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(target=self._work, name="lightmem-consolidation-queue", daemon=True)
                self._thread.start()

    def _work(self) -> None:
        _lower_priority(self.nice)
        while not self._stopping:
            try:
                users = self.queue.claim(self.holder, 1, self.lease_s)
            except Exception as exc:  # noqa: BLE001 - the database is away: look again later
                log.warning("consolidation queue: claim failed: %s: %s", type(exc).__name__, exc)
                users = []
            if not users:
                self._wake.wait(self.poll_s)
                self._wake.clear()
                continue
            for user in users:
                if self._stopping:
                    self._give_back(users)
                    return
                self._run(user)

    def _run(self, user: str) -> None:
        with self._lock:
            self._running = user
        stop = threading.Event()
        renewer = threading.Thread(target=self._renew, args=(user, stop), name="lightmem-consolidation-lease",
                                   daemon=True)
        renewer.start()
        try:
            if self.before_cycle is not None:
                self.before_cycle()
            report = self.consolidator.run(user)
        except BaseException as exc:  # a failed cycle committed nothing; the job is claimable again after a pause
            log.exception("consolidation of user %s failed", user)
            self.errors.append(exc)
            error = f"{type(exc).__name__}: {exc}"
            self._finish(stop, renewer, lambda: self.queue.fail(self.holder, user, error))
            return
        self.reports.append(report)
        self._finish(stop, renewer, lambda: self.queue.done(self.holder, user))
        if self.on_report is not None:
            self.on_report(report)

    def _finish(self, stop: threading.Event, renewer: threading.Thread, settle: Callable[[], object]) -> None:
        stop.set()
        renewer.join()
        try:
            settle()
        except Exception as exc:  # noqa: BLE001 - the lease runs out and another process runs the cycle again
            log.warning("consolidation queue: could not settle a job: %s: %s", type(exc).__name__, exc)
        finally:
            with self._lock:
                self._running = None

    def _renew(self, user: str, stop: threading.Event) -> None:
        while not stop.wait(self.lease_s / 3):
            try:
                if not self.queue.renew(self.holder, [user], self.lease_s):
                    log.warning("consolidation of user %s: the lease was lost (another process may run it too; the "
                                "cycle lock keeps both correct)", user)
            except Exception as exc:  # noqa: BLE001 - the next renewal tries again
                log.warning("consolidation queue: could not renew a lease: %s: %s", type(exc).__name__, exc)

    def _give_back(self, users: Sequence[str] | None = None) -> None:
        """Release ``users`` (all of this runner's when None): claimable at once by other processes."""
        try:
            self.queue.release(self.holder, None if users is None else list(users))
        except Exception as exc:  # noqa: BLE001 - the lease runs out instead
            log.debug("consolidation queue: could not release: %s: %s", type(exc).__name__, exc)

    def close(self, timeout: float | None = 60.0) -> None:
        """Stop claiming and let the running cycle finish (it commits or rolls back whole). The requests still
        in the table stay there for other processes."""
        with self._lock:
            self._stopping = True
            thread = self._thread
        self._wake.set()
        if thread is not None:
            thread.join(timeout)
            self._give_back()


def _lower_priority(nice: int) -> None:
    """Lower this thread's OS priority by ``nice`` (per thread on Linux, where a thread is a task)."""
    if nice and hasattr(os, "setpriority"):
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, os.getpriority(os.PRIO_PROCESS, 0) + nice))
        except OSError as exc:  # not permitted, or not a per-thread platform
            log.debug("could not lower the consolidation thread's priority: %s", exc)
