"""Train the Stage-2 selector with LoRA; export the best adapter and its model card.

    python train/selector.py
    python train/selector.py -m lora.r=4,8,16 optim.lr=3e-4,1e-3
    python train/selector.py model=generative base_model=SmolLM2-135M-Instruct lora=causal_lm quantize=4bit  # CUDA
"""
from __future__ import annotations

import json
from pathlib import Path

import hydra
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
    if cfg.model == "cross_encoder":
        from lightmem.models.registry import ModelRegistry

        model, tok = sel.build_cross_encoder(str(ModelRegistry().path(cfg.base_model)), lora_spec(cfg.lora))
        make_batch, loss_fn = sel.cross_encoder_batcher(tok, task), sel.cross_encoder_loss(task)
        scorer = lambda m: sel.cross_encoder_scorer(m, tok, task.max_length)  # noqa: E731
    elif cfg.model == "generative":
        model, llm = sel.build_generative(cfg.base_model, lora_spec(cfg.lora), cfg.quantize, "cpu" if spec.cpu else "auto")
        make_batch, loss_fn = sel.generative_batcher(task), sel.generative_loss(llm, task)
        scorer = lambda m: sel.generative_scorer(llm)  # noqa: E731
    else:
        raise ValueError(f"model must be cross_encoder or generative, not {cfg.model!r}")

    def held_out(best: Path) -> dict[str, float]:
        """Stage 1 alone versus reranked, per source, with the exported weights as retrieval loads them."""
        if cfg.model == "cross_encoder":
            from lightmem.roles.selector import CrossEncoderSelector

            score = CrossEncoderSelector(str(best), base_model=cfg.base_model, max_length=task.max_length,
                                         device="cpu" if spec.cpu else "auto").scores
        else:
            score = scorer(model)
        out: dict[str, float] = {}
        for source in sorted({g["source"] for g in test}):
            groups = [g for g in test if g["source"] == source]
            for name, fn in (("stage1", None), ("selector", score)):
                out.update({f"test/{source}/{name}/{k}": v for k, v in sel.evaluate_groups(fn, groups, task.k).items()})
        return out

    summary = train_and_export(
        name="selector", model=model, train=train, make_batch=make_batch, loss_fn=loss_fn,
        evaluate=lambda m: sel.evaluate_groups(scorer(m), val, task.k), test=held_out, metric=cfg.metric, spec=spec,
        out_dir=cfg.out_dir, export_dir=cfg.export_dir, logger_cfg=cfg.logger, config=to_container(cfg),
        data_files=[data / "selector_train.jsonl"],
        card={"name": "lightmem Stage-2 selector", "task": f"{cfg.model} reranker of Stage-1 candidates",
              "description": "Scores (query, \"[date] memory\") pairs; CrossEncoderSelector loads it (conf/selector/cross_encoder.yaml).",
              "base_model": cfg.base_model, "command": "make train  (python train/selector.py)"},
    )
    print(json.dumps({k: v for k, v in summary["test"].items() if "recall_all" in k or "precision" in k}, indent=1))
    return summary


@hydra.main(version_base="1.3", config_path="../conf", config_name="train_selector")
def main(cfg: DictConfig) -> float:
    cfg = per_job(cfg)  # a sweep's jobs neither share state nor overwrite checkpoints/
    return run(cfg)["train"]["best"].get(cfg.metric, float("nan"))  # what a sweep maximises


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
