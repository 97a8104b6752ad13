"""Whole memories first, then excerpts: more evidence within a token budget.

A question whose evidence is spread over many turns ("What activities does Melanie do?")
needs many memories in the prompt, and a 600-token budget holds 15-20 whole ones. Filling
the budget's head with whole memories in rank order (the answer of a single-hop question is
nearly always there) and its tail with the one sentence of each further memory that best
matches the query packs about twice as many memories into the tail, each still carrying its
provenance. Measured on LoCoMo (``conf/suite_stage2.yaml``, run ``excerpts``).

Everything here is pure: texts and integer token costs in, choices out.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache

from lightmem.sensory.phatic import sentence_units
from lightmem.text import analyze

# "Speaker: text": the speaker prefix of a turn memory is kept on its excerpt.
_SPEAKER = re.compile(r"^([^:\n]{1,40}):\s+")


def query_terms(texts: Iterable[str]) -> frozenset[str]:
    """Stemmed content words of the query and its hypothetical queries."""
    return frozenset(w for t in texts for w in analyze(t))


def best_excerpt(text: str, terms: frozenset[str], min_words: int = 1) -> str | None:
    """The sentence unit of ``text`` sharing the most content words with ``terms`` (the first on a
    tie), under the text's speaker prefix; None when ``text`` is a single unit (nothing to cut).

    Units are ``sentence_units(min_words)``: chit-chat out, short sentences joined to the next.
    """
    prefix, units, unit_terms = _units(text, min_words)
    if len(units) <= 1:
        return None
    best = max(range(len(units)), key=lambda i: len(terms & unit_terms[i]))  # max keeps the first of equals
    return prefix + units[best]


@lru_cache(maxsize=32_768)
def _units(text: str, min_words: int) -> tuple[str, tuple[str, ...], tuple[frozenset[str], ...]]:
    """(speaker prefix, sentence units, their content words) of a memory text: what depends on the
    text alone is computed once (long LongMemEval turns have dozens of sentences)."""
    m = _SPEAKER.match(text)
    prefix, body = (m.group(0), text[m.end():]) if m else ("", text)
    units = tuple(sentence_units(body, min_words))
    return prefix, units, tuple(frozenset(analyze(u)) for u in units)


def pack_whole_then_excerpts(
    whole: Sequence[int], excerpt: Callable[[int], int | None], budget: int, whole_budget: int
) -> list[tuple[int, bool]]:
    """Which memories go into ``budget`` tokens, and which of them as an excerpt.

    ``whole[i]`` is the cost of memory ``i`` (rank order), ``excerpt(i)`` the cost of its excerpt
    (None: it has none); it is asked only for memories past the head, and no more once the
    budget is full, so excerpts are made only where they can be packed. Whole memories are
    packed in rank order while they fit in ``whole_budget``; from the first that does not, every
    later memory is packed as its excerpt (whole if it has none) wherever that fits in what is
    left of ``budget``. Returns ``(index, is_excerpt)`` in rank order. ``whole_budget >= budget``
    is plain greedy packing (``composer.pack_by_budget``).
    """
    if any(c < 0 for c in whole):
        raise ValueError("token costs must be non-negative")
    head = min(whole_budget, budget)
    out: list[tuple[int, bool]] = []
    used, i = 0, 0
    while i < len(whole) and used + whole[i] <= head:
        out.append((i, False))
        used += whole[i]
        i += 1
    cutting = whole_budget < budget
    for j in range(i, len(whole)):
        if cutting and used >= budget:
            break  # full: nothing of positive cost fits, no excerpt is needed
        cost = excerpt(j) if cutting else None
        if cost is not None and cost < 0:
            raise ValueError("token costs must be non-negative")
        cut = cost is not None
        cost = cost if cut else whole[j]
        if used + cost <= budget:
            out.append((j, cut))
            used += cost
    return out
