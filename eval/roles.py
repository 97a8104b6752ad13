"""Latency and LLM cost of each role setting on CPU (or GPU), on LoCoMo queries and turns.

    python eval/roles.py                                   # all settings, small samples
    python eval/roles.py n_queries=50 'controllers=[passthrough,fast]' 'selectors=[none]'
"""
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lightmem.evaluation.reports.failures import exit_on_failures
from lightmem.evaluation.runs.common import optimized_metric
from lightmem.evaluation.runs.roles import metrics, run
from lightmem.evaluation.schemas import register_configs


@hydra.main(version_base="1.3", config_path="../conf", config_name="roles")
def main(cfg: DictConfig) -> float | None:
    results = run(cfg)
    exit_on_failures(results, "Role benchmark", cfg.out_dir)  # exit 1 when the run recorded failures
    return optimized_metric(metrics(results), cfg)  # the metric a sweep optimises: cfg.optimized_metric


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
