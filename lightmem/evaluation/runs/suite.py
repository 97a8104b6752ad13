"""Run the evaluation suite from conf/suite.yaml in three steps: ``plan`` (every LoCoMo configuration ×
seeds, MTM growth, LongMemEval), ``execute`` (through their runners in this package, resuming finished
parts) and ``report`` (suite.md / suite.json and the plots, with the comparison over seeds of
``lightmem.evaluation.reports.comparison``). ``eval/suite.py`` is the thin entry point."""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra import compose
from omegaconf import DictConfig, OmegaConf

from lightmem.config import make_run_logger, to_container
from lightmem.evaluation.reports.comparison import budget_curve, load_run, table
from lightmem.evaluation.reports.failures import recorded_failures
from lightmem.evaluation.reports.report import growth_table, longmemeval_table, plot_bars, plot_budget_curves
from lightmem.evaluation.runs import growth, locomo, longmemeval
from lightmem.metric_logger import log_results, quiet_third_party_logs

log = logging.getLogger("lightmem.suite")


def _logger_overrides(cfg: DictConfig) -> list[str]:
    """The suite's logger for each run it starts (each run names itself)."""
    return [f"++logger.{k}={v}" for k, v in to_container(cfg.logger).items() if k != "name" and v is not None]


def _done(folder: Path, resume: bool, report_only: bool = False) -> bool:
    """Whether to skip running into ``folder``: finished before without failures (with resume), or only reporting."""
    return report_only or (resume and (folder / "results.json").exists() and not recorded_failures(folder))


def _run_part(failures: dict[str, str], timings: dict[str, float], key: str, folder: Path, skip: bool,
              job: Callable[[], object]) -> None:
    """Run one planned part into ``folder`` unless ``skip``; its seconds land in ``timings[key]`` when it ran.

    What went wrong lands in ``failures[key]``: the exception the part raised (one broken part must
    not cost the others' hours), or the failures its results.json records (fresh or reused).
    """
    if not skip:
        (folder / "results.json").unlink(missing_ok=True)  # a failed rerun must not leave stale numbers behind
        t = time.perf_counter()
        try:
            job()
        except Exception as exc:  # reported in suite.md; the other parts still run
            log.exception("%s failed", key)
            failures[key] = f"{type(exc).__name__}: {exc}"
        timings[key] = time.perf_counter() - t
    if key not in failures and (recorded := recorded_failures(folder)):
        log.error("%s did not complete: %s", key, "; ".join(recorded))
        failures[key] = "; ".join(recorded)


@dataclass
class Part:
    """One planned run of the suite: its key in the report, its folder, and how to run it there."""

    key: str
    folder: Path
    config_name: str  # locomo | growth | longmemeval
    overrides: list[str]
    run_name: str | None = None  # the LoCoMo configuration it belongs to (None: growth, LongMemEval)


RUNNERS = {"locomo": locomo.run, "growth": growth.run, "longmemeval": longmemeval.run}


def plan(cfg: DictConfig) -> list[Part]:
    """Every part the suite's config asks for, in the order they run: each LoCoMo configuration's first
    seed before any further seed (a suite cut short still covers all), then growth and LongMemEval."""
    out, seeds = Path(cfg.out_dir), [int(s) for s in cfg.seeds]
    sections = {name: sec for name, sec in cfg.tables.items() if sec is not None}  # `name: null` drops a section
    needed = sorted({name for sec in sections.values() for name in sec.runs})
    unknown = [n for n in needed if n not in cfg.runs]
    if unknown:
        raise ValueError(f"tables name runs that `runs` does not define: {unknown}")
    parts = []
    for rank, seed in enumerate(seeds):
        for name in needed:
            if rank == 0 or cfg.runs[name].get("stochastic", False):
                folder = out / "locomo" / name / f"seed{seed}"
                overrides = [*cfg.locomo_common, *cfg.runs[name].overrides, f"seed={seed}", f"out_dir={folder}",
                             *_logger_overrides(cfg), f"++logger.name={name}-seed{seed}"]
                parts.append(Part(f"{name}/seed{seed}", folder, "locomo", overrides, name))
    for name in ("growth", "longmemeval"):
        if cfg[name].enabled:
            folder = out / name
            parts.append(Part(name, folder, name, [*cfg[name].overrides, f"out_dir={folder}", *_logger_overrides(cfg)]))
    return parts


