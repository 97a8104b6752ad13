"""Write-path measurements: compression, topic segmentation, ingestion cost (writes numbers).

    python eval/sensory.py                                         # all parts, defaults
    python eval/sensory.py parts=[segmentation] lme_instances=0-39 seg_taus=[0.2,0.3,0.4]
    python eval/sensory.py parts=[ingest] llm=smollm2 ingest_writers=[experimental/generative]   # a real SLM
"""
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lightmem.evaluation.runs.common import optimized_metric
from lightmem.evaluation.runs.sensory import metrics, run
from lightmem.evaluation.schemas import register_configs


@hydra.main(version_base="1.3", config_path="../conf", config_name="sensory_bench")
def main(cfg: DictConfig) -> float | None:
    results = run(cfg)
    return optimized_metric(metrics(results), cfg)  # the metric a sweep optimises: cfg.optimized_metric


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
