"""Run the evaluation suite from conf/suite.yaml: every LoCoMo configuration × seeds, MTM growth,
LongMemEval; then suite.md / suite.json and the plots. ``eval/suite.py`` is the thin entry point."""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from hydra import compose
from omegaconf import DictConfig, OmegaConf

from lightmem.config import make_run_logger
from lightmem.evaluation.growth_run import run_growth_cfg
from lightmem.evaluation.locomo_run import run_locomo
from lightmem.evaluation.longmemeval_run import run_lme
from lightmem.evaluation.report import growth_table, longmemeval_table, plot_bars, plot_budget_curves
from lightmem.evaluation.suite import budget_curve, load_run, table
from lightmem.metric_logger import log_results

log = logging.getLogger("lightmem.suite")


def _logger_overrides(cfg: DictConfig) -> list[str]:
    lg = cfg.logger
    return [f"logger.kind={lg.kind}", f"logger.project={lg.project}", f"logger.mode={lg.mode}"]


def _done(folder: Path, resume: bool, report_only: bool = False) -> bool:
    """Whether to skip running into ``folder``: finished before (with resume), or only reporting."""
    return report_only or (resume and (folder / "results.json").exists())


def run_suite(cfg: DictConfig) -> dict[str, Any]:
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    failures: dict[str, str] = {}
    seeds = [int(s) for s in cfg.seeds]
    report_only = bool(cfg.get("report_only", False))
    sections_cfg = {name: sec for name, sec in cfg.tables.items() if sec is not None}  # `name: null` drops a section
    needed = sorted({name for sec in sections_cfg.values() for name in sec.runs})
    unknown = [n for n in needed if n not in cfg.runs]
    if unknown:
        raise ValueError(f"tables name runs that `runs` does not define: {unknown}")
    seed_dirs: dict[str, list[Path]] = {}
    plan = []  # every configuration's first seed before any further seed: a suite cut short still covers all
    for rank, seed in enumerate(seeds):
        for name in needed:
            if rank == 0 or cfg.runs[name].get("stochastic", False):
                plan.append((name, seed))
    for i, (name, seed) in enumerate(plan, 1):
        spec = cfg.runs[name]
        folder = out / "locomo" / name / f"seed{seed}"
        seed_dirs.setdefault(name, []).append(folder)
        if _done(folder, cfg.resume, report_only):
            log.info("[%d/%d] %s seed %d: done before, reused", i, len(plan), name, seed)
            continue
        overrides = [*cfg.locomo_common, *spec.overrides, f"seed={seed}", f"out_dir={folder}", *_logger_overrides(cfg),
                     f"logger.name={name}-seed{seed}"]
        log.info("[%d/%d] %s seed %d: %s", i, len(plan), name, seed, " ".join(overrides))
        t = time.perf_counter()
        try:
            run_locomo(compose(config_name="locomo", overrides=overrides), quiet=True)
        except Exception as exc:  # one broken configuration must not cost the others' hours
            log.exception("%s seed %d failed", name, seed)
            failures[f"{name}/seed{seed}"] = f"{type(exc).__name__}: {exc}"
        timings[f"{name}/seed{seed}"] = time.perf_counter() - t
    runs = {name: load_run(name, [d for d in dirs if (d / "results.json").exists()]) for name, dirs in seed_dirs.items()}
    missing = sorted(name for name, run in runs.items() if not run.results)
    runs = {name: run for name, run in runs.items() if run.results}
    reference = runs.get(cfg.reference)

    sections, numbers = [], {}
    for sec_name, sec in sections_cfg.items():
        members = [runs[n] for n in sec.runs if n in runs]
        md, data = table(members, reference if cfg.reference in sec.runs else None, list(sec.columns), list(sec.paired),
                         int(cfg.bootstrap_resamples))
        sections.append(f"## {sec_name.replace('_', ' ')}\n\n{md}\n")
        numbers[sec_name] = data
        series = {c: [(d["columns"][c]["mean"], d["columns"][c]["std"]) for d in data.values()]
                  for c in sec.paired if all(d["columns"][c]["n"] for d in data.values())}
        if series:
            plot_bars(list(data), series, out / f"{sec_name}.png", sec_name.replace("_", " "))
            sections[-1] += f"\n![{sec_name}]({sec_name}.png)\n"
    plot_budget_curves({n: budget_curve(runs[n]) for n in sections_cfg["baselines"].runs if n in runs} if "baselines" in sections_cfg else {}, out / "recall_vs_budget.png")

    if cfg.growth.enabled:
        folder = out / "growth"
        if not _done(folder, cfg.resume, report_only):
            t = time.perf_counter()
            _guarded(failures, "growth", run_growth_cfg, compose(config_name="growth", overrides=[*cfg.growth.overrides, f"out_dir={folder}", *_logger_overrides(cfg)]))
            timings["growth"] = time.perf_counter() - t
    if cfg.growth.enabled and (folder := out / "growth" / "results.json").exists():
        g = json.loads(folder.read_text())["growth"]
        numbers["growth"] = [{k: v for k, v in r.items() if k != "per_question"} for r in g["rows"]]
        sections.append(f"## MTM growth (K={g['k']})\n\n{growth_table(g['rows'])}\n\n![growth](growth/growth.png)\n")
    if cfg.longmemeval.enabled:
        folder = out / "longmemeval"
        if not _done(folder, cfg.resume, report_only):
            t = time.perf_counter()
            _guarded(failures, "longmemeval", run_lme, compose(config_name="longmemeval", overrides=[*cfg.longmemeval.overrides, f"out_dir={folder}", *_logger_overrides(cfg)]))
            timings["longmemeval"] = time.perf_counter() - t
    if cfg.longmemeval.enabled and (folder := out / "longmemeval" / "results.json").exists():
        r = json.loads(folder.read_text())
        numbers["longmemeval"] = r["retrieval"]
        sections.append(f"## LongMemEval\n\n{longmemeval_table(r, sorted(r['config']['ks']))}\n")

    total = time.perf_counter() - t_start
    head = (f"# lightmem evaluation suite\n\nreference: `{cfg.reference}`; mean ± std over seeds where a run is stochastic; "
            f"Δ = paired bootstrap ({cfg.bootstrap_resamples} resamples) of run − reference over shared questions, "
            f"95% CI, two-sided p (* p < 0.05).\nLoCoMo overrides: `{' '.join(cfg.locomo_common)}`. "
            f"This invocation took {total / 60:.1f} min (runs reused from earlier invocations not counted).\n")
    if missing:
        sections.append("## not run\n\n" + ", ".join(f"`{m}`" for m in missing) + " (no finished seed; rerun the same command to resume)\n")
    if failures:
        sections.append("## failed runs\n\n" + "\n".join(f"- `{k}`: {v}" for k, v in failures.items()) + "\n")
    (out / "suite.md").write_text(head + "\n" + "\n".join(sections) + "\n![recall vs budget](recall_vs_budget.png)\n")
    summary = {"tables": numbers, "timings_s": timings, "failures": failures, "total_s": total, "config": OmegaConf.to_container(cfg, resolve=True)}
    (out / "suite.json").write_text(json.dumps(summary, indent=2, default=str))
    flat = {f"{sec}/{run}/{col}": v["mean"] for sec, d in numbers.items() if isinstance(d, dict) and sec != "longmemeval"
            for run, rd in d.items() for col, v in rd["columns"].items() if v["n"]}
    log_results(make_run_logger(cfg.logger, out, "suite"), summary["config"], flat, out / "suite.json")
    return summary


def _guarded(failures: dict[str, str], name: str, fn, cfg: DictConfig) -> None:
    try:
        fn(cfg, quiet=True)
    except Exception as exc:  # reported in suite.md; the other parts still run
        log.exception("%s failed", name)
        failures[name] = f"{type(exc).__name__}: {exc}"
