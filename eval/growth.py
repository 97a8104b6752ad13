"""MTM growth stress test (LightMem-SLM §4.5): recall and latency with and without reranking as one store grows.

    python eval/growth.py out_dir=outputs/growth
    python eval/growth.py sizes=[100,1000] filler_path=null max_questions=100
"""
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lightmem.evaluation.reports.failures import exit_on_failures
from lightmem.evaluation.runs.common import optimized_metric
from lightmem.evaluation.runs.growth import metrics, run
from lightmem.evaluation.schemas import register_configs


@hydra.main(version_base="1.3", config_path="../conf", config_name="growth")
def main(cfg: DictConfig) -> float | None:
    results = run(cfg)
    exit_on_failures(results, "MTM growth", cfg.out_dir)  # exit 1 when the run recorded failures
    return optimized_metric(metrics(results), cfg)  # the metric a sweep optimises: cfg.optimized_metric


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
