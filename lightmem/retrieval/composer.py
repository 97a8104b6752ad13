"""Context composition under a hard token budget (query-aware pipeline §III.D).

The budget is the whole prompt as the reader's tokenizer counts it: headers, question, recent
turns, every memory line with its date, and the newlines between them. Priority: the question
first, then recent history (STM, newest kept first), then retrieved memories in rank order. The
prompt reads memories first and the question last, where a small reader attends best.

Dates: by default the memories are shown grouped by the day they were said, in time order, each
day's date written once above its memories (``group_dates``); a date costs 8-10 tokens of a
Qwen-style tokenizer, so memories of the same day share it. Otherwise each line carries its own date
(``- [8 May 2023] text``), in rank order.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lightmem.models.tokens import CachedCount, TokenCounter
from lightmem.timeutil import spoken_date
from lightmem.types import ComposedContext, ItemKind, MemoryItem

# Tokens of a composed prompt when the caller names no budget: the one default of Memory.open, the adapters (their
# ``budget=None``), the HTTP API, MCP, the client and the console. 600 is the budget every retrieval and reader figure
# of docs/results was measured at (the held-out strict R_all@600 included); at 2,048 a small user's whole memory fits
# and the inspector has nothing to explain.
DEFAULT_BUDGET = 600


def pack_by_budget(costs: Sequence[int], budget: int) -> list[int]:
    """Indices of the items kept when packing ``costs`` in order into ``budget``.

    Greedy in rank order: an item that does not fit is skipped and later, shorter ones
    may still be packed. Pure.
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


def date_label(item: MemoryItem) -> str:
    """What a memory is dated with in the prompt: the day it was said, or ``knowledge`` for LTM knowledge."""
    return "knowledge" if item.kind is ItemKind.KNOWLEDGE else spoken_date(item.event_time)


def pack_grouped(line_costs: Sequence[int], labels: Sequence[str], header_cost: Callable[[str], int],
                 budget: int) -> list[int]:
    """Greedy packing in rank order where a memory costs its line plus, for the first memory of its date
    ``label``, that date's header line. Pure: indices of the memories kept."""
    kept, used, seen = [], 0, set()
    for i, (c, label) in enumerate(zip(line_costs, labels)):
        if c < 0:
            raise ValueError("token costs must be non-negative")
        cost = c + (0 if label in seen else header_cost(label))
        if used + cost <= budget:
            kept.append(i)
            used += cost
            seen.add(label)
    return kept


@dataclass(frozen=True)
class Layout:
    """What a prompt holds besides its memories, and the tokens left for memory lines."""

    query: str  # truncated to fit when it alone overflows
    stm: tuple[str, ...]  # the most recent turns that fit, oldest first
    memory_budget: int  # tokens for memory lines (each line's cost includes its newline)


