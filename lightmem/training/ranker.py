"""The learned Stage-2 ranker: mine Stage-1 candidate groups with their features, fit a linear
model with the listwise + pointwise ranking loss, and measure recall within the token budget.

A group is one question: the features of its Stage-1 candidates (candidate_factor × K) (``retrieval/features.py``),
0/1 evidence labels, token costs and the number of evidence turns.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from lightmem.memory import Memory
from lightmem.retrieval.composer import pack_by_budget
from lightmem.retrieval.features import FEATURES, candidate_features, linear_scores
from lightmem.training.distill import asked_questions
from lightmem.training.losses import ranking_loss


def mine_groups(make_memory: Callable[[str], Memory], convs: Sequence[Any], source: str, k: int,
                categories: Sequence[Any] | None = None, show_progress: bool = False) -> list[dict[str, Any]]:
    """One group per answerable question of each conversation, with the candidates of ``retrieve(k)``."""
    groups: list[dict[str, Any]] = []
    for mem, user, conv, qa, evidence, asked_at in asked_questions(make_memory, convs, source, categories, show_progress):
        cands = mem.retrieve(qa.question, user, k=k, now=asked_at).candidates
        if not cands:
            continue
        groups.append({
            "features": candidate_features(qa.question, cands).tolist(),
            "labels": [int(bool(evidence & set(h.item.provenance))) for h in cands],
            "provenance": [list(h.item.provenance) for h in cands],
            "tokens": [h.item.n_tokens for h in cands], "evidence": sorted(evidence),
            "source": source, "conversation": conv.conv_id, "category": qa.category,
        })
    return groups


def _padded(groups: Sequence[dict[str, Any]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n = max(len(g["labels"]) for g in groups)
    x = torch.zeros(len(groups), n, len(FEATURES), dtype=torch.float64)
    y = torch.zeros(len(groups), n, dtype=torch.float64)
    mask = torch.zeros(len(groups), n, dtype=torch.bool)
    for i, g in enumerate(groups):
        m = len(g["labels"])
        x[i, :m] = torch.tensor(g["features"], dtype=torch.float64)
        y[i, :m] = torch.tensor(g["labels"], dtype=torch.float64)
        mask[i, :m] = True
    return x, y, mask


def fit_linear(groups: Sequence[dict[str, Any]], loss: str = "both", l2: float = 1e-3, listwise_weight: float = 1.0,
               max_iter: int = 200) -> dict[str, Any]:
    """Standardise the features and fit weights by L-BFGS on the ranking loss (+ L2); deterministic."""
    if not groups:
        raise ValueError("no ranker groups: check the data paths and splits")
    x, y, mask = _padded(groups)
    flat = x[mask]
    mean, scale = flat.mean(0), flat.std(0).clamp(min=1e-6)
    z = (x - mean) / scale
    w = torch.zeros(len(FEATURES), dtype=torch.float64, requires_grad=True)
    b = torch.zeros((), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=max_iter, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        logits = z @ w + b
        value = ranking_loss(loss, logits, y, mask, listwise_weight) + l2 * (w * w).sum()
        value.backward()
        return value

    opt.step(closure)
    return {"features": list(FEATURES), "mean": mean.tolist(), "scale": scale.tolist(), "coef": w.detach().tolist(),
            "intercept": float(b.detach()), "loss": loss, "l2": l2}


def _found(group: dict[str, Any], idx: Sequence[int]) -> float:
    """1.0 when the candidates ``idx`` of ``group`` hold every evidence turn."""
    return float(set(group["evidence"]) <= {p for i in idx for p in group["provenance"][i]})


def evaluate(groups: Sequence[dict[str, Any]], weights: dict[str, Any] | None, k: int, budget: int,
             fill: bool = True) -> dict[str, float]:
    """recall_all@K and within ``budget`` tokens (packed as the composer packs), overall and per category;
    ``weights=None`` keeps the Stage-1 order. ``fill`` packs the budget from every ranked candidate, as the
    engine does by default (``fill_budget``); otherwise from the best K only."""
    per: dict[str, list[tuple[float, float]]] = {}
    for g in groups:
        n = len(g["labels"])
        if weights is None:
            order = list(range(n))
        else:
            s = linear_scores(np.asarray(g["features"]), np.asarray(weights["mean"]), np.asarray(weights["scale"]),
                              np.asarray(weights["coef"]), weights["intercept"])
            order = sorted(range(n), key=lambda i: (-s[i], i))
        top = order[:k]
        pool = order if fill else top
        kept = [pool[i] for i in pack_by_budget([g["tokens"][i] for i in pool], budget)]
        scores = tuple(_found(g, idx) for idx in (top, kept))
        for key in ("overall", f"category_{g['category']}"):
            per.setdefault(key, []).append(scores)
    out: dict[str, float] = {}
    for key, vals in sorted(per.items()):
        out[f"{key}/recall_all@{k}"] = float(np.mean([a for a, _ in vals]))
        out[f"{key}/recall_all@budget"] = float(np.mean([b for _, b in vals]))
    out["n"] = float(len(groups))
    return out
