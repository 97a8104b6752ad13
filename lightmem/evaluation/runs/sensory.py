"""One write-path measurement run from its config: compression, topic segmentation and ingestion cost with
``lightmem.evaluation.benchmarks.sensory`` (``eval/sensory.py`` is the thin entry point)."""
from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from lightmem.config import (
    PipelineConfig,
    SharedRuntime,
    build_embedder,
    build_memory,
    build_sensory_stage,
    compose_option,
    to_container,
)
from lightmem.datasets import load_conversations, load_locomo, select_conversations
from lightmem.evaluation.benchmarks.sensory import compression_eval, ingest_eval, segmentation_eval, user_stream
from lightmem.evaluation.reports.report import plot_segmentation, sensory_tables
from lightmem.metric_logger import make_run_logger, quiet_third_party_logs


@dataclass
class SensoryBenchConfig(PipelineConfig):
    """eval/sensory.py: compression, segmentation and ingestion cost of the sensory stage."""

    parts: list[str] = field(default_factory=lambda: ["compression", "segmentation", "ingest"])
    locomo_path: str = "${paths.data}/locomo/locomo_dev.json.gz"
    locomo_conversations: Any = "0-4"
    rates: list[float] = field(default_factory=lambda: [0.5, 0.6, 0.7])
    lme_path: str = "${paths.data}/longmemeval/longmemeval_s_dev_sample.json.gz"
    lme_instances: Any = "0-9"
    seg_methods: list[str] = field(default_factory=lambda: ["hybrid", "attention", "similarity"])
    seg_rates: list[float] = field(default_factory=lambda: [0.6])
    seg_taus: list[float] = field(default_factory=lambda: [0.3])
    ingest_conversation: Any = 0
    ingest_writers: list[str] = field(default_factory=lambda: ["turn", "extractive", "experimental/generative"])
    ingest_sensory: list[str] = field(default_factory=lambda: ["none", "lightmem"])
    out_dir: str = "outputs/sensory"
    optimized_metric: str | None = None


SCHEMA = ("schema_sensory_bench", SensoryBenchConfig)  # conf/sensory_bench.yaml extends it


CONF = Path(__file__).resolve().parents[3] / "conf"  # the repository's conf/ (a running Hydra app uses its own)


def _segmentation(cfg: DictConfig, embedder, shared: SharedRuntime) -> list[dict]:
    convs = select_conversations(load_conversations(cfg.lme_path), cfg.lme_instances)
    streams = [user_stream(c) for c in convs]
    rows = []
    for rate in cfg.seg_rates:
        for method in cfg.seg_methods:
            for tau in ([cfg.seg_taus[0]] if method == "attention" else cfg.seg_taus):
                node = OmegaConf.merge(cfg.sensory, {"stm_threshold": 0, "compress": {"rate": rate},
                                                     "segment": {"method": method, "tau": tau, "session_boundaries": False}})
                wp = build_sensory_stage(node, embedder, shared)
                exact, near = segmentation_eval(wp, streams), segmentation_eval(wp, streams, tolerance=1)
                rows.append({"rate": rate, "method": method, "tau": tau if method != "attention" else None, **exact,
                             "recall_tol1": near["recall"], "precision_tol1": near["precision"], "f1_tol1": near["f1"],
                             "instances": len(streams)})
                print(f"segmentation r={rate} {method} tau={tau}: recall {exact['recall']:.3f} precision {exact['precision']:.3f}",
                      flush=True)
    return rows


def _ingest(cfg: DictConfig, embedder, shared: SharedRuntime) -> list[dict]:
    conv = select_conversations(load_locomo(cfg.locomo_path), [cfg.ingest_conversation])[0]
    rows = []
    for sensory in cfg.ingest_sensory:
        for writer in cfg.ingest_writers:
            run_cfg = cfg.copy()
            with open_dict(run_cfg):
                run_cfg.sensory = compose_option(CONF, "sensory_bench", "sensory", sensory)
                run_cfg.writer = compose_option(CONF, "sensory_bench", "writer", writer)
            with tempfile.TemporaryDirectory() as tmp:
                r = ingest_eval(lambda cid, c=run_cfg, t=tmp: build_memory(c, Path(t) / cid, embedder=embedder, shared=shared), conv)
            rows.append({"sensory": sensory, "writer": writer, "conversation": conv.conv_id, **r})
            print(f"ingest sensory={sensory} writer={writer}: {r['turns_per_s']:.1f} turns/s, {r['llm_calls']} LLM calls", flush=True)
    return rows


PARTS = ("compression", "segmentation", "ingest")


def run(cfg: DictConfig) -> dict[str, Any]:
    """Measure the configured ``parts``; a part name that is not one of PARTS is an error, not a silent no-op."""
    unknown = [p for p in cfg.parts if p not in PARTS]
    if unknown:
        raise ValueError(f"parts must be among {list(PARTS)}, got {unknown}")
    quiet_third_party_logs()
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    embedder = build_embedder(cfg)
    shared = SharedRuntime(cfg)
    results: dict = {}
    if "compression" in cfg.parts:
        comp = shared.compressor(cfg.sensory.compressor)
        convs = select_conversations(load_locomo(cfg.locomo_path), cfg.locomo_conversations)
        results["compression"] = [compression_eval(comp, convs, float(r)) for r in cfg.rates]
    if "segmentation" in cfg.parts:
        results["segmentation"] = _segmentation(cfg, embedder, shared)
    if "ingest" in cfg.parts:
        results["ingest"] = _ingest(cfg, embedder, shared)
    results["config"] = to_container(cfg)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    tables = sensory_tables(results)
    (out / "results.md").write_text(tables + "\n")
    if results.get("segmentation"):
        plot_segmentation(results["segmentation"], out / "segmentation.png")
    print(tables)
    print(f"\nwrote {out}/results.json, results.md" + (", segmentation.png" if results.get("segmentation") else ""))
    logger = make_run_logger(cfg.logger, out, "sensory")
    logger.log_config(results["config"])
    for part in PARTS:
        for i, row in enumerate(results.get(part, [])):
            logger.log_metrics({f"{part}/{k}": v for k, v in row.items() if isinstance(v, (int, float))}, step=i)
    logger.finish()
    shutil.rmtree(out / "stores", ignore_errors=True)
    return results


def metrics(results: dict[str, Any]) -> dict[str, float | None]:
    """The flat numbers of a run: ``<part>/<measure>@<row>`` for each measured part's rows, in order."""
    return {f"{part}/{k}@{i}": v for part in PARTS for i, row in enumerate(results.get(part, []))
            for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
