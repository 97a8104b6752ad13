"""The system under test: what the benchmark harnesses call, so a ``Memory`` and a baseline run alike.

``Memory`` satisfies ``System``; so does ``lightmem.evaluation.baselines.FullContext``, which
has no long-term memory (``ltm`` is None and the consolidation methods do nothing). The
harnesses (``locomo``, ``longmemeval``, ``growth``) are typed against it.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from lightmem.retrieval.composer import pack_by_budget
from lightmem.retrieval.engine import RetrievalResult
from lightmem.types import Hit, MemoryItem, Turn


@runtime_checkable
class System(Protocol):
    """A memory system the evaluation ingests conversations into and asks questions of.

    Attributes:
        ltm: The long-term memory (consolidation, graph), or None when the system has none;
            the harness consolidates before the questions only when it is set.
    """

    ltm: Any

    def add_turns(self, user_id: str, turns: Sequence[Turn], context: Sequence[str] = ()) -> list[MemoryItem]: ...

    def flush(self, user_id: str, context: Sequence[str] = ()) -> list[MemoryItem]: ...

    def retrieve(self, query: str, user_id: str, k: int | None = None, filters: Any = None, stm: Sequence[str] = (),
                 now: object = None, budget: int | None = None) -> RetrievalResult: ...

    def consolidate(self, user_id: str | None = None, max_cycles: int = 1000) -> list[Any]: ...

    def wait_for_consolidation(self, timeout: float | None = None) -> bool: ...

    def usage(self) -> dict[str, dict[str, float]]: ...

    def stats(self) -> dict[str, dict[str, int]]: ...

    def ltm_stats(self) -> dict[str, int]: ...

    def close(self) -> None: ...


def within_budget(system: System, query: str, user_id: str, k: int, budget: int, now: object = None) -> list[Hit]:
    """The hits a system returns for a token budget (Stage 2 may fill it with more than K short
    memories), packed again so that no system can pass more than ``budget`` tokens."""
    hits = system.retrieve(query, user_id, k=k, now=now, budget=budget).hits
    return [hits[i] for i in pack_by_budget([h.item.n_tokens for h in hits], budget)]
