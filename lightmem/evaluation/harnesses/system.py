"""The system under test: what the benchmark harnesses call, so a ``Memory`` and a baseline run alike.

``Memory`` satisfies ``System``; so does ``lightmem.evaluation.harnesses.baselines.FullContext``, which
has no long-term memory (``ltm`` is None and the consolidation methods do nothing). The
harnesses (``locomo``, ``longmemeval``, ``growth``) are typed against it.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from lightmem.retrieval.composer import ContextComposer
from lightmem.retrieval.engine import RetrievalResult
from lightmem.types import ComposedContext, MemoryItem, Turn


@runtime_checkable
class System(Protocol):
    """A memory system the evaluation ingests conversations into and asks questions of.

    Attributes:
        ltm: The long-term memory (consolidation, graph), or None when the system has none;
            the harness consolidates before the questions only when it is set.
        composer: Renders and counts its prompts; the harness renders its controls (gold evidence,
            a random context) with it, so they are counted as the system's own prompts are.
    """

    ltm: Any
    composer: ContextComposer

    def add_turns(self, user_id: str, turns: Sequence[Turn], context: Sequence[str] = ()) -> list[MemoryItem]: ...

    def flush(self, user_id: str, context: Sequence[str] = ()) -> list[MemoryItem]: ...

    def flush_index(self, timeout: float | None = None) -> bool:
        """Wait until what was added is fully indexed (the harnesses ask questions only then)."""
        ...

    def retrieve(self, query: str, user_id: str, k: int | None = None, filters: Any = None, stm: Sequence[str] = (),
                 now: object = None, budget: int | None = None) -> RetrievalResult: ...

    def build_context(self, query: str, user_id: str, stm: Sequence[str] = (), budget: int | None = None,
                      k: int | None = None, filters: Any = None, now: object = None) -> ComposedContext: ...

    def consolidate(self, user_id: str | None = None, max_cycles: int = 1000) -> list[Any]: ...

    def wait_for_consolidation(self, timeout: float | None = None) -> bool: ...

    def usage(self) -> dict[str, dict[str, float]]: ...

    def stats(self) -> dict[str, dict[str, int]]: ...

    def ltm_stats(self) -> dict[str, int]: ...

    def close(self) -> None: ...


def is_whole(item: MemoryItem) -> bool:
    """A memory packed as it is stored (dates written in count as whole), not a cut or squeezed excerpt."""
    return not item.metadata.get("excerpt")
