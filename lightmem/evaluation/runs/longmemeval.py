"""One LongMemEval run from its config: the systems under test, the harness (``lightmem.evaluation.harnesses.longmemeval``),
the files and the logged metrics (``eval/longmemeval.py`` is the thin entry point)."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from lightmem.config import SharedRuntime, build_embedder, build_memory, make_run_logger, to_container
from lightmem.datasets.formats import Conversation
from lightmem.datasets.longmemeval import load_longmemeval, pad_haystacks
from lightmem.evaluation.harnesses.longmemeval import evaluate_longmemeval
from lightmem.evaluation.reports.failures import failures_md, qa_failures, qa_usage, usage_delta
from lightmem.evaluation.reports.report import longmemeval_table, plot_longmemeval
from lightmem.evaluation.runs.common import qa_options
from lightmem.metric_logger import log_results, quiet_third_party_logs
from lightmem.metrics.stats import spread
from lightmem.models.embedder import MemoEmbedder
from lightmem.seeding import seed_everything


def select_instances(instances: list[Conversation], max_instances: int | None, types: list[str] | None,
                     splits: list[str] | None = None) -> list[Conversation]:
    if splits:
        from lightmem.datasets.splits import split_of

        unknown = set(splits) - {"train", "val", "test"}
        if unknown:
            raise ValueError(f"data.splits takes train, val and test, not {sorted(unknown)}")
        instances = [i for i in instances if split_of(i.conv_id) in set(splits)]
    if types:
        instances = [i for i in instances if str(i.qa[0].category) in set(types)]
    return spread(instances, max_instances)


def run(cfg: DictConfig, quiet: bool = False) -> dict[str, Any]:
    """Evaluate and write results.json, questions.jsonl and results.md to out_dir.

    ``results["failures"]`` lists what did not complete (QA calls whose backend failed); the
    numbers are written either way, and ``eval/longmemeval.py`` exits non-zero when it is not empty.
    """
    quiet_third_party_logs()
    seed_everything(int(cfg.seed))
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    loaded = load_longmemeval(cfg.data.path)
    instances = select_instances(loaded, cfg.data.max_instances, cfg.data.types, cfg.data.get("splits"))
    embedder = build_embedder(cfg)
    pad = cfg.data.get("pad_sessions")
    if pad:  # fillers recur across questions: each is encoded once
        instances, embedder = pad_haystacks(instances, loaded, int(pad), seed=int(cfg.seed)), MemoEmbedder(embedder)
    shared = SharedRuntime(cfg)
    stores = out / "stores"
    shutil.rmtree(stores, ignore_errors=True)

    def make(qid: str):
        return build_memory(cfg, stores / qid, embedder=embedder, shared=shared)

    ks = sorted(int(k) for k in cfg.ks)
    opts = qa_options(cfg, shared)
    before = qa_usage(opts)
    try:
        results, records = evaluate_longmemeval(make, instances, ks, int(cfg.budget), opts, show_progress=sys.stderr.isatty(),
                                                seed=int(cfg.seed))
    finally:
        shutil.rmtree(stores, ignore_errors=True)
    if opts is not None:
        results["cost"]["llm_qa"] = usage_delta(before, qa_usage(opts))
    results["config"] = to_container(cfg)
    results["failures"] = qa_failures(results["cost"].get("llm_qa", {}))
    (out / "results.json").write_text(json.dumps(results, indent=2))
    with open(out / "questions.jsonl", "w") as fh:
        for r in records:
            fh.write(json.dumps(r.__dict__) + "\n")
    table = longmemeval_table(results, ks)
    padded = f", haystacks padded to {pad} sessions" if pad else ""
    (out / "results.md").write_text(f"# LongMemEval ({Path(cfg.data.path).name}, {len(instances)} questions{padded})\n\n{table}\n"
                                  f"{failures_md(results['failures'])}")
    plot_longmemeval(results, ks, out / "recall.png")
    if not quiet:
        print(table)
        print(f"\nwrote {out}/results.json, results.md, questions.jsonl, recall.png")
    log_results(make_run_logger(cfg.logger, out, "longmemeval"), results["config"], metrics(results), out / "results.json")
    return results


def metrics(results: dict[str, Any]) -> dict[str, float | None]:
    """The flat numbers of a run, as logged: ``lme/`` and the overall retrieval (and QA) metric."""
    return {f"lme/{k}": v for k, v in results["retrieval"]["overall"].items()}
