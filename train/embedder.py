"""Train the memory embedder (LoRA on a bi-encoder, all-mpnet-base-v2 by default); export the best adapter and its model card
(``lightmem.training.embedder.train_embedder``).

    python train/embedder.py
    python train/embedder.py -m lora.r=8,16 optim.lr=5e-4,1e-3
"""
from __future__ import annotations

import json

import hydra
from omegaconf import DictConfig

from lightmem.config import per_job
from lightmem.metric_logger import quiet_third_party_logs
from lightmem.training.embedder import train_embedder
from lightmem.training.schemas import register_configs


def run(cfg: DictConfig) -> dict:
    quiet_third_party_logs()
    summary = train_embedder(cfg)
    print(json.dumps({k: v for k, v in summary["test"].items() if "recall_all" in k}, indent=1))
    return summary


@hydra.main(version_base="1.3", config_path="../conf", config_name="train_embedder")
def main(cfg: DictConfig) -> float:
    cfg = per_job(cfg)  # a sweep's jobs neither share state nor overwrite checkpoints/
    return run(cfg)["train"]["best"].get(cfg.metric, float("nan"))  # what a sweep maximises


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
