"""Train the Stage-2 selector with LoRA; export the best adapter and its model card.

    python train/selector.py
    python train/selector.py -m lora.r=4,8,16 optim.lr=3e-4,1e-3
    python train/selector.py model=generative base_model=SmolLM2-135M-Instruct lora=causal_lm optim.batch_size=2
"""
from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from lightmem.config import lora_spec, to_container, train_spec
from lightmem.metric_logger import make_logger, quiet_third_party_logs
from lightmem.training import selector as sel
from lightmem.training.export import export, git_commit, sha256_files
from lightmem.training.loop import fit, result_dict
from lightmem.training.lora import trainable_summary

log = logging.getLogger("lightmem.train.selector")


def load_groups(path: Path, sources, limit: int | None) -> list[dict]:
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `python data_gen/synth.py` and `python data_gen/distill.py` first (or `make train`)")
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    rows = [r for r in rows if r["source"] in set(sources)]
    return rows[:limit] if limit else rows


def run(cfg: DictConfig) -> dict:
    quiet_third_party_logs()
    data, out = Path(cfg.data_dir), Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    task = sel.SelectorTask(**to_container(cfg.task))
    spec = train_spec(cfg.optim)
    train = [g for g in load_groups(data / "selector_train.jsonl", cfg.sources, cfg.max_train_groups) if any(g["labels"])]
    val = load_groups(data / "selector_val.jsonl", cfg.sources, cfg.max_eval_groups)
    test = load_groups(data / "selector_test.jsonl", ["synth", "longmemeval", "locomo"], None)
    if cfg.model == "cross_encoder":
        from lightmem.models.registry import ModelRegistry

        model, tok = sel.build_cross_encoder(str(ModelRegistry().path(cfg.base_model)), lora_spec(cfg.lora))
        make_batch, loss_fn = sel.cross_encoder_batcher(tok, task), sel.cross_encoder_loss(task)
        scorer = lambda m: sel.cross_encoder_scorer(m, tok, task.max_length)  # noqa: E731
    elif cfg.model == "generative":
        model, llm = sel.build_generative(cfg.base_model, lora_spec(cfg.lora), cfg.load_in_4bit, "cpu" if spec.cpu else "auto")
        make_batch, loss_fn = sel.generative_batcher(task), sel.generative_loss(llm, task)
        scorer = lambda m: sel.generative_scorer(llm)  # noqa: E731
    else:
        raise ValueError(f"model must be cross_encoder or generative, not {cfg.model!r}")

    logger = make_logger(cfg.logger.kind, out, cfg.logger.project, cfg.logger.mode, cfg.logger.name or "train-selector")
    logger.log_config(to_container(cfg))
    params = trainable_summary(model)
    log.info("training %d groups; %s", len(train), params)
    result = fit(model, train, make_batch, loss_fn, lambda m: sel.evaluate_groups(scorer(m), val, task.k), cfg.metric, out,
                 spec, logger, show_progress=sys.stderr.isatty())

    # Held-out test: Stage 1 alone versus reranked by the best weights, per source.
    best = _load_best(cfg, out / "best") if cfg.model == "cross_encoder" else None
    score = best.scores if best is not None else scorer(model)
    metrics: dict[str, float] = {}
    for source in sorted({g["source"] for g in test}):
        groups = [g for g in test if g["source"] == source]
        for name, fn in (("stage1", None), ("selector", score)):
            for k, v in sel.evaluate_groups(fn, groups, task.k).items():
                metrics[f"test/{source}/{name}/{k}"] = v
    logger.log_metrics(metrics)
    summary = {"train": result_dict(result), "test": metrics, "params": params, "n_train_groups": len(train)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    if cfg.export_dir:
        card = {"name": "lightmem Stage-2 selector", "task": f"{cfg.model} reranker of Stage-1 candidates",
                "description": "Scores (query, \"[date] memory\") pairs; CrossEncoderSelector loads it (conf/selector/cross_encoder.yaml).",
                "base_model": cfg.base_model, "params": params, "data_sha256": sha256_files([data / "selector_train.jsonl"]),
                "commit": git_commit(), "command": "make train  (python train/selector.py)", "metrics": metrics,
                "training": {k: v for k, v in result_dict(result).items() if k != "history"}, "config": to_container(cfg)}
        export(out / "best", cfg.export_dir, card)
        logger.log_artifact(Path(cfg.export_dir) / "card.json")
    logger.finish()
    print(json.dumps({k: v for k, v in metrics.items() if "recall_all" in k or "precision" in k}, indent=1))
    return summary


def _load_best(cfg: DictConfig, best: Path):
    from lightmem.roles.selector import CrossEncoderSelector

    return CrossEncoderSelector(str(best), base_model=cfg.base_model, max_length=cfg.task.max_length, device="cpu" if cfg.optim.cpu else "auto")


@hydra.main(version_base="1.3", config_path="../conf", config_name="train_selector")
def main(cfg: DictConfig) -> float:
    summary = run(cfg)
    return summary["train"]["best"].get(cfg.metric, float("nan"))  # what a sweep maximises


if __name__ == "__main__":
    main()
