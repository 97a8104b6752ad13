"""Session-diverse order of ranked memories: for questions whose answer is gathered across sessions.

A Stage-2 ranking tends to put many memories of one conversation session on top (they share the
question's words), so a token budget fills with one session while evidence from other sessions waits
below the cut. ``spread_sessions`` delays each memory by ``spread`` ranks for every memory of its session
already placed before it: with ``spread=0`` the order is unchanged; the larger it is, the sooner the best
memory of each other session comes. Memories without a session are never delayed.

Pure: session keys and a rank order in, a new order out.
"""
from __future__ import annotations

import heapq
from collections.abc import Hashable, Sequence


def spread_sessions(sessions: Sequence[Hashable | None], spread: float) -> list[int]:
    """The order of ``range(len(sessions))`` (given best first) after delaying each memory by ``spread``
    ranks per memory of the same session placed before it. Ties keep the input order."""
    if spread < 0:
        raise ValueError(f"spread must be >= 0, got {spread!r}")
    n = len(sessions)
    if spread == 0 or n < 2:
        return list(range(n))
    placed: dict[Hashable, int] = {}
    # Each session's waiting memories in rank order; a heap of (effective rank, input rank, session) heads.
    queues: dict[Hashable, list[int]] = {}
    heap: list[tuple[float, int, object]] = []
    for i, s in enumerate(sessions):
        if s is None:
            heap.append((float(i), i, None))
        else:
            queues.setdefault(s, []).append(i)
    for s, q in queues.items():
        q.reverse()  # pop() gives the best waiting memory
        heap.append((float(q[-1]), q[-1], s))
    heapq.heapify(heap)
    out: list[int] = []
    while heap:
        _, i, s = heapq.heappop(heap)
        out.append(i)
        if s is None:
            continue
        q = queues[s]
        q.pop()
        placed[s] = placed.get(s, 0) + 1
        if q:
            heapq.heappush(heap, (q[-1] + spread * placed[s], q[-1], s))
    return out
