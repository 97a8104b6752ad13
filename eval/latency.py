"""search() latency at 100 / 1,000 / 10,000 items of one user (writes numbers, asserts nothing).

    python eval/latency.py                                   # CPU, MiniLM, exact FAISS
    python eval/latency.py store.faiss_device=cuda encoder.backend=torch encoder.device=cuda   # GPU machine (faiss-gpu)
    python eval/latency.py encoder.backend=onnx_int8                     # the encoder on ONNX Runtime, int8
"""
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lightmem.evaluation.runs.common import optimized_metric
from lightmem.evaluation.runs.latency import metrics, run
from lightmem.evaluation.schemas import register_configs


@hydra.main(version_base="1.3", config_path="../conf", config_name="latency")
def main(cfg: DictConfig) -> float | None:
    results = run(cfg)
    return optimized_metric(metrics(results), cfg)  # the metric a sweep optimises: cfg.optimized_metric


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
