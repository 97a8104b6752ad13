"""One encoder-speed run from its config: each backend's query and ingest speed, measured interleaved by
``lightmem.evaluation.benchmarks.encoder_speed`` (``eval/encoder_speed.py`` is the thin entry point)."""
from __future__ import annotations

import json
import os
import platform
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig

from lightmem.config import PathsConfig, logger_field, make_run_logger, to_container
from lightmem.datasets import load_conversations
from lightmem.evaluation.benchmarks.encoder_speed import busy_processes, compare_backends, speed_table
from lightmem.metric_logger import quiet_third_party_logs


@dataclass
class EncoderSpeedConfig:
    """eval/encoder_speed.py: query and ingest speed of the encoder's backends, measured interleaved."""

    encoder: Any = None
    paths: PathsConfig = field(default_factory=PathsConfig)
    logger: Any = logger_field()
    backends: list[str] = field(default_factory=lambda: ["torch", "onnx", "onnx_int8"])
    corpus: str = "${paths.data}/locomo/locomo_dev.json.gz"
    n_queries: int = 200
    n_texts: int | None = None  # None: every turn of the corpus
    rounds: int = 2
    chunk: int = 256
    busy_processes: int = 0  # other processes keeping a core busy during the measurement (a loaded machine)
    seed: int = 0
    out_dir: str = "outputs/encoder_speed"
    optimized_metric: str | None = None  # e.g. encoder_speed/onnx_int8/query_ms_p50


SCHEMA = ("schema_encoder_speed", EncoderSpeedConfig)  # conf/encoder_speed.yaml extends it


def run(cfg: DictConfig) -> dict[str, Any]:
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


def metrics(results: dict[str, Any]) -> dict[str, float | None]:
    """The flat numbers of a run, as logged: ``encoder_speed/<backend>/<measure>``."""
    return {f"encoder_speed/{r['backend']}/{k}": v for r in results["encoder_speed"] for k, v in r.items() if isinstance(v, float)}
