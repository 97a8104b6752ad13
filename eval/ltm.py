"""LTM benchmark: nodes per turn, seconds per consolidation batch, search latency idle vs
during consolidation (writes numbers, asserts nothing).

    python eval/ltm.py                          # LoCoMo dev conversation 0, MiniLM, CPU
    python eval/ltm.py conversation=3 copies=3 n_queries=150
"""
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lightmem.evaluation.reports.failures import exit_on_failures
from lightmem.evaluation.runs.common import optimized_metric
from lightmem.evaluation.runs.ltm import metrics, run
from lightmem.evaluation.schemas import register_configs


@hydra.main(version_base="1.3", config_path="../conf", config_name="ltm_bench")
def main(cfg: DictConfig) -> float | None:
    results = run(cfg)
    exit_on_failures(results, "LTM benchmark", cfg.out_dir)  # exit 1 when the run recorded failures
    return optimized_metric(metrics(results), cfg)  # the metric a sweep optimises: cfg.optimized_metric


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