class ContextComposer:
    """Packs query > STM > memories into a prompt of at most ``budget`` tokens.

    Args:
        counter: Counts the prompt's tokens (the reader's tokenizer by default, see
            ``lightmem.models.prompt_tokens``).
        budget: Default hard token budget of the whole prompt.
        group_dates: Memories grouped under one date line per day, in time order (True), or each line
            with its own date prefix, in rank order (False).
    """

    MEMORIES, RECENT, QUESTION = "### Memories", "### Recent conversation", "### Question"

    def __init__(self, counter: TokenCounter, budget: int = DEFAULT_BUDGET, group_dates: bool = True) -> None:
        if budget <= 0:
            raise ValueError("budget must be positive")
        self.counter, self.budget, self.group_dates = counter, budget, bool(group_dates)
        self._count = CachedCount(lambda: counter)  # memory lines recur across searches

    def line(self, item: MemoryItem) -> str:
        """A memory's line in the prompt (without its date when dates are grouped)."""
        return f"- {item.text}" if self.group_dates else format_memory(item)

    def line_cost(self, item: MemoryItem) -> int:
        """The most tokens a memory can add to the prompt: its line, its date's line when it is the first
        of its day, and their newlines. ``pack`` charges a shared date once."""
        cost = self._count(self.line(item)) + 1
        return cost + self._header_cost(date_label(item)) if self.group_dates else cost

    def _header_cost(self, label: str) -> int:
        return self._count(f"[{label}]") + 1

    def pack(self, items: Sequence[MemoryItem], budget: int) -> list[int]:
        """Indices of ``items`` (rank order) kept within ``budget`` tokens of memory lines, greedily."""
        if not self.group_dates:
            return pack_by_budget([self.line_cost(m) for m in items], budget)
        costs = [self._count(self.line(m)) + 1 for m in items]
        return pack_grouped(costs, [date_label(m) for m in items], self._header_cost, budget)

    def prompt_order(self, items: Sequence[MemoryItem]) -> list[int]:
        """Indices of ``items`` (rank order) in the order the prompt shows them: by date, knowledge last, or ranked."""
        if not self.group_dates:
            return list(range(len(items)))
        return sorted(range(len(items)), key=lambda i: (items[i].kind is ItemKind.KNOWLEDGE, items[i].event_time,
                                                        items[i].created_at, i))

    def memory_lines(self, items: Sequence[MemoryItem]) -> list[str]:
        """The prompt's memory lines: grouped under their dates in time order (knowledge last), or in rank order."""
        if not self.group_dates:
            return [format_memory(m) for m in items]
        lines, current = [], None
        for i in self.prompt_order(items):
            label = date_label(items[i])
            if label != current:
                lines.append(f"[{label}]")
                current = label
            lines.append(self.line(items[i]))
        return lines

    def _block(self, lines: Sequence[str]) -> int:
        """Tokens of lines joined by newlines, with the newline that joins the block to the prompt."""
        return sum(self.counter.count(list(lines))) + len(lines)

    def layout(self, query: str, stm: Sequence[str] = (), budget: int | None = None) -> Layout:
        """The question, the recent turns that fit, and the tokens left for memories within ``budget``."""
        budget = self.budget if budget is None else budget
        if budget <= 0:
            raise ValueError("budget must be positive")
        q_head = self._block([self.QUESTION])
        query = self.counter.truncate(query, max(budget - q_head - 1, 0))
        left = budget - q_head - self._block([query])
        stm_kept: list[str] = []
        recent_head = self._block([self.RECENT])
        if stm and left > recent_head:
            newest_first = list(reversed(stm))
            keep = pack_by_budget([c + 1 for c in self.counter.count(newest_first)], left - recent_head)
            n = next((i for i, k in enumerate(keep) if k != i), len(keep))  # a contiguous recent window
            stm_kept = list(reversed(newest_first[:n]))
            if stm_kept:
                left -= recent_head + self._block(stm_kept)
        return Layout(query, tuple(stm_kept), max(left - self._block([self.MEMORIES]), 0))

    def compose(
        self, query: str, stm: Sequence[str] = (), memories: Sequence[MemoryItem] = (), budget: int | None = None,
        layout: Layout | None = None,
    ) -> ComposedContext:
        """The prompt of ``query``, ``stm`` and as many of ``memories`` (rank order) as fit in ``budget``
        (``layout``: this query's, stm's and budget's ``layout`` when the caller already made it)."""
        budget = self.budget if budget is None else budget
        lay = layout or self.layout(query, stm, budget)
        mem_idx = self.pack(memories, lay.memory_budget) if memories else []
        stm_kept = list(lay.stm)

        def render() -> tuple[str, int]:
            return self._render(lay.query, stm_kept, self.memory_lines([memories[i] for i in mem_idx]))

        prompt, n_tokens = render()
        # A byte-level BPE may merge across a joint: the exact count of the whole prompt is the cap.
        while n_tokens > budget and mem_idx:
            mem_idx.pop()
            prompt, n_tokens = render()
        while n_tokens > budget and stm_kept:
            stm_kept.pop(0)
            prompt, n_tokens = render()
        if n_tokens > budget:  # not even the question header fits: the bare question, truncated
            prompt = self.counter.truncate(query, budget)
            n_tokens = self.counter.count([prompt])[0]
        return ComposedContext(
            prompt=prompt,
            n_tokens=n_tokens,
            budget=budget,
            memories=tuple(memories[i] for i in mem_idx),
            stm_turns_kept=len(stm_kept),
            dropped_memories=len(memories) - len(mem_idx),
            prompt_order=tuple(self.prompt_order([memories[i] for i in mem_idx])),
        )

    def _render(self, query: str, stm: Sequence[str], lines: Sequence[str]) -> tuple[str, int]:
        parts: list[str] = []
        if lines:
            parts += [self.MEMORIES, *lines]
        if stm:
            parts += [self.RECENT, *stm]
        parts += [self.QUESTION, query]
        prompt = "\n".join(parts)
        return prompt, self.counter.count([prompt])[0]
