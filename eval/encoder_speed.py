"""Encoder speed per backend: single-query embed P50/P95 and ingest turns/s (writes numbers, asserts nothing).

    python eval/encoder_speed.py                                   # torch, onnx, onnx_int8 on LoCoMo dev turns
    python eval/encoder_speed.py backends=[onnx,onnx_int8] n_texts=1000 rounds=3
    python eval/encoder_speed.py busy_processes=1                  # while another process keeps one core busy
"""
from __future__ import annotations

import json
import os
import platform
import random
from pathlib import Path

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig

from lightmem.config import make_run_logger, to_container
from lightmem.datasets import load_conversations
from lightmem.evaluation.encoder_speed import busy_processes, compare_backends, speed_table
from lightmem.evaluation.schemas import register_configs
from lightmem.metric_logger import quiet_third_party_logs


def run(cfg: DictConfig) -> dict:
    quiet_third_party_logs()
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    convs = load_conversations(cfg.corpus)
    rng = random.Random(cfg.seed)
    texts = [t.text for c in convs for t in c.turns]
    queries = list(dict.fromkeys(q.question for c in convs for q in c.qa if q.question.strip()))
    rng.shuffle(texts)
    rng.shuffle(queries)
    texts, queries = texts[: cfg.n_texts or len(texts)], queries[: cfg.n_queries]
    busy = int(cfg.busy_processes)
    with busy_processes(busy):
        rows = compare_backends(lambda b: instantiate(cfg.encoder, backend=b), list(cfg.backends), queries, texts,
                                rounds=int(cfg.rounds), chunk=int(cfg.chunk))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    device = f"CPU ({platform.processor() or platform.machine()}, {cores} cores)"
    results = {"encoder_speed": rows, "device": device, "busy_processes": busy, "n_queries": len(queries), "n_texts": len(texts),
               "config": to_container(cfg)}
    (out / "results.json").write_text(json.dumps(results, indent=2))
    table = speed_table(rows, device, len(queries), len(texts), int(cfg.rounds), busy)
    (out / "results.md").write_text(table + "\n")
    print(table)
    print(f"\nwrote {out}/results.json, results.md")
    logger = make_run_logger(cfg.logger, out, "encoder_speed")
    logger.log_config(results["config"])
    for step, r in enumerate(rows):
        logger.log_metrics({f"encoder_speed/{r['backend']}/{k}": v for k, v in r.items() if isinstance(v, float)}, step=step)
    logger.finish()
    return results


@hydra.main(version_base="1.3", config_path="../conf", config_name="encoder_speed")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
