"""Train the cross-encoder Stage-2 selector (measured, not the default: the learned ranker is) with LoRA; export
the best adapter and its model card (``lightmem.training.selector.train_cross_encoder``).

    python train/cross_encoder.py
    python train/cross_encoder.py -m lora.r=4,8,16 optim.lr=3e-4,1e-3
    python train/cross_encoder.py selector_recipe@model=generative lora=causal_lm model.quantize=4bit  # SmolLM2, CUDA
"""
from __future__ import annotations

import json

import hydra
from omegaconf import DictConfig

from lightmem.config import per_job
from lightmem.metric_logger import quiet_third_party_logs
from lightmem.training.schemas import register_configs
from lightmem.training.selector import train_cross_encoder


def run(cfg: DictConfig) -> dict:
    quiet_third_party_logs()
    summary = train_cross_encoder(cfg)
    print(json.dumps({k: v for k, v in summary["test"].items() if "recall_all" in k or "precision" in k}, indent=1))
    return summary


@hydra.main(version_base="1.3", config_path="../conf", config_name="train_cross_encoder")
def main(cfg: DictConfig) -> float:
    cfg = per_job(cfg)  # a sweep's jobs neither share state nor overwrite checkpoints/
    return run(cfg)["train"]["best"].get(cfg.metric, float("nan"))  # what a sweep maximises


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
