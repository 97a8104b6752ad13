"""Ranking and classification scores: of a scored candidate list (the trained models) and of a ranked id list
(LongMemEval's session- and turn-level retrieval)."""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np


def order_by(scores: Sequence[float]) -> list[int]:
    """Indices by descending score; ties keep the input order (the Stage-1 order)."""
    return sorted(range(len(scores)), key=lambda i: -scores[i])


def precision_at_k(labels: Sequence[int], scores: Sequence[float], k: int) -> float:
    """Share of the top k that are relevant (k is capped at the number of candidates)."""
    top = order_by(scores)[:k]
    return sum(labels[i] for i in top) / max(1, len(top))


def recall_all_at_k(labels: Sequence[int], scores: Sequence[float], k: int, n_relevant: int | None = None) -> float:
    """1 if every relevant item is in the top k. ``n_relevant`` counts positives missing from the candidates."""
    need = sum(labels) if n_relevant is None else n_relevant
    if need == 0:
        return float("nan")
    return float(sum(labels[i] for i in order_by(scores)[:k]) >= need)


def reciprocal_rank(labels: Sequence[int], scores: Sequence[float]) -> float:
    for r, i in enumerate(order_by(scores), 1):
        if labels[i]:
            return 1.0 / r
    return 0.0


def binary_f1(pred: Sequence[int], gold: Sequence[int]) -> float:
    """F1 of the positive class."""
    tp = sum(1 for p, g in zip(pred, gold) if p and g)
    fp = sum(1 for p, g in zip(pred, gold) if p and not g)
    fn = sum(1 for p, g in zip(pred, gold) if g and not p)
    return 0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn)


def accuracy(pred: Sequence[int], gold: Sequence[int]) -> float:
    return float(np.mean([p == g for p, g in zip(pred, gold)])) if gold else float("nan")


def nanmean(values: Sequence[float]) -> float:
    vals = [v for v in values if not np.isnan(v)]
    return float(np.mean(vals)) if vals else float("nan")


# -- ranked retrieval (LongMemEval's session- and turn-level metrics) ---------------------
def dedupe(ranked: Iterable[str]) -> list[str]:
    """First occurrences in order (turn hits -> their sessions, ranked by first appearance)."""
    return list(dict.fromkeys(ranked))


def recall_at_k(ranked: Sequence[str], gold: Iterable[str], k: int) -> tuple[float, float]:
    """(recall_any, recall_all) of ``gold`` among the first ``k`` ranked ids.

    Raises:
        ValueError: ``gold`` is empty or ``k`` is not positive.
    """
    gold = set(gold)
    if not gold:
        raise ValueError("recall needs at least one gold id")
    if k <= 0:
        raise ValueError("k must be positive")
    top = set(ranked[:k])
    return float(bool(gold & top)), float(gold <= top)


def ndcg_at_k(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    """Binary-relevance NDCG@k: sum of 1/log2(rank+1) over gold ids in the top k, over the ideal."""
    gold = set(gold)
    if not gold:
        raise ValueError("NDCG needs at least one gold id")
    if k <= 0:
        raise ValueError("k must be positive")
    dcg = sum(1.0 / np.log2(i + 2) for i, r in enumerate(ranked[:k]) if r in gold)
    idcg = sum(1.0 / np.log2(i + 2) for i in range(min(len(gold), k)))
    return float(dcg / idcg)
