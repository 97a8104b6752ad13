"""Encoder speed per backend: single-query embed P50/P95 and ingest turns/s (writes numbers, asserts nothing).

    python eval/encoder_speed.py                                   # torch, onnx, onnx_int8 on LoCoMo dev turns
    python eval/encoder_speed.py backends=[onnx,onnx_int8] n_texts=1000 rounds=3
    python eval/encoder_speed.py busy_processes=1                  # while another process keeps one core busy
"""
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lightmem.evaluation.runs.common import optimized_metric
from lightmem.evaluation.runs.encoder_speed import metrics, run
from lightmem.evaluation.schemas import register_configs


@hydra.main(version_base="1.3", config_path="../conf", config_name="encoder_speed")
def main(cfg: DictConfig) -> float | None:
    results = run(cfg)
    return optimized_metric(metrics(results), cfg)  # the metric a sweep optimises: cfg.optimized_metric


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
