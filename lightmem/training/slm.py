"""SLM-2 stacked on the learned ranker: what ``train_slm`` (train/slm.py) trains and ``SLMSelector`` serves.

The ranker orders every Stage-1 candidate; a LoRA-tuned MiniLM cross-encoder (its first few layers,
for CPU latency) reads the (question, candidate) pairs of the ranker's top N, and those N are
reordered by ``ranker logit + alpha * cross-encoder logit``. The rest keep the ranker's order.

Training groups are mined from real dialogues (``training/ranker.py``): every group is one question
with its Stage-1 candidates, their texts, features and evidence labels. The cross-encoder learns
from the ranker's own hard negatives (its top M), and ``alpha`` and ``N`` are chosen on groups the
cross-encoder did not train on.
"""
from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightmem.config import to_container
from lightmem.datasets.catalog import repo_root
from lightmem.datasets.splits import split_of
from lightmem.retrieval.trees import ranker_scorer
from lightmem.seeding import seed_everything
from lightmem.training import distributed
from lightmem.training.job import train_and_export
from lightmem.training.ranker import ServedPacking, evaluate_orders, mined_groups, ranker_order, served_packing
from lightmem.training.schemas import lora_spec, train_spec
from lightmem.training.selector import build_cross_encoder, cross_encoder_batcher, cross_encoder_loss

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


def held_apart(group: dict[str, Any], cfg: Any) -> bool:
    """Whether a training group chooses alpha and N instead of training the cross-encoder."""
    if group["source"] == "locomo":
        return group["conversation"] in set(cfg.stack_locomo)
    return split_of(f"{group['conversation']}|stack", (1 - cfg.stack_share, cfg.stack_share, 0.0)) == "val"


