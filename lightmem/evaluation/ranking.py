"""Ranking and classification metrics for the trained models: pure functions."""
from __future__ import annotations

from collections.abc import Sequence

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
