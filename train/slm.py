"""Train SLM-2 stacked on the learned ranker (selector=slm); choose alpha and N on held-apart groups; export
the adapter, stack.json and a card that scores it against the ranker on the held-out test groups
(``lightmem.training.slm.train_slm``).

    python train/slm.py
    python train/slm.py task.num_layers=6 "top_ns=[0,10,20,30]"
"""
from __future__ import annotations

import json

import hydra
from omegaconf import DictConfig

from lightmem.config import per_job
from lightmem.metric_logger import quiet_third_party_logs
from lightmem.training.schemas import register_configs
from lightmem.training.slm import train_slm


def run(cfg: DictConfig) -> dict:
    quiet_third_party_logs()
    summary = train_slm(cfg)
    print(json.dumps({k: round(v, 4) for k, v in summary["test"].items() if "overall" in k or "gain/diff" in k
                      or k.startswith("stack")}, indent=1))
    return summary


@hydra.main(version_base="1.3", config_path="../conf", config_name="train_slm")
def main(cfg: DictConfig) -> float:
    cfg = per_job(cfg)
    return run(cfg)["test"].get("test/locomo/slm/overall/recall_all@budget", float("nan"))


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
