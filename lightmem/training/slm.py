"""SLM-2 stacked on the learned ranker: what ``train/slm.py`` trains and ``SLMSelector`` serves.

The ranker orders every Stage-1 candidate; a LoRA-tuned MiniLM cross-encoder (its first few layers,
for CPU latency) reads the (question, candidate) pairs of the ranker's top N, and those N are
reordered by ``ranker logit + alpha * cross-encoder logit``. The rest keep the ranker's order.

Training groups are mined from real dialogues (``training/ranker.py``): every group is one question
with its Stage-1 candidates, their texts, features and evidence labels. The cross-encoder learns
from the ranker's own hard negatives (its top M), and ``alpha`` and ``N`` are chosen on groups the
cross-encoder did not train on.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lightmem.retrieval.trees import ranker_scorer
from lightmem.training.ranker import ServedPacking, evaluate_orders, ranker_order
from lightmem.training.selector import cross_encoder_batcher

Scorer = Callable[[list[str], list[str]], list[float]]


@dataclass
class SLMTask:
    """How mined groups become training batches."""

    top_m: int = 30  # negatives are drawn from the ranker's top M: the mistakes the stacked model must fix
    group_size: int = 12  # candidates per group in a step (positives first, then hard negatives)
    max_pos: int = 4
    loss: str = "both"  # a name in training.losses.RANKING_LOSSES
    listwise_weight: float = 1.0
    max_length: int = 96  # pair length in tokens
    num_layers: int = 3  # encoder layers kept (of MiniLM's 6): the CPU cost per pair scales with it


def with_ranker(groups: Sequence[dict[str, Any]], weights: dict[str, Any]) -> list[dict[str, Any]]:
    """The groups with the ranker's logits ``r`` and order ``order`` added (copies; the input is unchanged)."""
    out, score = [], ranker_scorer(weights)
    for g in groups:
        s, order = ranker_order(g, score)
        out.append({**g, "r": s.tolist(), "order": order})
    return out


def sample_hard(group: dict[str, Any], task: SLMTask, rng: random.Random) -> tuple[list[str], list[int]]:
    """Up to ``max_pos`` positives (wherever Stage 1 put them) and negatives from the ranker's top M."""
    pos = [i for i, y in enumerate(group["labels"]) if y]
    neg = [i for i in group["order"][: task.top_m] if not group["labels"][i]]
    pick = rng.sample(pos, k=min(len(pos), task.max_pos))
    pick += rng.sample(neg, k=min(len(neg), task.group_size - len(pick)))
    rng.shuffle(pick)
    return [group["texts"][i] for i in pick], [group["labels"][i] for i in pick]


def batcher(tok, task: SLMTask) -> Callable[[Sequence[dict], random.Random], dict[str, Any]]:
    """The cross-encoder recipe's batches, with candidates drawn by ``sample_hard``."""
    return cross_encoder_batcher(tok, task, lambda g, rng: sample_hard(g, task, rng))


def top_scores(score: Scorer, groups: Sequence[dict[str, Any]], n: int) -> list[list[float]]:
    """Cross-encoder logits of each group's ranker top ``n`` (in the ranker's order)."""
    return [score([g["query"]] * len(g["order"][:n]), [g["texts"][i] for i in g["order"][:n]]) for g in groups]


def stacked_order(r: Sequence[float], order: Sequence[int], ce: Sequence[float], alpha: float, n: int) -> list[int]:
    """The ranker's top ``n`` reordered by ``r + alpha * ce`` (ties: the ranker's order), the rest after them."""
    top = list(order[:n])
    pos = {i: j for j, i in enumerate(top)}
    top.sort(key=lambda i: (-(r[i] + alpha * ce[pos[i]]), pos[i]))
    return top + list(order[n:])


def orders_for(groups: Sequence[dict[str, Any]], ce: Sequence[Sequence[float]], alpha: float, n: int) -> list[list[int]]:
    return [stacked_order(g["r"], g["order"], c, alpha, n) for g, c in zip(groups, ce)]


def fit_stack(groups: Sequence[dict[str, Any]], ce: Sequence[Sequence[float]], alphas: Sequence[float], ns: Sequence[int],
              k: int, budget: int, packing: ServedPacking | None = None) -> dict[str, Any]:
    """The (alpha, N) with the best recall within ``budget`` on ``groups``; a tie goes to the smaller N, then the
    smaller alpha (cheaper, and closer to the ranker). ``ce`` must cover each group's top ``max(ns)``."""
    if not groups:
        raise ValueError("no held-apart groups to choose alpha and N on: check stack_locomo and stack_share")
    grid = []
    for n in sorted(ns):
        for alpha in sorted(alphas):
            m = evaluate_orders(groups, orders_for(groups, ce, alpha, n), k, budget, packing=packing)
            grid.append({"alpha": float(alpha), "n": int(n), "recall_all@budget": m["overall/recall_all@budget"]})
    best = max(grid, key=lambda x: (round(x["recall_all@budget"], 9), -x["n"], -x["alpha"]))
    return {"alpha": best["alpha"], "top_n": best["n"], "fit_recall_all@budget": best["recall_all@budget"], "grid": grid}


def paired_gain(groups: Sequence[dict[str, Any]], base: Sequence[Sequence[int]], new: Sequence[Sequence[int]], k: int,
                budget: int, seed: int = 0, packing: ServedPacking | None = None) -> dict[str, float]:
    """Recall within the budget of ``new`` minus ``base`` over the same groups, with a paired-bootstrap 95% CI."""
    from lightmem.metrics.stats import paired_bootstrap

    a: list[float] = []
    b: list[float] = []
    evaluate_orders(groups, base, k, budget, per_group=a, packing=packing)
    evaluate_orders(groups, new, k, budget, per_group=b, packing=packing)
    return paired_bootstrap(b, a, seed=seed).to_dict()
