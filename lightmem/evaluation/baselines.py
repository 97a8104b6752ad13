"""Baselines that are not a Memory configuration.

Dense RAG over raw turns, BM25, dense+BM25 fusion and the query-aware pipeline are Memory
configurations (``conf/experiment/baseline_*.yaml``). Full context is not: it replays the whole
history, newest turns kept, truncated to the generator's window. ``FullContext`` satisfies the
evaluation's ``System`` protocol (``lightmem.evaluation.system``), so it runs through the same harness.
"""
from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence

from lightmem.models.tokens import TokenCounter
from lightmem.retrieval.composer import format_memory, pack_by_budget
from lightmem.retrieval.engine import RetrievalResult
from lightmem.types import Hit, MemoryItem, Turn


class FullContext:
    """The whole conversation as context, truncated to ``window`` tokens (the newest turns kept).

    ``retrieve`` ignores ``k``: every turn that fits the window is "retrieved", in time order.
    ``context_budget`` tells the harness to pack the QA context to the window, not its budget.
    """

    ltm = None

    def __init__(self, counter: TokenCounter, window: int = 2048) -> None:
        if window <= 0:
            raise ValueError("window must be positive")
        self.counter, self.context_budget = counter, int(window)
        self._items: dict[str, list[MemoryItem]] = defaultdict(list)

    def add_turns(self, user_id: str, turns: Sequence[Turn], context: Sequence[str] = ()) -> list[MemoryItem]:
        turns = [t for t in turns if t.text.strip()]
        texts = [t.render() for t in turns]
        items = [
            MemoryItem(id=f"{user_id}:{len(self._items[user_id]) + i}", user_id=user_id, text=text, provenance=[t.turn_id],
                       created_at=t.timestamp, event_time=t.timestamp, last_access=t.timestamp, n_tokens=0)
            for i, (t, text) in enumerate(zip(turns, texts))
        ]
        # a prompt line costs its date prefix as well as its text
        for it, n in zip(items, self.counter.count([format_memory(it) for it in items]) if items else []):
            it.n_tokens = n
        self._items[user_id].extend(items)
        return items

    def flush(self, user_id: str, context: Sequence[str] = ()) -> list[MemoryItem]:
        return []

    def retrieve(self, query: str, user_id: str, k: int | None = None, filters=None, stm: Sequence[str] = (),
                 now: object = None, budget: int | None = None) -> RetrievalResult:
        t = time.perf_counter()
        newest_first = list(reversed(self._items.get(user_id, [])))
        kept = pack_by_budget([it.n_tokens for it in newest_first], self.context_budget)
        # contiguous recent window: stop at the first turn that does not fit
        n = next((i for i, j in enumerate(kept) if i != j), len(kept))
        hits = [Hit(item=it, scores={}, score=0.0) for it in reversed(newest_first[:n])]
        return RetrievalResult(hits=hits, candidates=[], timings_ms={"total": (time.perf_counter() - t) * 1000})

    def consolidate(self, user_id: str | None = None, max_cycles: int = 1000) -> list:
        return []  # no long-term memory

    def wait_for_consolidation(self, timeout: float | None = None) -> bool:
        return True

    def usage(self) -> dict[str, dict[str, float]]:
        return {}

    def stats(self) -> dict[str, dict[str, int]]:
        return {u: {"items": len(v)} for u, v in self._items.items()}

    def ltm_stats(self) -> dict[str, int]:
        return {}

    def close(self) -> None:
        self._items.clear()