def train_slm(cfg: Any) -> dict[str, Any]:
    """Mine (or read from the cache) the ranker's groups, fit the cross-encoder on the groups not held apart, choose
    alpha and N on those held apart, and export the adapter, stack.json and a card scoring the ranker against the
    ranker + SLM on the held-out test groups.

    Args:
        cfg: A composed ``SLMTrainConfig`` (conf/train_slm.yaml).

    Returns:
        The run's summary (``train_and_export``).
    """
    from lightmem.models.registry import ModelRegistry
    from lightmem.retrieval.stage2 import weights_digest
    from lightmem.roles.selector import CrossEncoderSelector

    t0 = time.perf_counter()
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # Mining is no data-parallel work: N processes read the groups a one-process run cached (train/ranker.py's).
    groups, cache, cached = mined_groups(cfg, out / "stores", mine=distributed.world()[1] == 1)
    weights = json.loads((Path(cfg.ranker) / "ranker.json").read_text())
    train_all = with_ranker(groups["train"], weights)
    stack = [g for g in train_all if held_apart(g, cfg)]
    fit_groups = [g for g in train_all if not held_apart(g, cfg) and any(g["labels"])]
    test = {"locomo": with_ranker(groups["test_locomo"], weights),
            "longmemeval": with_ranker(groups["test_longmemeval"], weights)}
    mined_s = time.perf_counter() - t0
    # alpha and N are chosen, and the held-out groups scored, packed as the engine serves them (whole memories in
    # retrieval.whole_share of the budget, then excerpts); served_packing=false: whole memories only.
    packing = served_packing(cfg) if cfg.served_packing else None

    seed_everything(cfg.optim.seed)  # the head and the LoRA matrices are drawn when the model is built
    task = SLMTask(**to_container(cfg.task))
    model, tok = build_cross_encoder(str(ModelRegistry().path(cfg.base_model)), lora_spec(cfg.lora), task.num_layers)
    ns, alphas = [int(n) for n in cfg.top_ns], [float(a) for a in cfg.alphas]

    def evaluate(m) -> dict[str, float]:
        """The stack groups' recall with the best (alpha, N), served and packing whole memories only. The training
        step kept is the one whose scores order the stack groups best (whole memories only: there a better order
        always shows); alpha and N are then chosen for serving (``held_out``)."""
        ce = top_scores(CrossEncoderSelector.from_objects(m, tok, max_length=task.max_length).scores, stack, max(ns))
        whole = fit_stack(stack, ce, alphas, ns, cfg.k, cfg.budget)
        served = fit_stack(stack, ce, alphas, ns, cfg.k, cfg.budget, packing) if packing is not None else whole
        return {"stack/recall_all@budget": served["fit_recall_all@budget"], "stack/alpha": served["alpha"],
                "stack/top_n": served["top_n"], "stack/whole_only/recall_all@budget": whole["fit_recall_all@budget"],
                "stack/whole_only/top_n": whole["top_n"]}

    def held_out(best_dir: Path) -> dict[str, float]:
        """alpha and N chosen with the exported weights as retrieval loads them, then the test groups:
        the ranker against the ranker + SLM, per category, with a paired-bootstrap CI of the gain."""
        scorer = CrossEncoderSelector(str(best_dir), base_model=cfg.base_model, max_length=task.max_length,
                                      num_layers=task.num_layers, int8=cfg.int8, device="cpu").scores
        stack_scores = top_scores(scorer, stack, max(ns))
        chosen = fit_stack(stack, stack_scores, alphas, ns, cfg.k, cfg.budget, packing)
        # The choice the whole-memories metric would make, for its gain beside the served one (with served packing
        # N is often 0, where no order changes).
        whole = fit_stack(stack, stack_scores, alphas, ns, cfg.k, cfg.budget) if packing is not None else chosen
        (best_dir / "stack.json").write_text(json.dumps(
            {"alpha": chosen["alpha"], "top_n": chosen["top_n"], "base_model": cfg.base_model, "num_layers": task.num_layers,
             "max_length": task.max_length, "ranker_sha": weights_digest(weights), "stack_grid": chosen["grid"]}, indent=2))
        metrics: dict[str, float] = {"stack/alpha": chosen["alpha"], "stack/top_n": float(chosen["top_n"]),
                                     "stack/whole_only/alpha": whole["alpha"], "stack/whole_only/top_n": float(whole["top_n"])}
        for source, held in test.items():
            if not held:  # a split without questions (small data): nothing to compare
                continue
            ce = top_scores(scorer, held, max(chosen["top_n"], whole["top_n"]))  # covers both choices
            base = [g["order"] for g in held]
            new = orders_for(held, ce, chosen["alpha"], chosen["top_n"])
            for name, orders in (("ranker", base), ("slm", new)):
                metrics.update({f"test/{source}/{name}/{k}": v
                                for k, v in evaluate_orders(held, orders, cfg.k, cfg.budget, packing=packing).items()})
            metrics.update({f"test/{source}/gain/{k}": v
                            for k, v in paired_gain(held, base, new, cfg.k, cfg.budget, packing=packing).items()})
            if packing is not None:  # the whole-memories metric at its own choice of alpha and N, as cards before had it
                new = orders_for(held, ce, whole["alpha"], whole["top_n"])
                metrics.update({f"test/{source}/gain_whole_only/{k}": v
                                for k, v in paired_gain(held, base, new, cfg.k, cfg.budget).items()})
        return metrics

    groups_file = out / "slm_groups.jsonl"
    if distributed.is_main():
        groups_file.write_text("".join(json.dumps({k: g[k] for k in ("query", "texts", "labels", "source", "conversation")}) + "\n"
                                       for g in fit_groups))
    return train_and_export(
        name="slm", model=model, train=fit_groups, make_batch=batcher(tok, task), loss_fn=cross_encoder_loss(task),
        evaluate=evaluate, test=held_out, metric="stack/whole_only/recall_all@budget", spec=train_spec(cfg.optim), out_dir=out,
        export_dir=cfg.export_dir, logger_cfg=cfg.logger,
        config=json.loads(json.dumps(to_container(cfg)).replace(str(repo_root()) + "/", "")),  # no machine paths
        data_files=[groups_file],
        card={"name": "lightmem SLM-2 selector (stacked on the ranker)",
              "task": "cross-encoder reranker of the ranker's top N Stage-1 candidates",
              "description": "Scores (question, \"[date] memory\") pairs with the first "
                             f"{task.num_layers} MiniLM layers; SLMSelector adds alpha x its logit to the ranker's "
                             "(conf/selector/slm.yaml; stack.json holds alpha and N).",
              "base_model": cfg.base_model, "command": "make train  (python train/slm.py)",
              "groups": {"fit": len(fit_groups), "stack": len(stack), "from_cache": str(cache) if cached else None,
                         "mine_seconds": round(mined_s, 1)}},
    )
