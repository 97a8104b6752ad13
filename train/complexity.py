"""Train the query-complexity classifier (LOW/HIGH; C_q = P(HIGH)) with LoRA on MiniLM
(``lightmem.training.classify.train_complexity``).

    python train/complexity.py
    python train/complexity.py -m lora.r=4,8 optim.lr=5e-4,1e-3
"""
from __future__ import annotations

import json

import hydra
from omegaconf import DictConfig

from lightmem.config import per_job
from lightmem.metric_logger import quiet_third_party_logs
from lightmem.training.classify import train_complexity
from lightmem.training.schemas import register_configs


def run(cfg: DictConfig) -> dict:
    quiet_third_party_logs()
    summary = train_complexity(cfg)
    print(json.dumps(summary["test"], indent=1))
    return summary


@hydra.main(version_base="1.3", config_path="../conf", config_name="train_complexity")
def main(cfg: DictConfig) -> float:
    cfg = per_job(cfg)  # a sweep's jobs neither share state nor overwrite checkpoints/
    return run(cfg)["train"]["best"].get(cfg.metric, float("nan"))


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
