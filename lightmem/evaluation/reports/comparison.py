"""Comparing configurations over seeds (the suite's tables): mean ± std, paired bootstrap against a
reference, markdown tables and the recall-vs-budget curve. ``runs/suite.py`` runs the suite; this module
only reads what the runs wrote (results.json, questions.jsonl), so a killed suite resumes where it stopped.
"""
from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lightmem.metrics.stats import MeanStd, mean_std, paired_bootstrap

# (column, how to read it from a results.json); None when the run has no such number
COLUMNS: dict[str, Any] = {
    "R_all@10": lambda r: r["retrieval"]["overall"].get("recall_all@10"),
    "R_all@budget": lambda r: r["retrieval"]["overall"].get("recall_all@budget"),  # strict: whole memories only
    "R_all credited": lambda r: r["retrieval"]["overall"].get("recall_all@budget_credited"),
    "coverage@budget": lambda r: r["retrieval"]["overall"].get("answer_coverage@budget"),
    "F1": lambda r: r.get("qa", {}).get("overall", {}).get("f1"),
    "BLEU-1": lambda r: r.get("qa", {}).get("overall", {}).get("bleu1"),
    "ROUGE-L": lambda r: r.get("qa", {}).get("overall", {}).get("rouge_l"),
    "judge": lambda r: r.get("qa", {}).get("overall", {}).get("judge_accuracy"),
    "adv. F1": lambda r: r.get("qa", {}).get("adversarial", {}).get("f1"),
    "multi-hop F1": lambda r: r.get("qa", {}).get("by_category", {}).get("1-multi-hop", {}).get("f1"),
    "multi-hop R@budget": lambda r: r["retrieval"]["by_category"].get("1-multi-hop", {}).get("recall_all@budget"),
    "ctx tokens": lambda r: r["cost"].get("context_tokens_per_question", r["cost"].get("tokens@budget")),
    "retr. P50 ms": lambda r: r["latency"].get("search_ms_p50"),
    "retr. P95 ms": lambda r: r["latency"].get("search_ms_p95"),
    "e2e P50 ms": lambda r: r["latency"].get("e2e_ms_p50"),
    "e2e P95 ms": lambda r: r["latency"].get("e2e_ms_p95"),
}
# per-question scores compared by the bootstrap: name -> (reader of a questions.jsonl record)
PAIRED: dict[str, Any] = {
    "R_all@budget": lambda q: q["recall"]["@budget"]["all"] if q["category"] != 5 else None,
    "R_all credited": lambda q: q["recall"].get("@budget_credited", {}).get("all") if q["category"] != 5 else None,
    "coverage@budget": lambda q: q.get("coverage") if q["category"] != 5 else None,
    "F1": lambda q: q["qa"]["f1"] if q.get("qa") and q["category"] != 5 else None,
    "multi-hop F1": lambda q: q["qa"]["f1"] if q.get("qa") and q["category"] == 1 else None,
    "multi-hop R@budget": lambda q: q["recall"]["@budget"]["all"] if q["category"] == 1 else None,
}


@dataclass
class RunResult:
    """One named configuration over its seeds."""

    name: str
    results: list[dict[str, Any]] = field(default_factory=list)  # one results.json per seed
    questions: list[list[dict[str, Any]]] = field(default_factory=list)  # one questions.jsonl per seed

    def column(self, col: str) -> MeanStd:
        vals = [COLUMNS[col](r) for r in self.results]
        return mean_std([float(v) for v in vals if v is not None])

    def per_question(self, metric: str) -> dict[tuple[str, str, int], float]:
        """Question key -> score averaged over seeds (questions missing from a seed are skipped there)."""
        acc: dict[tuple[str, str, int], list[float]] = defaultdict(list)
        for qs in self.questions:
            seen: dict[tuple[str, str], int] = defaultdict(int)
            for q in qs:
                base = (q["conv_id"], q["question"])
                key = (*base, seen[base])
                seen[base] += 1
                v = PAIRED[metric](q)
                if v is not None:
                    acc[key].append(float(v))
        return {k: float(np.mean(v)) for k, v in acc.items()}


def load_run(name: str, seed_dirs: Sequence[Path]) -> RunResult:
    run = RunResult(name)
    for d in seed_dirs:
        run.results.append(json.loads((Path(d) / "results.json").read_text()))
        with open(Path(d) / "questions.jsonl") as fh:
            run.questions.append([json.loads(line) for line in fh if line.strip()])
    return run


def compare(run: RunResult, reference: RunResult, metric: str, resamples: int = 1000, seed: int = 0) -> dict[str, float] | None:
    """Paired bootstrap of ``run - reference`` over the questions both answered; None if none are shared."""
    a, b = run.per_question(metric), reference.per_question(metric)
    keys = sorted(set(a) & set(b))
    if not keys:
        return None
    return paired_bootstrap([a[k] for k in keys], [b[k] for k in keys], resamples, seed).to_dict()


def _cell(ms: MeanStd, digits: int = 3) -> str:
    if ms.n == 0:
        return "-"
    if ms.n == 1:
        return f"{ms.mean:.{digits}f}"
    return f"{ms.mean:.{digits}f} ± {ms.std:.{digits}f}"


def _delta(cmp: dict[str, float] | None) -> str:
    if cmp is None:
        return "-"
    star = "*" if cmp["p_value"] < 0.05 else ""
    return f"{cmp['diff']:+.3f} [{cmp['ci_low']:+.3f}, {cmp['ci_high']:+.3f}] p={cmp['p_value']:.3f}{star}"


def table(runs: Sequence[RunResult], reference: RunResult | None, columns: Sequence[str], paired: Sequence[str],
          resamples: int = 1000) -> tuple[str, dict[str, Any]]:
    """A markdown table (mean ± std over seeds, Δ vs the reference with 95% CI) and its numbers."""
    head = ["run", "seeds", *columns] + [f"Δ {m} vs {reference.name}" for m in paired] if reference else ["run", "seeds", *columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    data: dict[str, Any] = {}
    for run in runs:
        cells = {c: run.column(c) for c in columns}
        row = [run.name, str(len(run.results))] + [_cell(cells[c], 1 if "ms" in c or "tokens" in c else 3) for c in columns]
        cmps = {}
        if reference is not None:
            for m in paired:
                cmps[m] = None if run is reference else compare(run, reference, m, resamples)
                row.append("(reference)" if run is reference else _delta(cmps[m]))
        lines.append("| " + " | ".join(row) + " |")
        data[run.name] = {"columns": {c: vars(v) for c, v in cells.items()}, "vs_reference": cmps}
    return "\n".join(lines), data


def budget_curve(run: RunResult) -> list[tuple[float, float]]:
    """(context tokens, recall_all) at each K and at the budget cut, averaged over seeds."""
    r0 = run.results[0]["retrieval"]["overall"]
    cuts = [k[len("recall_all"):] for k in r0 if k.startswith("recall_all@") and f"tokens{k[len('recall_all'):]}" in r0]
    pts = []
    for cut in cuts:
        toks = np.mean([r["retrieval"]["overall"][f"tokens{cut}"] for r in run.results])
        rec = np.mean([r["retrieval"]["overall"][f"recall_all{cut}"] for r in run.results])
        pts.append((float(toks), float(rec)))
    return pts
