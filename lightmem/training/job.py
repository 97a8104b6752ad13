"""What every training entry point does around the loop: log, fit, test the best weights, export."""
from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from lightmem.datasets.formats import describe_bad_rows, read_jsonl_rows
from lightmem.errors import InvalidInputError
from lightmem.metric_logger import MetricLogger, make_run_logger
from lightmem.training.export import export, git_commit, sha256_files
from lightmem.training.loop import TrainSpec, fit
from lightmem.training.lora import trainable_summary


def read_jsonl(path: str | Path, hint: str = "run `make data` (data_gen/synth.py, data_gen/distill.py) first") -> list[dict]:
    """The records of a generated training file (``read_jsonl_rows``); a missing file names the step that makes it.

    Raises:
        FileNotFoundError: No such file; the message ends with ``hint``.
        InvalidInputError: A line is not JSON (its line number and why).
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p} is missing: {hint}")
    rows = read_jsonl_rows(p)
    bad = [f"{r.where}: {r.error}" for r in rows if r.error is not None]
    if bad:
        raise InvalidInputError(f"{p} has lines that are not JSON (regenerate it: {hint}):\n{describe_bad_rows(bad)}")
    return [r.value for r in rows]


def train_and_export(
    *,
    name: str,
    model: torch.nn.Module,
    train: Sequence[Any],
    make_batch: Callable,
    loss_fn: Callable,
    evaluate: Callable[[torch.nn.Module], dict[str, float]],
    test: Callable[[Path], dict[str, float]],
    metric: str,
    spec: TrainSpec,
    out_dir: str | Path,
    export_dir: str | None,
    logger_cfg: Any,
    config: dict[str, Any],
    card: dict[str, Any],
    data_files: Sequence[str | Path],
) -> dict[str, Any]:
    """Fit, evaluate the best weights on held-out data with ``test(best_dir)``, export adapter + card."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    logger = make_run_logger(logger_cfg, out, f"train-{name}")
    logger.log_config(config)
    params = trainable_summary(model)
    result = fit(model, train, make_batch, loss_fn, evaluate, metric, out, spec, logger, show_progress=sys.stderr.isatty())
    metrics = test(out / "best")
    logger.log_metrics(metrics)
    summary = {"train": asdict(result), "test": metrics, "params": params, "n_train": len(train)}
    training = {k: v for k, v in summary["train"].items() if k != "history"}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    finish_run(out, export_dir, card, params=params, data_files=data_files, metrics=metrics, training=training,
               config=config, logger=logger)
    return summary


def finish_run(out: Path, export_dir: str | None, card: dict[str, Any], *, params: dict[str, Any],
               data_files: Sequence[str | Path], metrics: dict[str, float], training: dict[str, Any],
               config: dict[str, Any], logger: MetricLogger) -> None:
    """How every trainer ends: with ``export_dir``, ``out/best`` goes there with its card (the trainer's own
    fields, then the trainable parameters, the training data's digest, the commit, the held-out metrics,
    the training facts and the config); then the logger is closed."""
    if export_dir:
        full = {**card, "params": params, "data_sha256": sha256_files(data_files), "commit": git_commit(), "metrics": metrics,
                "training": training, "config": config}
        export(out / "best", export_dir, full)
        logger.log_artifact(Path(export_dir) / "card.json")
    logger.finish()
