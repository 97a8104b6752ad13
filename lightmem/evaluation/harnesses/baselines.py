"""Baselines that are not a Memory configuration.

Dense RAG over raw turns, BM25 and dense+BM25 fusion are Memory configurations
(``conf/experiment/baseline_*.yaml``: one raw turn per memory, packed whole). Full context is not:
it replays the most recent turns that fit the prompt budget. ``FullContext`` satisfies the
evaluation's ``System`` protocol (``lightmem.evaluation.harnesses.system``), so it runs through the same
harness and its prompt is counted by the same composer.
"""
from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence

from lightmem.models.prompt_tokens import prompt_counter
from lightmem.models.tokens import TokenCounter
from lightmem.retrieval.composer import DEFAULT_BUDGET, ContextComposer
from lightmem.retrieval.engine import RetrievalResult
from lightmem.types import ComposedContext, Hit, MemoryItem, Turn


def turn_item(user_id: str, turn: Turn, n_tokens: int = 0) -> MemoryItem:
    """A raw turn as a memory: its rendered text, its own provenance, its time."""
    return MemoryItem(id=f"{user_id}:{turn.turn_id}", user_id=user_id, text=turn.render(), provenance=[turn.turn_id],
                      created_at=turn.timestamp, event_time=turn.timestamp, last_access=turn.timestamp, n_tokens=n_tokens)


def recent_that_fit(composer: ContextComposer, items: Sequence[MemoryItem], budget: int) -> list[MemoryItem]:
    """The most recent contiguous run of ``items`` (oldest first) whose prompt lines fit in ``budget``."""
    newest_first = list(reversed(items))
    kept = composer.pack(newest_first, budget)
    n = next((i for i, j in enumerate(kept) if i != j), len(kept))  # stop at the first turn that does not fit
    return list(reversed(newest_first[:n]))


class FullContext:
    """The conversation itself as context: the most recent turns that fit the prompt budget, in time order.

    Args:
        counter: Counts the prompt (None: the default reader's tokenizer).
        window: The default prompt budget when a caller names none.
        group_dates: As the Memory's composer shows dates (``ContextComposer``).
    """

    ltm = None

    def __init__(self, counter: TokenCounter | None = None, window: int = DEFAULT_BUDGET, group_dates: bool = True) -> None:
        if window <= 0:
            raise ValueError("window must be positive")
        self.composer = ContextComposer(prompt_counter(counter), int(window), group_dates=group_dates)
        self._items: dict[str, list[MemoryItem]] = defaultdict(list)

    def add_turns(self, user_id: str, turns: Sequence[Turn], context: Sequence[str] = ()) -> list[MemoryItem]:
        items = [turn_item(user_id, t) for t in turns if t.text.strip()]
        self._items[user_id].extend(items)
        return items

    def flush(self, user_id: str, context: Sequence[str] = ()) -> list[MemoryItem]:
        return []

    def flush_index(self, timeout: float | None = None) -> bool:
        return True  # nothing to index

    def retrieve(self, query: str, user_id: str, k: int | None = None, filters=None, stm: Sequence[str] = (),
                 now: object = None, budget: int | None = None) -> RetrievalResult:
        """Every turn that fits ``budget`` prompt tokens of memory lines (the default window without one)."""
        t = time.perf_counter()
        kept = recent_that_fit(self.composer, self._items.get(user_id, []), budget or self.composer.budget)
        hits = [Hit(item=it, scores={}, score=0.0) for it in kept]
        return RetrievalResult(hits=hits, candidates=[], timings_ms={"total": (time.perf_counter() - t) * 1000})

    def build_context(self, query: str, user_id: str, stm: Sequence[str] = (), budget: int | None = None,
                      k: int | None = None, filters=None, now: object = None) -> ComposedContext:
        budget = budget or self.composer.budget
        fill = self.composer.layout(query, stm, budget).memory_budget
        kept = recent_that_fit(self.composer, self._items.get(user_id, []), fill)
        return self.composer.compose(query, stm, kept, budget)

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
