"""One MTM-growth run from its config: the store, the harness (``lightmem.evaluation.benchmarks.growth``), the files
and the logged metrics (``eval/growth.py`` is the thin entry point)."""
from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from lightmem.config import PipelineConfig, SharedRuntime, build_embedder, build_memory, make_run_logger, to_container
from lightmem.datasets import load_locomo, select_conversations
from lightmem.datasets.longmemeval import load_longmemeval
from lightmem.evaluation.benchmarks.growth import run_growth
from lightmem.evaluation.reports.failures import failures_md
from lightmem.evaluation.reports.report import growth_table, plot_growth
from lightmem.metric_logger import quiet_third_party_logs


@dataclass
class GrowthConfig(PipelineConfig):
    """MTM growth along one trajectory (LightMem-SLM §4.5)."""

    locomo_path: str = "${paths.data}/locomo/locomo_dev.json.gz"
    locomo_conversations: Any = "0-4"
    filler_path: str | None = "${paths.data}/longmemeval/longmemeval_s_dev_sample.json.gz"
    sizes: list[int] = field(default_factory=lambda: [100, 1000, 5000, 10_000])
    k: int = 10
    budget: int = 600
    max_questions: int | None = 300  # per checkpoint, spread evenly over the answerable ones
    out_dir: str = "outputs/growth"
    optimized_metric: str | None = None  # e.g. growth/reranking/recall_all@budget@10000


SCHEMA = ("schema_growth", GrowthConfig)  # conf/growth.yaml extends it


def unreached_sizes(rows: list[dict]) -> list[str]:
    """A failure per planned size the trajectory ended before (run_growth's ``note`` rows)."""
    return [f"MTM growth: {r['note']} (lengthen the trajectory: filler_path, locomo_conversations; or drop those sizes)"
            for r in rows if "note" in r]


def run(cfg: DictConfig, quiet: bool = False) -> dict[str, Any]:
    """Grow one store along the trajectory; write results.json, results.md and growth.png to out_dir.

    ``results["failures"]`` names planned sizes the trajectory never reached; the sizes it did reach
    are written either way, and ``eval/growth.py`` exits non-zero when it is not empty.
    """
    quiet_third_party_logs()
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    convs = select_conversations(load_locomo(cfg.locomo_path), cfg.locomo_conversations)
    filler = load_longmemeval(cfg.filler_path) if cfg.filler_path else []
    embedder = build_embedder(cfg)
    store = out / "store"
    shutil.rmtree(store, ignore_errors=True)
    memory = build_memory(cfg, store, embedder=embedder, shared=SharedRuntime(cfg))
    try:
        growth = run_growth(memory, convs, filler, list(cfg.sizes), int(cfg.k), int(cfg.budget), cfg.max_questions,
                            show_progress=sys.stderr.isatty())
    finally:
        memory.close()
        shutil.rmtree(store, ignore_errors=True)
    results = {"growth": growth, "config": to_container(cfg), "failures": unreached_sizes(growth["rows"])}
    (out / "results.json").write_text(json.dumps(results, indent=2))
    table = growth_table(growth["rows"])
    (out / "results.md").write_text(f"# MTM growth (K={cfg.k}, budget {cfg.budget} tokens)\n\n{table}\n"
                                  f"{failures_md(results['failures'])}")
    plot_growth(growth["rows"], out / "growth.png")
    if not quiet:
        print(table)
        print(f"\nwrote {out}/results.json, results.md, growth.png")
    logger = make_run_logger(cfg.logger, out, "growth")
    logger.log_config(results["config"])
    for row in growth["rows"]:
        if "variant" in row:
            logger.log_metrics({f"growth/{row['variant']}/{k}": v for k, v in row.items() if k in GROWTH_METRICS},
                               step=int(row["entries"]))
    logger.finish()
    return results


GROWTH_METRICS = ("recall_all@k", "recall_all@budget", "search_ms_p50", "search_ms_p95")


def metrics(results: dict[str, Any]) -> dict[str, float | None]:
    """The flat numbers of a run: ``growth/<variant>/<metric>@<planned size>`` for every size reached."""
    return {f"growth/{r['variant']}/{k}@{r['size']}": r[k] for r in results["growth"]["rows"] if "variant" in r
            for k in GROWTH_METRICS if k in r}
