"""Pure scoring functions of the read path (numpy in, numpy out, no state).

``Fusion`` maps the config string to the fusion rule. Every function here is tested
against a brute-force reference on random inputs.
"""
from __future__ import annotations

import enum
from collections.abc import Sequence

import numpy as np

from lightmem.timeutil import SECONDS_PER_DAY, recency_decay  # noqa: F401  (part of the scoring functions)


class Fusion(str, enum.Enum):
    """How Stage 1 combines dense and lexical evidence."""

    WEIGHTED = "weighted"  # SimpleMem Eq. 7: λ1·cos + λ2·BM25 + γ·meta (+ ρ·recency)
    RRF = "rrf"  # reciprocal-rank fusion of the dense and lexical rankings


def cosine(query: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """Cosine similarity of one query vector with each row of ``matrix`` (0 for zero rows)."""
    q = np.asarray(query, dtype=np.float64)
    m = np.asarray(matrix, dtype=np.float64)
    denom = np.linalg.norm(m, axis=1) * np.linalg.norm(q)
    out = np.zeros(m.shape[0])
    np.divide(m @ q, denom, out=out, where=denom > 0)
    return out


def normalize_max(scores: np.ndarray) -> np.ndarray:
    """Scale non-negative scores into [0, 1] by their maximum (BM25 has no fixed range)."""
    s = np.asarray(scores, dtype=np.float64)
    top = s.max(initial=0.0)
    return s / top if top > 0 else np.zeros_like(s)


def metadata_match(item_tags: Sequence[frozenset[str] | set[str]], wanted: set[str] | None) -> np.ndarray:
    """Indicator I(R_k ⊨ C_meta): 1 where an item carries any wanted tag (case-insensitive)."""
    if not wanted:
        return np.zeros(len(item_tags))
    w = {t.lower() for t in wanted}
    return np.asarray([1.0 if w & {t.lower() for t in tags} else 0.0 for tags in item_tags])


def in_window(event_times: np.ndarray, start: float, end: float) -> np.ndarray:
    """Indicator of event times within [start, end)."""
    t = np.asarray(event_times, dtype=np.float64)
    return ((t >= start) & (t < end)).astype(np.float64)


def weighted_fusion(
    dense: np.ndarray,
    lexical: np.ndarray,
    meta: np.ndarray | None = None,
    recency: np.ndarray | None = None,
    w_dense: float = 1.0,
    w_lexical: float = 1.0,
    w_meta: float = 0.0,
    w_recency: float = 0.0,
) -> np.ndarray:
    """SimpleMem Eq. 7 with an optional recency term: λ1·dense + λ2·lexical + γ·meta + ρ·recency."""
    out = w_dense * np.asarray(dense, dtype=np.float64) + w_lexical * np.asarray(lexical, dtype=np.float64)
    if meta is not None and w_meta:
        out = out + w_meta * np.asarray(meta, dtype=np.float64)
    if recency is not None and w_recency:
        out = out + w_recency * np.asarray(recency, dtype=np.float64)
    return out


def reciprocal_rank_fusion(rankings: Sequence[Sequence[int]], k: float = 60.0, weights: Sequence[float] | None = None) -> dict[int, float]:
    """RRF: Σ_r w_r / (k + rank_r(d)), ranks from 1; an id absent from a ranking adds nothing."""
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError("one weight per ranking")
    out: dict[int, float] = {}
    for ranking, w in zip(rankings, weights):
        for rank, doc in enumerate(ranking, start=1):
            out[int(doc)] = out.get(int(doc), 0.0) + w / (k + rank)
    return out
