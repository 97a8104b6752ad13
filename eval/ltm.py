"""LTM benchmark: nodes per turn, seconds per consolidation batch, search latency idle vs
during consolidation (writes numbers, asserts nothing).

    python eval/ltm.py                          # LoCoMo dev conversation 0, MiniLM, CPU
    python eval/ltm.py conversation=3 copies=3 n_queries=150
"""
from __future__ import annotations

import json
import platform
import shutil
from pathlib import Path

import hydra
from omegaconf import DictConfig

from lightmem.config import build_memory, to_container
from lightmem.datasets import load_locomo, select_conversations
from lightmem.evaluation.failures import exit_on_failures, failures_md
from lightmem.evaluation.ltm_bench import consolidation_growth, latency_under_consolidation, plot_latency_split
from lightmem.evaluation.schemas import register_configs
from lightmem.metric_logger import make_logger, quiet_third_party_logs


def run(cfg: DictConfig) -> dict:
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
    logger = make_logger(cfg.logger.kind, out, cfg.logger.project, cfg.logger.mode, cfg.logger.name)
    logger.log_config(results["config"])
    logger.log_metrics({**{f"ltm/{k}": v for k, v in growth.items() if isinstance(v, (int, float))},
                        **{f"latency/{k}": v for k, v in summary.items()}})
    logger.finish()
    return results


@hydra.main(version_base="1.3", config_path="../conf", config_name="ltm_bench")
def main(cfg: DictConfig) -> float:
    results = run(cfg)
    exit_on_failures(results, "LTM benchmark", cfg.out_dir)
    return results["latency"]["busy_ms_p95"]


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
