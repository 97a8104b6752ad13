"""One agent-loop run from its config: the arms, the harness (``lightmem.evaluation.benchmarks.agent_loop``), the files
and the logged metrics (``eval/agent_loop.py`` is the thin entry point)."""
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
from lightmem.evaluation.benchmarks.agent_loop import ARMS, answer_records, pick_instances, report, run_agent_loop
from lightmem.evaluation.reports.failures import failures_md, qa_failures, qa_usage, usage_delta
from lightmem.evaluation.runs.common import qa_options
from lightmem.evaluation.schemas import QAConfig
from lightmem.metric_logger import log_results, quiet_third_party_logs
from lightmem.retrieval.composer import DEFAULT_BUDGET


@dataclass
class AgentLoopConfig(PipelineConfig):
    """An agent's own exchanges saved through the write policies (the arms), questions asked in order."""

    locomo_path: str | None = "${paths.data}/locomo/locomo_dev.json.gz"
    locomo_conversations: Any = "3-4"  # the policy was chosen on 0-2
    categories: list[int] = field(default_factory=lambda: [1, 2, 3, 4])
    max_questions: int | None = None  # per LoCoMo conversation, spread evenly
    longmemeval_path: str | None = None  # e.g. ${paths.data}/longmemeval/longmemeval_oracle_dev.json.gz
    longmemeval_instances: int | None = 60  # spread evenly over the file
    longmemeval_splits: list[str] | None = None  # e.g. [test]: the questions no checkpoint trained or chose on
    arms: list[str] = field(default_factory=lambda: list(ARMS))
    budget: int = DEFAULT_BUDGET
    tell_every: int = 3  # every third LoCoMo session is told through the loop (the others ingested as a dialogue)
    thanks_every: int = 4  # every fourth exchange ends with "Thanks!" / "You're welcome!"
    vector_cache: str | None = None
    qa: QAConfig = field(default_factory=QAConfig)  # qa.enabled=true llm=qwen15: the reader answers every prompt (F1)
    out_dir: str = "outputs/agent_loop"
    # what a sweeper maximises: the recall of what was told through the loop (a policy storing nothing loses it; one
    # storing everything packs echoes that push it down); read echo_share beside it
    optimized_metric: str | None = "agent_loop/locomo/agent/told_recall_all"


SCHEMA = ("schema_agent_loop", AgentLoopConfig)


def run(cfg: DictConfig, quiet: bool = False) -> dict[str, Any]:
    """Run every arm; write results.json, records.jsonl and results.md to out_dir."""
    quiet_third_party_logs()
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    locomo = select_conversations(load_locomo(cfg.locomo_path), cfg.locomo_conversations) if cfg.locomo_path else []
    lme = []
    if cfg.longmemeval_path:
        from lightmem.evaluation.runs.longmemeval import select_instances

        lme = pick_instances(select_instances(load_longmemeval(cfg.longmemeval_path), None, None,
                                              cfg.get("longmemeval_splits")), cfg.longmemeval_instances)
    if not locomo and not lme:
        raise ValueError("nothing to run: set locomo_path and/or longmemeval_path")
    embedder = build_embedder(cfg)
    shared = SharedRuntime(cfg)
    stores = out / "stores"
    shutil.rmtree(stores, ignore_errors=True)

    def make(name: str):
        return build_memory(cfg, stores / name, embedder=embedder, shared=shared)

    try:
        loop = run_agent_loop(make, locomo, lme, list(cfg.arms), int(cfg.budget), list(cfg.categories),
                              int(cfg.tell_every), int(cfg.thanks_every), cfg.max_questions,
                              show_progress=sys.stderr.isatty())
    finally:
        shutil.rmtree(stores, ignore_errors=True)
    opts = qa_options(cfg, shared)
    failures: list[str] = []
    if opts is not None:  # the same reader answers every arm's prompts, in one pass
        before = qa_usage(opts)
        answer_records(loop["records"], opts)
        loop.update(report(loop["records"]))
        failures = qa_failures(usage_delta(before, qa_usage(opts)))
    results = {"summary": loop["summary"], "paired": loop["paired"], "config": to_container(cfg), "failures": failures}
    (out / "results.json").write_text(json.dumps(results, indent=2))
    with open(out / "records.jsonl", "w") as fh:
        for dataset, by_arm in loop["records"].items():
            for arm, recs in by_arm.items():
                for r in recs:
                    fh.write(json.dumps({"dataset": dataset, "arm": arm, **r}) + "\n")  # with its prompt: what was scored
    table = results_table(results)
    (out / "results.md").write_text(f"# Agent loop (budget {cfg.budget} tokens)\n\n{table}\n{failures_md(results['failures'])}")
    if not quiet:
        print(table)
        print(f"\nwrote {out}/results.json, results.md, records.jsonl")
    log_results(make_run_logger(cfg.logger, out, "agent_loop"), results["config"], metrics(results), out / "results.json")
    return results


def _fmt(v: Any) -> str:
    return "–" if v is None or v != v else f"{v:.3f}"


def results_table(results: dict[str, Any]) -> str:
    """One row per dataset, arm and category: questions, strict recall (and its paired change against ``none``
    overall), coverage, echo share of the packed lines, told questions' recall, prompt tokens."""
    answered = any("f1" in b for by_arm in results["summary"].values() for cats in by_arm.values() for b in cats.values())
    rows = ["| data | arm | category | questions | strict R_all | Δ vs none (95% CI) | coverage | echo share | told q. | "
            "told R_all | tokens |" + (" reader F1 | F1 Δ vs none (95% CI) |" if answered else ""),
            "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if answered else "")]
    for dataset, by_arm in results["summary"].items():
        for arm, cats in by_arm.items():
            for cat, b in cats.items():
                delta = ""
                if cat == "overall" and arm in results["paired"].get(dataset, {}):
                    d = results["paired"][dataset][arm]
                    delta = f"{d['delta']:+.3f} ({d['low']:+.3f}, {d['high']:+.3f})"
                row = (f"| {dataset} | {arm} | {cat} | {b['questions']} | {_fmt(b['recall_all'])} | {delta} | "
                       f"{_fmt(b['coverage'])} | {_fmt(b['echo_share'])} | {b['told_questions']} | "
                       f"{_fmt(b['told_recall_all'])} | {b['tokens']:.0f} |")
                if answered:
                    f1 = results["paired"].get(dataset, {}).get(f"{arm}_f1") if cat == "overall" else None
                    row += f" {_fmt(b.get('f1'))} | " + (f"{f1['delta']:+.3f} ({f1['low']:+.3f}, {f1['high']:+.3f})" if f1 else "") + " |"
                rows.append(row)
    return "\n".join(rows)


def metrics(results: dict[str, Any]) -> dict[str, float | None]:
    """``agent_loop/<dataset>/<arm>/<metric>`` overall, and ``.../delta_recall_all`` against the ``none`` arm."""
    out: dict[str, float | None] = {}
    for dataset, by_arm in results["summary"].items():
        for arm, cats in by_arm.items():
            for k in ("recall_all", "coverage", "echo_share", "told_recall_all", "f1"):
                if k in cats["overall"]:
                    out[f"agent_loop/{dataset}/{arm}/{k}"] = cats["overall"][k]
    for dataset, by_arm in results["paired"].items():
        for arm, d in by_arm.items():
            name = f"{arm[:-3]}/delta_f1" if arm.endswith("_f1") else f"{arm}/delta_recall_all"
            out[f"agent_loop/{dataset}/{name}"] = d["delta"]
    return out
