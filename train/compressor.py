"""Train the token-classification compressor (keep/drop per word) with LoRA on MiniLM.

    python train/compressor.py
    python train/compressor.py rate=0.5 -m lora.r=8,16
"""
from __future__ import annotations

import json
from pathlib import Path

import hydra
from omegaconf import DictConfig

from lightmem.config import per_job, to_container
from lightmem.datasets.splits import split_of
from lightmem.metric_logger import quiet_third_party_logs
from lightmem.models.registry import ModelRegistry
from lightmem.models.word_scorer import TokenClassifierCompressor
from lightmem.seeding import seed_everything
from lightmem.training import classify
from lightmem.training.job import read_jsonl, train_and_export
from lightmem.training.schemas import lora_spec, register_configs, train_spec


def run(cfg: DictConfig) -> dict:
    quiet_third_party_logs()
    seed_everything(cfg.optim.seed)  # before the model is built: heads and LoRA matrices are drawn then
    data = Path(cfg.data_dir)
    rows = read_jsonl(data / "compressor_train.jsonl")
    # Validation turns come from the training conversations (hash of the turn id); the test
    # split is the held-out conversations.
    train = [r for r in rows if split_of(r["id"], (0.9, 0.1, 0.0)) == "train"]
    val = [r for r in rows if split_of(r["id"], (0.9, 0.1, 0.0)) != "train"]
    test = read_jsonl(data / "compressor_test.jsonl")
    model, tok = classify.build_classifier(str(ModelRegistry().path(cfg.base_model)), lora_spec(cfg.lora), "token")

    def evaluate(m):
        return classify.evaluate_tokens(TokenClassifierCompressor.from_objects(m, tok).word_probs, val, cfg.rate)

    def held_out(best: Path) -> dict[str, float]:
        comp = TokenClassifierCompressor(str(best), cfg.base_model, device="cpu" if cfg.optim.cpu else "auto")
        out = {f"test/trained/{k}": v for k, v in classify.evaluate_tokens(comp.word_probs, test, cfg.rate).items()}
        out.update({f"test/random/{k}": v for k, v in classify.evaluate_tokens(classify.random_word_probs(), test, cfg.rate).items()})
        return out

    weights = classify.class_weights([y for r in train for y in r["labels"]]) if cfg.balance else None
    summary = train_and_export(
        name="compressor", model=model, train=train, make_batch=classify.token_batcher(tok, cfg.max_length),
        loss_fn=classify.weighted_ce(weights), evaluate=evaluate, test=held_out, metric=cfg.metric,
        spec=train_spec(cfg.optim), out_dir=cfg.out_dir, export_dir=cfg.export_dir, logger_cfg=cfg.logger,
        config=to_container(cfg), data_files=[data / "compressor_train.jsonl"],
        card={"name": "lightmem token-classification compressor", "task": "token classification keep/drop per word",
              "description": "LLMLingua-2-style pre-compression; TokenClassifierCompressor loads it and keeps the top r of words.",
              "base_model": cfg.base_model, "command": "make train  (python train/compressor.py)"},
    )
    print(json.dumps(summary["test"], indent=1))
    return summary


@hydra.main(version_base="1.3", config_path="../conf", config_name="train_compressor")
def main(cfg: DictConfig) -> float:
    cfg = per_job(cfg)  # a sweep's jobs neither share state nor overwrite checkpoints/
    return run(cfg)["train"]["best"].get(cfg.metric, float("nan"))


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
