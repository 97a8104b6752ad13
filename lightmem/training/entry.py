"""What every train/<name>.py script is, in one call: ``main = train_entry(__file__, "train_<name>", recipe)``.

A trainer is a recipe in this package (``cfg -> summary``, the summary of ``train_and_export``: ``train`` holds the
best step's validation metrics under ``best``, ``test`` the held-out ones), a typed config in ``schemas.py`` and
``conf/train_<name>.yaml``, and the stub script.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig

from lightmem.config import per_job, script_app
from lightmem.metric_logger import quiet_third_party_logs
from lightmem.training import distributed
from lightmem.training.schemas import register_configs

Summary = dict[str, Any]


def best_validation(summary: Summary, cfg: DictConfig) -> float:
    """The best step's value of ``cfg.metric``: what a sweep of a fitted model maximises (NaN when none)."""
    return summary["train"].get("best", {}).get(cfg.metric, float("nan"))


def held_out(name: str) -> Callable[[Summary, DictConfig], float]:
    """The held-out metric ``name``, for trainers whose model has no validation loop (NaN when missing)."""
    return lambda summary, cfg: summary["test"].get(name, float("nan"))


def train_entry(script_file: str, config_name: str, recipe: Callable[[DictConfig], Summary], *,
                shown: Callable[[str], bool] = lambda key: True, digits: int | None = None,
                objective: Callable[[Summary, DictConfig], float] = best_validation) -> Callable[[], Any]:
    """The ``main`` of a train/ script.

    Args:
        script_file: The script's ``__file__`` (its configs: ``conf/`` beside its folder; the job is named after it).
        config_name: The config it composes, ``conf/<config_name>.yaml``.
        recipe: The training function, given the composed config.
        shown: Which held-out metrics the run prints (by name).
        digits: Round the printed values to this many digits (None: as they are).
        objective: The number ``main`` returns for a sweep to maximise.

    Returns:
        ``main()``: registers the training schemas, then runs Hydra's app, each sweep job in its own folder
        (``per_job``). ``main.run(cfg)`` is the run without Hydra (quiet third-party logs, the recipe, the print).
        Under ``torchrun``/``accelerate launch`` every process runs it in the process group of ``distributed.init``;
        rank 0 alone prints.
    """

    def run(cfg: DictConfig) -> Summary:
        quiet_third_party_logs()
        distributed.init(cpu=bool(cfg.get("optim", {}).get("cpu", False)))
        try:
            summary = recipe(cfg)
        finally:
            distributed.close()
        if distributed.is_main():
            print(json.dumps({k: round(v, digits) if digits is not None else v
                              for k, v in summary["test"].items() if shown(k)}, indent=1))
        return summary

    def task(cfg: DictConfig) -> float:
        cfg = per_job(cfg)  # a sweep's jobs neither share state nor overwrite checkpoints/
        return objective(run(cfg), cfg)

    app = script_app(script_file, config_name, task)

    def main() -> Any:
        register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
        return app()

    main.run = run
    return main
