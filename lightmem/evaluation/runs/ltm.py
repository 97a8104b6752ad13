"""One LTM benchmark run from its config: consolidation growth and cost, search latency idle vs during
consolidation, with ``lightmem.evaluation.benchmarks.ltm`` (``eval/ltm.py`` is the thin entry point)."""
from __future__ import annotations

import json
import platform
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from lightmem.config import PipelineConfig, build_memory, to_container
from lightmem.datasets import load_locomo, select_conversations
from lightmem.evaluation.benchmarks.ltm import consolidation_growth, latency_under_consolidation, plot_latency_split
from lightmem.evaluation.reports.failures import failures_md
from lightmem.evaluation.schemas import LocomoDataConfig
from lightmem.metric_logger import make_run_logger, quiet_third_party_logs


@dataclass
class LTMBenchConfig(PipelineConfig):
    """eval/ltm.py: consolidation growth and cost, search latency idle vs during consolidation."""

    data: LocomoDataConfig = field(default_factory=LocomoDataConfig)
    conversation: Any = 0
    copies: int = 2
    n_queries: int = 100
    k: int = 10
    out_dir: str = "outputs/ltm_bench"
    optimized_metric: str | None = "latency/busy_ms_p95"  # search P95 during consolidation (minimise)


SCHEMA = ("schema_ltm_bench", LTMBenchConfig)  # conf/ltm_bench.yaml extends it


def run(cfg: DictConfig) -> dict[str, Any]:
    """Measure, write results.json / results.md / the plot; ``failures`` lists what could not be measured."""
    quiet_third_party_logs()
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    conv = select_conversations(load_locomo(cfg.data.path), str(cfg.conversation))[0]
    store = out / "store"
    shutil.rmtree(store, ignore_errors=True)
    memory = build_memory(cfg, store)
    try:
        growth = consolidation_growth(memory, conv, conv.conv_id)
        print(json.dumps(growth, indent=1))
        queries = [q.question for q in conv.qa if q.category in (1, 2, 3, 4)][: cfg.n_queries]
        asked_at = max(s.timestamp for s in conv.sessions)
        lat = latency_under_consolidation(memory, conv, conv.conv_id, queries, int(cfg.k), int(cfg.copies), asked_at,
                                          int(cfg.ltm.get("nice", 10)))
    finally:
        memory.close()
        shutil.rmtree(store, ignore_errors=True)
    plot_latency_split(lat, str(out / "latency_consolidation.png"))
    failures = lat.pop("failures")
    summary = {k: v for k, v in lat.items() if not k.endswith("_ms")}
    results = {"growth": growth, "latency": summary, "device": f"CPU ({platform.machine()})", "config": to_container(cfg),
               "failures": failures}
    (out / "results.json").write_text(json.dumps(results, indent=2))
    md = ["| search | P50 ms | P95 ms | searches |", "| --- | --- | --- | --- |",
          f"| idle | {lat['idle_ms_p50']:.1f} | {lat['idle_ms_p95']:.1f} | {len(lat['idle_ms'])} |",
          f"| during consolidation | {lat['busy_ms_p50']:.1f} | {lat['busy_ms_p95']:.1f} | {len(lat['busy_ms'])} |"]
    (out / "results.md").write_text("\n".join(md) + "\n" + failures_md(failures))
    print("\n".join(md))
    logger = make_run_logger(cfg.logger, out, "ltm_bench")
    logger.log_config(results["config"])
    logger.log_metrics(metrics(results))
    logger.finish()
    return results


def metrics(results: dict[str, Any]) -> dict[str, float | None]:
    """The flat numbers of a run, as logged: ``ltm/`` (consolidation growth and cost), ``latency/`` (idle, busy)."""
    return {**{f"ltm/{k}": v for k, v in results["growth"].items() if isinstance(v, (int, float))},
            **{f"latency/{k}": v for k, v in results["latency"].items()}}