def execute(cfg: DictConfig, parts: list[Part]) -> tuple[dict[str, float], dict[str, str]]:
    """Run each part not finished before (``resume``) and not ``report_only``; returns the seconds of the
    parts that ran and what went wrong in any part (a failed part does not stop the others)."""
    timings: dict[str, float] = {}
    failures: dict[str, str] = {}
    report_only = bool(cfg.get("report_only", False))
    for i, part in enumerate(parts, 1):
        skip = _done(part.folder, cfg.resume, report_only)
        if part.run_name is not None:
            log.info("[%d/%d] %s: %s", i, len(parts), part.key, "done before, reused" if skip else " ".join(part.overrides))
        runner = RUNNERS[part.config_name]
        _run_part(failures, timings, part.key, part.folder, skip,
                  lambda p=part, r=runner: r(compose(config_name=p.config_name, overrides=p.overrides), quiet=True))
    return timings, failures


def report(cfg: DictConfig, parts: list[Part], timings: dict[str, float], failures: dict[str, str],
           total: float) -> dict[str, Any]:
    """suite.md, suite.json and the plots in ``out_dir`` from the parts' folders; returns the summary."""
    out = Path(cfg.out_dir)
    seed_dirs: dict[str, list[Path]] = {}
    for part in parts:
        if part.run_name is not None:
            seed_dirs.setdefault(part.run_name, []).append(part.folder)
    runs = {name: load_run(name, [d for d in dirs if (d / "results.json").exists()]) for name, dirs in seed_dirs.items()}
    missing = sorted(name for name, run in runs.items() if not run.results)
    runs = {name: run for name, run in runs.items() if run.results}

    sections_cfg = {name: sec for name, sec in cfg.tables.items() if sec is not None}
    sections, numbers = [], {}
    for sec_name, sec in sections_cfg.items():
        members = [runs[n] for n in sec.runs if n in runs]
        ref_name = sec.get("reference") or cfg.reference  # a table may compare its runs with a run of its own
        md, data = table(members, runs.get(ref_name) if ref_name in sec.runs else None, list(sec.columns),
                         list(sec.paired), int(cfg.bootstrap_resamples))
        sections.append(f"## {sec_name.replace('_', ' ')}\n\n{md}\n")
        numbers[sec_name] = data
        series = {c: [(d["columns"][c]["mean"], d["columns"][c]["std"]) for d in data.values()]
                  for c in sec.paired if all(d["columns"][c]["n"] for d in data.values())}
        if series:
            plot_bars(list(data), series, out / f"{sec_name}.png", sec_name.replace("_", " "))
            sections[-1] += f"\n![{sec_name}]({sec_name}.png)\n"
    plot_budget_curves({n: budget_curve(runs[n]) for n in sections_cfg["baselines"].runs if n in runs} if "baselines" in sections_cfg else {}, out / "recall_vs_budget.png")

    if cfg.growth.enabled and (folder := out / "growth" / "results.json").exists():
        g = json.loads(folder.read_text())["growth"]
        numbers["growth"] = [{k: v for k, v in r.items() if k != "per_question"} for r in g["rows"]]
        sections.append(f"## MTM growth (K={g['k']})\n\n{growth_table(g['rows'])}\n\n![growth](growth/growth.png)\n")
    if cfg.longmemeval.enabled and (folder := out / "longmemeval" / "results.json").exists():
        r = json.loads(folder.read_text())
        numbers["longmemeval"] = r["retrieval"]
        sections.append(f"## LongMemEval\n\n{longmemeval_table(r, sorted(r['config']['ks']))}\n")

    planned = [part.key for part in parts]
    head = (f"# lightmem evaluation suite\n\nreference: `{cfg.reference}`; mean ± std over seeds where a run is stochastic; "
            f"Δ = paired bootstrap ({cfg.bootstrap_resamples} resamples) of run − reference over shared questions, "
            f"95% CI, two-sided p (* p < 0.05).\nLoCoMo overrides: `{' '.join(cfg.locomo_common)}`. "
            f"This invocation took {total / 60:.1f} min (runs reused from earlier invocations not counted).\n")
    if missing:
        sections.append("## not run\n\n" + ", ".join(f"`{m}`" for m in missing) + " (no finished seed; rerun the same command to resume)\n")
    if failures:
        sections.append(f"## failed runs\n\n{len(failures)} of {len(planned)} planned runs did not complete, so the suite exits "
                        "non-zero; rerun the same command to retry them (with `resume=true` the finished runs are reused).\n\n"
                        + "\n".join(f"- `{k}`: {v}" for k, v in failures.items()) + "\n")
    (out / "suite.md").write_text(head + "\n" + "\n".join(sections) + "\n![recall vs budget](recall_vs_budget.png)\n")
    summary = {"tables": numbers, "timings_s": timings, "planned": planned, "failures": failures, "total_s": total,
               "config": OmegaConf.to_container(cfg, resolve=True)}
    (out / "suite.json").write_text(json.dumps(summary, indent=2, default=str))
    flat = {f"{sec}/{run}/{col}": v["mean"] for sec, d in numbers.items() if isinstance(d, dict) and sec != "longmemeval"
            for run, rd in d.items() for col, v in rd["columns"].items() if v["n"]}
    log_results(make_run_logger(cfg.logger, out, "suite"), summary["config"], flat, out / "suite.json")
    return summary


