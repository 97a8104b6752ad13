"""Fit the learned Stage-2 ranker on mined Stage-1 candidate groups; export ranker.json and its card
(``lightmem.training.ranker.train_ranker``).

    python train/ranker.py
    python train/ranker.py -m l2=1e-4,1e-3,1e-2
"""
from __future__ import annotations

import json

import hydra
from omegaconf import DictConfig

from lightmem.config import per_job
from lightmem.metric_logger import quiet_third_party_logs
from lightmem.training.ranker import train_ranker
from lightmem.training.schemas import register_configs


def run(cfg: DictConfig) -> dict:
    quiet_third_party_logs()
    summary = train_ranker(cfg)
    print(json.dumps({k: round(v, 4) for k, v in summary["test"].items() if "overall" in k}, indent=1))
    return summary


@hydra.main(version_base="1.3", config_path="../conf", config_name="train_ranker")
def main(cfg: DictConfig) -> float:
    cfg = per_job(cfg)
    return run(cfg)["test"].get("test/locomo/ranker/overall/recall_all@budget", float("nan"))


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
