"""One search-latency run from its config: one user's store grown to each size, searched and timed with
``lightmem.evaluation.benchmarks.latency`` (``eval/latency.py`` is the thin entry point)."""
from __future__ import annotations

import json
import platform
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from lightmem.config import PipelineConfig, build_memory, to_container
from lightmem.datasets import load_conversations
from lightmem.evaluation.benchmarks.latency import corpus_and_queries, latency_table, measure_growth, plot_latency
from lightmem.memory import Memory
from lightmem.metric_logger import make_run_logger, quiet_third_party_logs
from lightmem.retrieval.stage2 import Stage1Selector


@dataclass
class LatencyBenchConfig(PipelineConfig):
    sizes: list[int] = field(default_factory=lambda: [100, 1000, 10_000])
    n_queries: int = 200
    k: int = 10
    budget: int | None = None  # a token budget per search (what build_context packs: excerpts, squeezing); None: best K
    corpus: list[str] = field(
        default_factory=lambda: [
            "${paths.data}/locomo/locomo_dev.json.gz",
            "${paths.data}/longmemeval/longmemeval_oracle_dev.json.gz",
        ]
    )
    out_dir: str = "outputs/latency"
    seed: int = 0
    optimized_metric: str | None = "latency/search_ms_p95"  # at the largest size (minimise)


SCHEMA = ("schema_latency", LatencyBenchConfig)  # conf/latency.yaml extends it


def _device(cfg: DictConfig, backend: str) -> tuple[str, callable]:
    import torch

    sync = (lambda: None)
    threads = f"{torch.get_num_threads()} torch threads" if backend == "torch" else f"encoder on onnxruntime ({backend})"
    desc = f"CPU ({platform.processor() or platform.machine()}, {threads})"
    if torch.cuda.is_available() and (str(cfg.encoder.get("device", "")) in ("auto", "cuda") or cfg.store.get("faiss_device", "cpu") != "cpu"):
        desc = f"{torch.cuda.get_device_name(0)}; encoder on {cfg.encoder.get('device')}, faiss on {cfg.store.get('faiss_device', 'cpu')}"
        sync = torch.cuda.synchronize
    return desc, sync


def run(cfg: DictConfig) -> dict[str, Any]:
    quiet_third_party_logs()
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    convs = [c for path in cfg.corpus for c in load_conversations(path)]
    turns, queries = corpus_and_queries(convs, max(cfg.sizes), cfg.n_queries, cfg.seed)
    store = out / "store"
    shutil.rmtree(store, ignore_errors=True)
    memory = build_memory(cfg, store)
    device, sync = _device(cfg, getattr(memory.embedder, "backend", "torch"))
    try:
        rows = measure_growth(memory, turns, queries, list(cfg.sizes), int(cfg.k), sync=sync, budget=cfg.budget,
                              show_progress=sys.stderr.isatty(),
                              other=lambda: Memory.open(store, embedder=memory.embedder, selector=Stage1Selector(),
                                                          background_index=False))
    finally:
        memory.close()
        shutil.rmtree(store, ignore_errors=True)
    results = {"latency": rows, "device": device, "config": to_container(cfg)}
    (out / "results.json").write_text(json.dumps(results, indent=2))
    table = latency_table(rows, device)
    (out / "results.md").write_text(table + "\n")
    plot_latency(rows, out / "latency.png")
    print(table)
    print(f"\nwrote {out}/results.json, results.md, latency.png")
    logger = make_run_logger(cfg.logger, out, "latency")
    logger.log_config(results["config"])
    for r in rows:
        logger.log_metrics({f"latency/{k}": v for k, v in r.items()}, step=r["items"])
    logger.finish()
    return results


def metrics(results: dict[str, Any]) -> dict[str, float | None]:
    """The flat numbers of a run: ``latency/<measure>@<items>`` at every size, and ``latency/<measure>`` at the largest."""
    rows = results["latency"]
    flat = {f"latency/{k}@{r['items']}": v for r in rows for k, v in r.items() if k != "items"}
    flat.update({f"latency/{k}": v for k, v in (rows[-1] if rows else {}).items() if k != "items"})
    return flat