def run(cfg: DictConfig) -> dict[str, Any]:
    """Plan the suite's parts, run them, then write suite.md, suite.json and the plots to ``out_dir``.

    A part that fails does not stop the others; it is listed in suite.md's "failed runs" section.

    Args:
        cfg: The composed suite config (conf/suite.yaml).

    Returns:
        The summary written to suite.json: ``tables`` (the numbers), ``timings_s``, ``planned`` (every
        part's key), ``failures`` (key -> what went wrong; empty when everything completed), ``total_s``.
    """
    quiet_third_party_logs()
    Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    parts = plan(cfg)
    timings, failures = execute(cfg, parts)
    return report(cfg, parts, timings, failures, time.perf_counter() - t_start)


HEADLINE = ("R_all@10", "R_all@budget", "F1", "retr. P50 ms")  # the reference run's numbers in the closing summary


def _cell(column: str, value: float) -> str:
    return f"{column.removesuffix(' ms')} {value:.1f} ms" if column.endswith(" ms") else f"{column} {value:.3f}"


def _reference_line(summary: dict[str, Any]) -> str:
    cfg = summary["config"]
    ref = cfg["reference"]
    cols: dict[str, dict[str, float]] = {}
    for sec in cfg.get("tables") or {}:
        cols.update((summary["tables"].get(sec) or {}).get(ref, {}).get("columns", {}))
    cells = [_cell(c, cols[c]["mean"]) for c in HEADLINE if cols.get(c, {}).get("n")]
    if not cells:
        return f"LoCoMo `{ref}` (reference): no numbers (it did not finish, or no table lists it)"
    return f"LoCoMo `{ref}` (reference): " + ", ".join(cells)


def _growth_line(rows: list[dict[str, Any]]) -> str | None:
    by_size: dict[int, dict[str, float]] = {}
    for r in rows:
        if "variant" in r:
            by_size.setdefault(int(r["size"]), {})[r["variant"]] = r["recall_all@budget"]
    if not by_size:
        return None
    names = " / ".join(next(iter(by_size.values())))
    cells = [f"{size} entries " + " / ".join(f"{v:.3f}" for v in variants.values()) for size, variants in by_size.items()]
    return f"MTM growth R_all@budget, {names}: " + "; ".join(cells)


def _longmemeval_line(retrieval: dict[str, Any]) -> str:
    overall = retrieval.get("overall", {})
    ks = sorted(int(k.rsplit("@", 1)[1]) for k in overall if k.startswith("session_recall_all@"))
    cells = []
    if ks:
        k = 10 if 10 in ks else ks[-1]
        cells.append(f"session R_all@{k} {overall[f'session_recall_all@{k}']:.3f}")
    cells += [f"{name} {overall[key]:.3f}" for key, name in (("qa_f1", "QA F1"), ("qa_accuracy", "QA accuracy"))
              if overall.get(key) is not None]
    return f"LongMemEval ({overall.get('n', 0)} questions): " + (", ".join(cells) or "no numbers")


def closing_summary(summary: dict[str, Any], report: Path) -> str:
    """The few lines an entry point prints when the suite ends: where the report is, headline numbers, failures.

    Args:
        summary: What ``run`` returned.
        report: The path of suite.md.

    Returns:
        Plain text; when runs failed, its last lines say how many and point to suite.md's "failed runs".
    """
    tables = summary["tables"]
    lines = [f"lightmem suite: {summary['total_s'] / 60:.1f} min; report: {report} (suite.json and plots beside it)",
             "  " + _reference_line(summary)]
    if (growth := _growth_line(tables.get("growth") or [])) is not None:
        lines.append("  " + growth)
    if "longmemeval" in tables:
        lines.append("  " + _longmemeval_line(tables["longmemeval"]))
    failures, planned = summary["failures"], summary["planned"]
    if failures:
        lines.append(f"FAILED: {len(failures)} of {len(planned)} planned runs did not complete: {', '.join(failures)}")
        lines.append(f"  see the \"failed runs\" section of {report}")
    else:
        lines.append(f"all {len(planned)} planned runs completed")
    return "\n".join(lines)
