"""Distil the served embedder's document vectors into all-MiniLM-L6-v2 (LoRA + a linear map to the served space):
the cheap document encoder of ``encoder=experimental/mpnet_split`` (``lightmem.training.doc_encoder``).

    python train/doc_encoder.py
    python train/doc_encoder.py -m lora.r=16,32 optim.lr=5e-4,1e-3 logger=wandb
"""
from __future__ import annotations

import json

import hydra
from omegaconf import DictConfig

from lightmem.config import per_job
from lightmem.metric_logger import quiet_third_party_logs
from lightmem.training.doc_encoder import train_doc_encoder
from lightmem.training.schemas import register_configs


def run(cfg: DictConfig) -> dict:
    quiet_third_party_logs()
    summary = train_doc_encoder(cfg)
    print(json.dumps({k: round(v, 4) for k, v in summary["test"].items()}, indent=1))
    return summary


@hydra.main(version_base="1.3", config_path="../conf", config_name="train_doc_encoder")
def main(cfg: DictConfig) -> float:
    cfg = per_job(cfg)  # a sweep's jobs neither share state nor overwrite checkpoints/
    return run(cfg)["train"].get("best", {}).get(cfg.metric, float("nan"))  # what a sweep maximises


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
