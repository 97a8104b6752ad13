"""Selector (SLM-2): Stage 2 keeps at most K of the 2K Stage-1 candidates."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from lightmem.types import Hit, RetrievalPlan


@runtime_checkable
class Selector(Protocol):
    """Selects ≤ k hits from the candidates; it never rewrites memory text."""

    def select(self, plan: RetrievalPlan, candidates: Sequence[Hit], k: int) -> list[Hit]: ...


class Stage1Selector:
    """Keeps the top k by Stage-1 score (the "without semantic reranking" setting)."""

    def select(self, plan: RetrievalPlan, candidates: Sequence[Hit], k: int) -> list[Hit]:
        return sorted(candidates, key=lambda h: -h.score)[:k]
