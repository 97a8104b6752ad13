"""Whole memories first, then excerpts: more evidence within a token budget.

A question whose evidence is spread over many turns ("What activities does Melanie do?")
needs many memories in the prompt, and a 600-token budget holds 15-20 whole ones. Filling
the budget's head with whole memories in rank order (the answer of a single-hop question is
nearly always there) and its tail with the one sentence of each further memory that best
matches the query packs about twice as many memories into the tail, each still carrying its
provenance. Measured on LoCoMo (``conf/suite_stage2.yaml``, run ``excerpts``).

An excerpt can be squeezed further: the write path stores each memory's word keep scores (the
trained word scorer's P(keep) per word, ``metadata["keep"]``, see ``lightmem.models.word_scorer.keep_codes``),
and a tail excerpt keeps only the ``rate`` highest-scored of its words. A memory of one sentence, which has
no excerpt of its own, is then squeezed whole.

Everything here is pure: texts, keep codes and integer token costs in, choices out.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from difflib import SequenceMatcher
from functools import lru_cache

import numpy as np

from lightmem.language.phatic import sentence_units
from lightmem.models.word_scorer import KEEP_DIGITS, protected
from lightmem.text import analyze

# "Speaker: text": the speaker prefix of a turn memory is kept on its excerpt.
_SPEAKER = re.compile(r"^([^:\n]{1,40}):\s+")


def query_terms(texts: Iterable[str]) -> frozenset[str]:
    """Stemmed content words of the query and its hypothetical queries."""
    return frozenset(w for t in texts for w in analyze(t))


@lru_cache(maxsize=8_192)
def keep_scores(text: str, code: str | None) -> Mapping[str, int] | None:
    """Word → keep score (0-99) of ``text`` from its ``encode_keep`` string; None when there is no
    code or it does not fit the text (a text edited since it was scored). A repeated word keeps
    its highest score. Cached: the same memory is a candidate of many searches (do not mutate)."""
    words = text.split()
    if not code or len(code) != KEEP_DIGITS * len(words) or not (code.isascii() and code.isdigit()):
        return None
    digits = np.frombuffer(code.encode("ascii"), np.uint8).reshape(-1, KEEP_DIGITS).astype(np.int64) - ord("0")
    scores = (digits @ (10 ** np.arange(KEEP_DIGITS - 1, -1, -1))).tolist()
    # Ascending (stable): a repeated word's highest score is written last.
    return {words[i]: scores[i] for i in np.argsort(scores, kind="stable").tolist()}


@lru_cache(maxsize=8_192)
def realign_keep(old: str, new: str, code: str) -> str:
    """The keep code of ``old`` carried over to ``new``, an edit of it (dates written in): a word
    ``new`` shares with ``old`` keeps its score, a new or changed word gets the top one. Cached: the same
    memory is dated again in each search it is a candidate of."""
    a, b = old.split(), new.split()
    if len(code) != KEEP_DIGITS * len(a):
        return code
    out = ["99"] * len(b)
    for tag, i1, i2, j1, _ in SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            for k in range(i2 - i1):
                out[j1 + k] = code[KEEP_DIGITS * (i1 + k) : KEEP_DIGITS * (i1 + k + 1)]
    return "".join(out)


_DIGIT = re.compile(r"\d")


def squeeze(text: str, keep: Mapping[str, int], rate: float) -> str:
    """``text`` with only the ``round(rate·n)`` (at least one) highest-scored of its n scored words,
    in order (ties keep earlier words). Words without a score (a date the engine wrote in), words inside
    ``[...]`` annotations and words with a digit (a count, an amount, a date) are always kept; ``text``
    itself when nothing readable would remain."""
    words = text.split()
    free = [i for i, (w, g) in enumerate(zip(words, protected(words))) if not g and w in keep and not _DIGIT.search(w)]
    kept = set(range(len(words))) - set(free)
    if free:
        n = max(1, round(rate * len(free)))
        kept.update(sorted(free, key=lambda i: -keep[words[i]])[:n])  # sorted is stable: earlier words win ties
    out = " ".join(words[i] for i in sorted(kept))
    return out if any(c.isalnum() for c in out) else text


def best_excerpt(text: str, terms: frozenset[str], min_words: int = 1, keep: Mapping[str, int] | None = None,
                 rate: float = 1.0) -> str | None:
    """The sentence unit of ``text`` sharing the most content words with ``terms`` (the first on a
    tie), under the text's speaker prefix; None when there is nothing to cut.

    Units are ``sentence_units(min_words)``: chit-chat out, short sentences joined to the next.
    With word ``keep`` scores and ``rate`` < 1 the unit is ``squeeze``d, and a text of a single
    unit is squeezed whole (None when that drops nothing).
    """
    return cut(text, best_unit(text, terms, min_words), min_words, keep, rate)


def best_unit(text: str, terms: frozenset[str], min_words: int = 1) -> int | None:
    """Which sentence unit of ``text`` ``best_excerpt`` cuts (None: the text has a single unit or none)."""
    _, units, unit_terms = _units(text, min_words)
    if len(units) <= 1:
        return None
    return max(range(len(units)), key=lambda i: len(terms & unit_terms[i]))  # max keeps the first of equals


def cut(text: str, unit: int | None, min_words: int = 1, keep: Mapping[str, int] | None = None,
        rate: float = 1.0) -> str | None:
    """Unit ``unit`` of ``text`` under its speaker prefix, ``squeeze``d with ``keep`` at ``rate`` < 1; with
    ``unit`` None the whole text squeezed (None when there is nothing to squeeze or nothing is dropped)."""
    prefix, units, _ = _units(text, min_words)
    squeezing = keep is not None and rate < 1.0
    if unit is None:
        if not squeezing or not units:
            return None
        out = prefix + squeeze(text[len(prefix):], keep, rate)
        return out if out != text else None
    return prefix + (squeeze(units[unit], keep, rate) if squeezing else units[unit])


def coded_excerpt(text: str, terms: frozenset[str], code: str | None, rate: float, min_words: int = 1) -> str | None:
    """``best_excerpt`` of a memory with its stored keep ``code`` (``metadata["keep"]``; None: unscored) rather
    than its scores: the cut is cached per (text, code, unit, rate), so a memory excerpted again, in this
    search or a later one, is squeezed once."""
    return _coded_cut(text, code if rate < 1.0 else None, best_unit(text, terms, min_words), rate, min_words)


@lru_cache(maxsize=32_768)
def _coded_cut(text: str, code: str | None, unit: int | None, rate: float, min_words: int) -> str | None:
    return cut(text, unit, min_words, keep_scores(text, code) if code else None, rate)


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
