"""What every eval/<name>.py script is, in one call: ``main = hydra_entry(__file__, "<name>", "<title>")``.

A benchmark is three files: ``lightmem/evaluation/runs/<name>.py`` (``run(cfg)``, ``metrics(results)``, and when
it has a config of its own ``SCHEMA = ("schema_<name>", XConfig)``; a small benchmark measures there too, a big one
in ``lightmem/evaluation/benchmarks/``), ``conf/<name>.yaml`` (``defaults: [schema_<name>, ...]``) and the stub
``eval/<name>.py``. ``register_configs`` (here) finds the ``SCHEMA`` by itself.
"""
from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from lightmem.config import per_job, register_schemas, script_app
from lightmem.evaluation.reports.failures import exit_on_failures
from lightmem.evaluation.runs.common import optimized_metric
from lightmem.evaluation.schemas import SCHEMAS


def hydra_entry(script_file: str, name: str, title: str | None = None, *, config_name: str | None = None,
                module: str | None = None) -> Callable[[], Any]:
    """The ``main`` of an eval/ script: register the configs, compose ``conf/<config_name>.yaml`` (command-line
    overrides, ``--multirun``, ``--config-name``, ``--cfg job`` as any ``@hydra.main``), run, return the metric.

    Args:
        script_file: The script's ``__file__``; its configs are the ``conf/`` folder beside the script's folder,
            and Hydra names the job after it (``hydra.job.name``: the run's log file ``<out_dir>/<stem>.log``).
        name: The benchmark's name: its runs module and, by default, its config.
        title: The benchmark's name in the failure message: when given, a run whose results list failures
            exits 1 (``exit_on_failures``) after writing what did finish.
        config_name: The config to compose (default ``name``).
        module: The runs module, importable (default ``lightmem.evaluation.runs.<name>``); it has
            ``run(cfg)``, ``metrics(results)`` and may have ``SCHEMA``.

    Returns:
        ``main()``, which registers the shared evaluation schemas and the module's own ``SCHEMA`` (before Hydra
        composes), then runs Hydra's app; its task calls ``run(cfg)`` and returns ``optimized_metric`` of
        ``metrics(results)`` (what a sweeper optimises). A single run writes to ``cfg.out_dir``; each job of a
        multirun to its own folder, ``multirun/<config>/<start time>/<job number>`` (``per_job``, as the trainers).
        ``main.run`` and ``main.metrics`` are the module's: ``run(cfg)`` writes where ``cfg.out_dir`` says.
    """
    runner = importlib.import_module(module or f"lightmem.evaluation.runs.{name}")

    def task(cfg: DictConfig) -> float | None:
        cfg = per_job(cfg)  # in a sweep (-m), each job writes into its own folder, not the one out_dir they share
        results = runner.run(cfg)
        if title is not None:
            exit_on_failures(results, title, cfg.out_dir)  # exit 1 when the run recorded failures
        return optimized_metric(runner.metrics(results), cfg)  # the metric a sweep optimises: cfg.optimized_metric

    app = script_app(script_file, config_name or name, task)

    def main() -> Any:
        own = getattr(runner, "SCHEMA", None)
        register_schemas({**SCHEMAS, **dict([own] if own else [])})  # the schemas and resolvers conf/ needs
        return app()

    main.run, main.metrics, main.module = runner.run, runner.metrics, runner
    return main


def benchmark_schemas() -> dict[str, type]:
    """The ``SCHEMA = (name, dataclass)`` of every module of ``lightmem.evaluation.runs`` that declares one: the
    config of a benchmark only its own entry point uses lives next to its ``run(cfg)``. The modules are found by
    name and imported at call time (they import the harnesses: an eval/ stub registers only its own)."""
    found = {}
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda m: m.name):
        schema = getattr(importlib.import_module(f"{__package__}.{info.name}"), "SCHEMA", None)
        if schema is not None:
            found[schema[0]] = schema[1]
    return found


def register_configs() -> None:
    """Register lightmem's resolvers and every evaluation schema, the shared ones and each benchmark's
    (idempotent): what composing any conf/*.yaml of eval/ needs (tests, tools, experiments, the suite).
    An eval/*.py stub registers only the shared ones and its own (``hydra_entry``)."""
    register_schemas({**SCHEMAS, **benchmark_schemas()})
