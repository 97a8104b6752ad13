"""Train the cross-encoder Stage-2 selector (measured, not the default: the learned ranker is) with LoRA; export
the best adapter and its model card.

    python train/cross_encoder.py
    python train/cross_encoder.py -m lora.r=4,8,16 optim.lr=3e-4,1e-3
    python train/cross_encoder.py selector_recipe@model=generative lora=causal_lm model.quantize=4bit  # SmolLM2, CUDA
"""
from __future__ import annotations

import json
from pathlib import Path

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig

from lightmem.config import per_job, to_container
from lightmem.metric_logger import quiet_third_party_logs
from lightmem.seeding import seed_everything
from lightmem.training import selector as sel
from lightmem.training.job import read_jsonl, train_and_export
from lightmem.training.schemas import lora_spec, register_configs, train_spec


def run(cfg: DictConfig) -> dict:
    quiet_third_party_logs()
    seed_everything(cfg.optim.seed)  # before the model is built: heads and LoRA matrices are drawn then
    data = Path(cfg.data_dir)
    task, spec = sel.SelectorTask(**to_container(cfg.task)), train_spec(cfg.optim)
    sources = set(cfg.sources)
    train = [g for g in read_jsonl(data / "selector_train.jsonl") if g["source"] in sources and any(g["labels"])]
    train = train[: cfg.max_train_groups] if cfg.max_train_groups else train
    val = [g for g in read_jsonl(data / "selector_val.jsonl") if g["source"] in sources][: cfg.max_eval_groups]
    test = read_jsonl(data / "selector_test.jsonl")
    if cfg.max_test_groups:  # per source (the generative variant is slow on CPU)
        test = [g for s in sorted({g["source"] for g in test}) for g in [x for x in test if x["source"] == s][: cfg.max_test_groups]]
    recipe = instantiate(cfg.model)  # conf/selector_recipe/*.yaml: the model choice and its own settings
    recipe.build(task, lora_spec(cfg.lora), spec.cpu)

    def held_out(best: Path) -> dict[str, float]:
        """Stage 1 alone versus reranked, per source, with the exported weights as retrieval loads them."""
        score = recipe.exported_scorer(best)
        out: dict[str, float] = {}
        for source in sorted({g["source"] for g in test}):
            groups = [g for g in test if g["source"] == source]
            for name, fn in (("stage1", None), ("selector", score)):
                out.update({f"test/{source}/{name}/{k}": v for k, v in sel.evaluate_groups(fn, groups, task.k).items()})
        return out

    summary = train_and_export(
        name="cross_encoder", model=recipe.model, train=train, make_batch=recipe.make_batch, loss_fn=recipe.loss_fn,
        evaluate=lambda m: sel.evaluate_groups(recipe.scorer(m), val, task.k), test=held_out, metric=cfg.metric, spec=spec,
        out_dir=cfg.out_dir, export_dir=cfg.export_dir, logger_cfg=cfg.logger, config=to_container(cfg),
        data_files=[data / "selector_train.jsonl"],
        card={"name": "lightmem cross-encoder selector", "task": f"{recipe.kind} reranker of Stage-1 candidates",
              "description": "Scores (query, \"[date] memory\") pairs; CrossEncoderSelector loads it (conf/selector/cross_encoder.yaml).",
              "base_model": recipe.base_model, "command": "make train-experimental  (python train/cross_encoder.py)"},
    )
    print(json.dumps({k: v for k, v in summary["test"].items() if "recall_all" in k or "precision" in k}, indent=1))
    return summary


@hydra.main(version_base="1.3", config_path="../conf", config_name="train_cross_encoder")
def main(cfg: DictConfig) -> float:
    cfg = per_job(cfg)  # a sweep's jobs neither share state nor overwrite checkpoints/
    return run(cfg)["train"]["best"].get(cfg.metric, float("nan"))  # what a sweep maximises


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
