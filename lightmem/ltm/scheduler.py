"""The consolidation scheduler: a background worker that never blocks ``add`` or ``search``.

``notify`` (called by ``Memory`` after each write) counts a user's new turns and, every
``every_n_turns`` or under capacity pressure, queues the user; it only touches a counter
and a queue. One daemon thread runs the cycles, one user at a time, at a lowered OS
scheduling priority where the platform allows it (Linux threads are tasks), so the
online path keeps the CPU when both want it.
"""
from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable

from lightmem.ltm.consolidation import Consolidator, CycleReport

log = logging.getLogger(__name__)


def count_turns(turns: dict[str, int], user_id: str, new_turns: int, every_n_turns: int, pressure: bool) -> bool:
    """Add a write's turns to the user's count in ``turns``; True (and the count back to 0) when a cycle is due:
    ``every_n_turns`` reached, or capacity ``pressure``. The caller holds its lock."""
    n = turns.get(user_id, 0) + max(0, new_turns)
    due = n >= every_n_turns or pressure
    turns[user_id] = 0 if due else n
    return due


class ConsolidationScheduler:
    """Runs ``consolidator.run(user)`` in a background thread when a user needs it.

    Args:
        consolidator: Does the cycles.
        every_n_turns: New turns of a user that trigger a cycle.
        nice: Priority increment of the worker thread (0 keeps the caller's).
        on_report: Called with each cycle's report (metrics, tests).
    """

    def __init__(self, consolidator: Consolidator, every_n_turns: int = 12, nice: int = 10,
                 on_report: Callable[[CycleReport], None] | None = None) -> None:
        if every_n_turns <= 0:
            raise ValueError("every_n_turns must be positive")
        self.consolidator, self.every_n_turns, self.nice, self.on_report = consolidator, every_n_turns, nice, on_report
        self._turns: dict[str, int] = {}
        self._queued: set[str] = set()
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._lock = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.reports: list[CycleReport] = []
        self.errors: list[BaseException] = []
        # Called before each cycle: the Memory waits there for its background indexer, so that a cycle
        # sees the vectors of everything written before it (items without one are not selected).
        self.before_cycle: Callable[[], object] | None = None

    def notify(self, user_id: str, new_turns: int, pressure: bool = False) -> bool:
        """Count a write; queue the user when due. Returns True when it queued the user."""
        with self._lock:
            due = count_turns(self._turns, user_id, new_turns, self.every_n_turns, pressure)
            if not due or user_id in self._queued or self._stopping:
                return False
            self._queued.add(user_id)
            self._idle.clear()
        self._ensure_thread()
        self._queue.put(user_id)
        return True

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name="lightmem-consolidation", daemon=True)
                self._thread.start()

    def _work(self) -> None:
        if self.nice and hasattr(os, "setpriority"):
            try:  # per-thread on Linux: the native id is the thread's task id
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, os.getpriority(os.PRIO_PROCESS, 0) + self.nice))
            except OSError as exc:  # not permitted, or not a per-thread platform
                log.debug("could not lower the consolidation thread's priority: %s", exc)
        while True:
            user = self._queue.get()
            if user is None:
                return
            try:
                if self.before_cycle is not None:
                    self.before_cycle()
                report = self.consolidator.run(user)
                self.reports.append(report)
                if self.on_report is not None:
                    self.on_report(report)
            except BaseException as exc:  # a failed cycle committed nothing; the next one retries
                log.exception("consolidation of user %s failed", user)
                self.errors.append(exc)
            finally:
                with self._lock:
                    self._queued.discard(user)
                    if not self._queued:
                        self._idle.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every queued cycle has run (evaluations, tests). True when idle."""
        return self._idle.wait(timeout)

    @property
    def busy(self) -> bool:
        return not self._idle.is_set()

    def close(self, timeout: float | None = 60.0) -> None:
        """Stop taking work, let the running cycle finish (it commits or rolls back whole)."""
        with self._lock:
            self._stopping = True
            thread = self._thread
        if thread is not None and thread.is_alive():
            self._queue.put(None)
            thread.join(timeout)
