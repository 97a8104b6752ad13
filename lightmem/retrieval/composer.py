"""Context composition under a hard token budget (query-aware pipeline §III.D).

Priority: the query first, then recent history (STM, newest kept first), then retrieved
memories in rank order. Nothing is ever allowed past the budget.
"""
from __future__ import annotations

from collections.abc import Sequence

from lightmem.models.tokens import TokenCounter
from lightmem.timeutil import spoken_date
from lightmem.types import ComposedContext, ItemKind, MemoryItem

DEFAULT_BUDGET = 2048  # tokens of a composed prompt when the caller names no budget (Memory.open's too)


def pack_by_budget(costs: Sequence[int], budget: int) -> list[int]:
    """Indices of the items kept when packing ``costs`` in order into ``budget``.

    Greedy in rank order: an item that does not fit is skipped and later, shorter ones
    may still be packed. Pure; the retrieval metrics use it too, so "within budget"
    means exactly what the composer would put in the prompt.
    """
    kept, used = [], 0
    for i, c in enumerate(costs):
        if c < 0:
            raise ValueError("token costs must be non-negative")
        if used + c <= budget:
            kept.append(i)
            used += c
    return kept


def format_memory(item: MemoryItem) -> str:
    """One memory line of the prompt: ``- [date] text`` (SimpleMem Eq. 9's [t_m: content]);
    LTM knowledge is not tied to a date: ``- [knowledge] text``."""
    if item.kind is ItemKind.KNOWLEDGE:
        return f"- [knowledge] {item.text}"
    return f"- [{spoken_date(item.event_time)}] {item.text}"


class ContextComposer:
    """Packs query > STM > memories into a prompt of at most ``budget`` tokens.

    Args:
        counter: Counts tokens (the embedder's tokenizer by default).
        budget: Default hard token budget of the whole prompt.
    """

    HEADERS = ("### Query", "### Recent conversation", "### Retrieved memories")

    def __init__(self, counter: TokenCounter, budget: int = DEFAULT_BUDGET) -> None:
        if budget <= 0:
            raise ValueError("budget must be positive")
        self.counter, self.budget = counter, budget

    def compose(
        self, query: str, stm: Sequence[str] = (), memories: Sequence[MemoryItem] = (), budget: int | None = None
    ) -> ComposedContext:
        budget = self.budget if budget is None else budget
        if budget <= 0:
            raise ValueError("budget must be positive")
        head_cost = self.counter.count(list(self.HEADERS))
        # The query is never dropped; if it alone overflows, it is truncated to fit.
        q_budget = max(budget - head_cost[0], 0)
        query = self.counter.truncate(query, q_budget)
        left = budget - head_cost[0] - self.counter.count([query])[0]

        stm_kept: list[str] = []
        if stm and left > head_cost[1]:
            newest_first = list(reversed(stm))
            keep = pack_by_budget(self.counter.count(newest_first), left - head_cost[1])
            # Keep a contiguous recent window: stop at the first turn that does not fit.
            n = next((i for i, k in enumerate(keep) if k != i), len(keep))
            stm_kept = list(reversed(newest_first[:n]))
            if stm_kept:
                left -= head_cost[1] + sum(self.counter.count(stm_kept))

        lines = [format_memory(m) for m in memories]
        mem_idx: list[int] = []
        if lines and left > head_cost[2]:
            mem_idx = pack_by_budget(self.counter.count(lines), left - head_cost[2])
        prompt, n_tokens = self._render(query, stm_kept, [lines[i] for i in mem_idx])
        # Token counts of parts can differ slightly from the joined text; enforce the hard cap.
        while n_tokens > budget and mem_idx:
            mem_idx.pop()
            prompt, n_tokens = self._render(query, stm_kept, [lines[i] for i in mem_idx])
        while n_tokens > budget and stm_kept:
            stm_kept.pop(0)
            prompt, n_tokens = self._render(query, stm_kept, [lines[i] for i in mem_idx])
        if n_tokens > budget:  # not even the query header fits: the bare query, truncated
            prompt = self.counter.truncate(query, budget)
            n_tokens = self.counter.count([prompt])[0]
        return ComposedContext(
            prompt=prompt,
            n_tokens=n_tokens,
            budget=budget,
            memories=tuple(memories[i] for i in mem_idx),
            stm_turns_kept=len(stm_kept),
            dropped_memories=len(memories) - len(mem_idx),
        )

    def _render(self, query: str, stm: Sequence[str], lines: Sequence[str]) -> tuple[str, int]:
        parts = [self.HEADERS[0], query]
        if stm:
            parts += [self.HEADERS[1], *stm]
        if lines:
            parts += [self.HEADERS[2], *lines]
        prompt = "\n".join(parts)
        return prompt, self.counter.count([prompt])[0]
