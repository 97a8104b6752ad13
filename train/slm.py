"""Train SLM-2 stacked on the learned ranker (selector=slm); choose alpha and N on held-apart groups; export
the adapter, stack.json and a card that scores it against the ranker on the held-out test groups.

    python train/slm.py
    python train/slm.py task.num_layers=6 "top_ns=[0,10,20,30]"
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig

from lightmem.config import per_job, to_container
from lightmem.datasets.catalog import repo_root
from lightmem.datasets.splits import split_of
from lightmem.metric_logger import quiet_third_party_logs
from lightmem.seeding import seed_everything
from lightmem.training import ranker as rk
from lightmem.training import slm
from lightmem.training.job import train_and_export
from lightmem.training.schemas import lora_spec, register_configs, train_spec
from lightmem.training.selector import build_cross_encoder, cross_encoder_loss


def held_apart(group: dict, cfg: DictConfig) -> bool:
    """Whether a training group chooses alpha and N instead of training the cross-encoder."""
    if group["source"] == "locomo":
        return group["conversation"] in set(cfg.stack_locomo)
    return split_of(f"{group['conversation']}|stack", (1 - cfg.stack_share, cfg.stack_share, 0.0)) == "val"


def run(cfg: DictConfig) -> dict:
    from lightmem.models.registry import ModelRegistry
    from lightmem.retrieval.stage2 import weights_digest
    from lightmem.roles.selector import CrossEncoderSelector

    quiet_third_party_logs()
    t0 = time.perf_counter()
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    groups, cache, cached = rk.mined_groups(cfg, out / "stores")
    weights = json.loads((Path(cfg.ranker) / "ranker.json").read_text())
    train_all = slm.with_ranker(groups["train"], weights)
    stack = [g for g in train_all if held_apart(g, cfg)]
    fit_groups = [g for g in train_all if not held_apart(g, cfg) and any(g["labels"])]
    test = {"locomo": slm.with_ranker(groups["test_locomo"], weights),
            "longmemeval": slm.with_ranker(groups["test_longmemeval"], weights)}
    mined_s = time.perf_counter() - t0
    # alpha and N are chosen, and the held-out groups scored, packed as the engine serves them (whole memories in
    # retrieval.whole_share of the budget, then excerpts); served_packing=false: whole memories only.
    packing = rk.served_packing(cfg) if cfg.served_packing else None

    seed_everything(cfg.optim.seed)  # the head and the LoRA matrices are drawn when the model is built
    task = slm.SLMTask(**to_container(cfg.task))
    model, tok = build_cross_encoder(str(ModelRegistry().path(cfg.base_model)), lora_spec(cfg.lora), task.num_layers)
    ns, alphas = [int(n) for n in cfg.top_ns], [float(a) for a in cfg.alphas]

    def evaluate(m) -> dict[str, float]:
        """The stack groups' recall with the best (alpha, N), served and packing whole memories only. The training
        step kept is the one whose scores order the stack groups best (whole memories only: there a better order
        always shows); alpha and N are then chosen for serving (``held_out``)."""
        ce = slm.top_scores(CrossEncoderSelector.from_objects(m, tok, max_length=task.max_length).scores, stack, max(ns))
        whole = slm.fit_stack(stack, ce, alphas, ns, cfg.k, cfg.budget)
        served = slm.fit_stack(stack, ce, alphas, ns, cfg.k, cfg.budget, packing) if packing is not None else whole
        return {"stack/recall_all@budget": served["fit_recall_all@budget"], "stack/alpha": served["alpha"],
                "stack/top_n": served["top_n"], "stack/whole_only/recall_all@budget": whole["fit_recall_all@budget"],
                "stack/whole_only/top_n": whole["top_n"]}

    def held_out(best_dir: Path) -> dict[str, float]:
        """alpha and N chosen with the exported weights as retrieval loads them, then the test groups:
        the ranker against the ranker + SLM, per category, with a paired-bootstrap CI of the gain."""
        scorer = CrossEncoderSelector(str(best_dir), base_model=cfg.base_model, max_length=task.max_length,
                                      num_layers=task.num_layers, int8=cfg.int8, device="cpu").scores
        stack_scores = slm.top_scores(scorer, stack, max(ns))
        chosen = slm.fit_stack(stack, stack_scores, alphas, ns, cfg.k, cfg.budget, packing)
        # The choice the whole-memories metric would make, for its gain beside the served one (with served packing
        # N is often 0, where no order changes).
        whole = slm.fit_stack(stack, stack_scores, alphas, ns, cfg.k, cfg.budget) if packing is not None else chosen
        (best_dir / "stack.json").write_text(json.dumps(
            {"alpha": chosen["alpha"], "top_n": chosen["top_n"], "base_model": cfg.base_model, "num_layers": task.num_layers,
             "max_length": task.max_length, "ranker_sha": weights_digest(weights), "stack_grid": chosen["grid"]}, indent=2))
        metrics: dict[str, float] = {"stack/alpha": chosen["alpha"], "stack/top_n": float(chosen["top_n"]),
                                     "stack/whole_only/alpha": whole["alpha"], "stack/whole_only/top_n": float(whole["top_n"])}
        for source, held in test.items():
            if not held:  # a split without questions (small data): nothing to compare
                continue
            ce = slm.top_scores(scorer, held, max(chosen["top_n"], whole["top_n"]))  # covers both choices
            base = [g["order"] for g in held]
            new = slm.orders_for(held, ce, chosen["alpha"], chosen["top_n"])
            for name, orders in (("ranker", base), ("slm", new)):
                metrics.update({f"test/{source}/{name}/{k}": v
                                for k, v in rk.evaluate_orders(held, orders, cfg.k, cfg.budget, packing=packing).items()})
            metrics.update({f"test/{source}/gain/{k}": v
                            for k, v in slm.paired_gain(held, base, new, cfg.k, cfg.budget, packing=packing).items()})
            if packing is not None:  # the whole-memories metric at its own choice of alpha and N, as cards before had it
                new = slm.orders_for(held, ce, whole["alpha"], whole["top_n"])
                metrics.update({f"test/{source}/gain_whole_only/{k}": v
                                for k, v in slm.paired_gain(held, base, new, cfg.k, cfg.budget).items()})
        return metrics

    groups_file = out / "slm_groups.jsonl"
    groups_file.write_text("".join(json.dumps({k: g[k] for k in ("query", "texts", "labels", "source", "conversation")}) + "\n"
                                   for g in fit_groups))
    summary = train_and_export(
        name="slm", model=model, train=fit_groups, make_batch=slm.batcher(tok, task), loss_fn=cross_encoder_loss(task),
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
    print(json.dumps({k: round(v, 4) for k, v in summary["test"].items() if "overall" in k or "gain/diff" in k
                      or k.startswith("stack")}, indent=1))
    return summary


@hydra.main(version_base="1.3", config_path="../conf", config_name="train_slm")
def main(cfg: DictConfig) -> float:
    cfg = per_job(cfg)
    return run(cfg)["test"].get("test/locomo/slm/overall/recall_all@budget", float("nan"))


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
