"""Candidate features of the learned Stage-2 ranker (pure: query text and hits in, a matrix out).

Every feature is cheap to compute from what Stage 1 already has in memory (its signal
scores, the candidate's text, speaker, session and row). What depends on a memory's text alone
is computed once per text (an LRU cache), not once per search. They describe a candidate relative to its group: how far it is
from the best Stage-1 score, whether its session or its neighbouring turn also matched,
whether the speaker the question names said it.
"""
from __future__ import annotations

import math
import re
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from lightmem.text import analyze
from lightmem.types import Hit, ItemKind

FEATURES = (
    "stage1",          # the fused Stage-1 score
    "dense",           # cosine of the best HQ
    "bm25",            # BM25, normalised by the group's best
    "gap_top",         # stage1 minus the group's best stage1
    "rank",            # Stage-1 rank / group size
    "log_tokens",      # log(1 + tokens): evidence turns are longer than chit-chat
    "speaker_named",   # the question names the speaker of this memory
    "speaker_other",   # the question names a speaker, and not this one
    "neighbor",        # best stage1 of the adjacent row of the same session (0 if not a candidate)
    "session_share",   # share of the group from this memory's session
    "session_gap",     # best stage1 in this memory's session minus its own
    "is_question",     # the memory ends with "?"
    "question_share",  # share of its sentences that are questions
    "overlap",         # share of the query's content words found in the memory
    "digits",          # the memory has a digit
    "names",           # capitalised words inside the memory (capped at 5) / 5
    "when_x_time",     # a "when" question and a memory with a time expression
    "when",            # a "when" question
)

_TIME = re.compile(
    r"\b(yesterday|today|tomorrow|tonight|ago|last|next|week|weekend|month|year|monday|tuesday|wednesday|thursday|"
    r"friday|saturday|sunday|january|february|march|april|may|june|july|august|september|october|november|"
    r"december|\d{4})\b")  # searched in the lower-cased text: 3x faster than re.IGNORECASE
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+")
_SENTENCE_END = re.compile(r"[.!?]+")


_SPEAKER_PREFIX = re.compile(r"^([A-Z][\w'-]*(?: [A-Z][\w'-]*){0,2}): ")


def speaker_of(hit: Hit) -> str:
    """The memory's speaker: its metadata, else a ``Name:`` prefix of one to three capitalised
    words (so "Time: 10:30" or "note to self: ..." are not speakers); "" for knowledge and unknown."""
    if hit.item.kind is ItemKind.KNOWLEDGE:
        return ""
    spk = hit.item.metadata.get("speaker") if hit.item.metadata else None
    if spk:
        return str(spk)
    m = _SPEAKER_PREFIX.match(hit.item.text)
    return m.group(1) if m else ""


def named_speakers(query: str, speakers: set[str]) -> set[str]:
    """The speakers (case-insensitive, whole word) that the query mentions."""
    q = query.lower()
    return {s for s in speakers if s and re.search(rf"\b{re.escape(s.lower())}\b", q)}


@lru_cache(maxsize=50_000)
def _text_features(text: str, speaker: str) -> tuple[frozenset[str], float, float, float, float, float]:
    """What a memory's text alone gives (content words, is_question, question_share, digits, names,
    has_time): the same for every query, so it is computed once per text, not once per search."""
    body = text.split(":", 1)[1] if speaker and text.startswith(speaker + ":") else text
    sentences = [x for x in _SENTENCE_END.split(body) if x.strip()]
    return (
        frozenset(analyze(text)), 1.0 if body.rstrip().endswith("?") else 0.0,
        min(1.0, body.count("?") / max(1, len(sentences))), 1.0 if any(map(str.isdigit, body)) else 0.0,
        min(len(_NAME.findall(body.strip())), 5) / 5, 1.0 if _TIME.search(body.lower()) else 0.0,
    )


def candidate_features(query: str, hits: Sequence[Hit]) -> np.ndarray:
    """``[len(hits), len(FEATURES)]`` float64 features of the Stage-1 candidates of one query."""
    n = len(hits)
    out = np.zeros((n, len(FEATURES)))
    if n == 0:
        return out
    s1 = np.asarray([h.score for h in hits], dtype=np.float64)
    speakers = [speaker_of(h) for h in hits]
    named = named_speakers(query, set(speakers))
    # A memory without a session (LTM knowledge, turns added without one) is a session of its own:
    # unrelated items must not share a key, nor count as neighbours.
    sessions = [str(h.item.metadata.get("session_id") or f"#{i}") if h.item.metadata else f"#{i}" for i, h in enumerate(hits)]
    by_row = {(sessions[i], h.row): i for i, h in enumerate(hits) if h.row is not None}
    sess_best: dict[str, float] = {}
    sess_count: dict[str, int] = {}
    for s, v in zip(sessions, s1):
        sess_best[s] = max(sess_best.get(s, -math.inf), v)
        sess_count[s] = sess_count.get(s, 0) + 1
    q_words = set(analyze(query))
    when = 1.0 if query.strip().lower().startswith("when") else 0.0
    top = s1.max()
    for i, h in enumerate(hits):
        words, is_question, question_share, digits, names, has_time = _text_features(h.item.text, speakers[i])
        neighbor = [s1[j] for j in (by_row.get((sessions[i], h.row - 1)), by_row.get((sessions[i], h.row + 1)))
                    if j is not None] if h.row is not None else []
        dense = h.scores.get("dense", h.scores.get("ltm", 0.0))  # an LTM hit's hybrid score stands for its cosine
        out[i] = (
            s1[i], dense, h.scores.get("bm25_norm", 0.0), s1[i] - top, i / n,
            math.log1p(h.item.n_tokens), 1.0 if named and speakers[i] in named else 0.0,
            1.0 if named and speakers[i] and speakers[i] not in named else 0.0, max(neighbor, default=0.0),
            sess_count[sessions[i]] / n, sess_best[sessions[i]] - s1[i], is_question, question_share,
            len(q_words & words) / max(1, len(q_words)), digits, names, when * has_time, when,
        )
    return out


def linear_scores(features: np.ndarray, mean: np.ndarray, scale: np.ndarray, coef: np.ndarray, intercept: float) -> np.ndarray:
    """Logit of a standardised linear model: ((x - mean) / scale) · coef + intercept."""
    return ((features - mean) / scale) @ coef + intercept
