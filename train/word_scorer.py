"""Train the word scorer (a token classifier, keep/drop per word) with LoRA on MiniLM; export the best adapter and its
model card (``lightmem.training.classify.train_word_scorer``).

    python train/word_scorer.py
    python train/word_scorer.py rate=0.5 -m lora.r=8,16
"""
from __future__ import annotations

import json

import hydra
from omegaconf import DictConfig

from lightmem.config import per_job
from lightmem.metric_logger import quiet_third_party_logs
from lightmem.training.classify import train_word_scorer
from lightmem.training.schemas import register_configs


def run(cfg: DictConfig) -> dict:
    quiet_third_party_logs()
    summary = train_word_scorer(cfg)
    print(json.dumps(summary["test"], indent=1))
    return summary


@hydra.main(version_base="1.3", config_path="../conf", config_name="train_word_scorer")
def main(cfg: DictConfig) -> float:
    cfg = per_job(cfg)  # a sweep's jobs neither share state nor overwrite checkpoints/
    return run(cfg)["train"]["best"].get(cfg.metric, float("nan"))


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
