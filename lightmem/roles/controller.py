"""Controller (SLM-1): turns (query, STM context) into a RetrievalPlan."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from lightmem.types import Filters, HypotheticalQuery, RetrievalPlan, Route


@runtime_checkable
class Controller(Protocol):
    """Plans a retrieval: hypothetical queries with routes and quotas, filters φ, budget K."""

    def plan(self, query: str, k: int, filters: Filters, stm: Sequence[str] = ()) -> RetrievalPlan: ...


class PassthroughController:
    """The raw query as the single HQ, routed to MTM with the whole Stage-1 budget.

    The baseline plan ("without HQs and routing" in the paper's ablation).
    """

    def plan(self, query: str, k: int, filters: Filters, stm: Sequence[str] = ()) -> RetrievalPlan:
        return RetrievalPlan(query=query, hqs=(HypotheticalQuery(query, Route.MTM, 0),), filters=filters, k=k)
