"""What every training entry point does around the loop: log, fit, test the best weights, export."""
from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from lightmem.datasets.formats import describe_bad_rows, read_jsonl_rows
from lightmem.errors import InvalidInputError
from lightmem.metric_logger import MetricLogger, NullLogger, make_run_logger
from lightmem.training import distributed
from lightmem.training.export import export, git_commit, sha256_files
from lightmem.training.loop import TrainResult, TrainSpec, fit
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
    fitted: str | Path | None = None,
) -> dict[str, Any]:
    """Fit, evaluate the best weights on held-out data with ``test(best_dir)``, export adapter + card.

    With ``fitted`` (the ``out_dir`` of an earlier run of the same trainer, e.g. one fitted on a GPU machine that
    cannot score held-out data), nothing is fitted: that run's ``best`` weights and training facts are scored and
    exported, once its ``summary.json`` shows the same training settings (``fitted_mismatch``) and the same data.

    Under a multi-process launcher every rank fits (``distributed``); rank 0 alone logs, scores ``test``, writes the
    summary and exports. The other ranks return when fitting ends, with no ``test`` metrics and no ``summary.json``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    main = distributed.is_main()
    logger = make_run_logger(logger_cfg, out, f"train-{name}") if main else NullLogger()
    logger.log_config(config)
    params = trainable_summary(model)
    digest = sha256_files(data_files)
    if fitted:
        result, best, device, fitted_at = load_fitted(Path(fitted), config, digest)
    else:
        if main:
            (out / "summary.json").unlink(missing_ok=True)  # a summary describes the weights beside it, not a run before
        result = fit(model, train, make_batch, loss_fn, evaluate, metric, out, spec, logger, show_progress=sys.stderr.isatty())
        best, device, fitted_at = out / "best", device_name(spec), git_commit()
    if not main:
        return {"train": asdict(result), "test": {}, "params": params, "n_train": len(train), "config": config,
                "data_sha256": digest, "device": device, "commit": fitted_at}
    metrics = test(best)
    logger.log_metrics(metrics)
    summary = {"train": asdict(result), "test": metrics, "params": params, "n_train": len(train), "config": config,
               "data_sha256": digest, "device": device, "commit": fitted_at}
    if fitted:
        summary["fitted"] = str(fitted)
    training = {**{k: v for k, v in summary["train"].items() if k != "history"}, "device": device, "commit": fitted_at}
    tmp = out / "summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2, default=str))
    tmp.replace(out / "summary.json")
    finish_run(out, export_dir, card, params=params, data_files=data_files, metrics=metrics, training=training,
               config=config, logger=logger, best=best)
    return summary


# Settings that may differ between the run that fitted the weights and the one that scores and exports them: where
# files go and come from, whether held-out data is scored, the logger, and the device switches.
FITTED_FREE = ("out_dir", "export_dir", "fitted", "held_out", "distill_set", "vector_cache", "logger", "paths", "hydra",
               "prepare_only", "locomo_path", "lme_path", "lme_s_path", "optim.cpu", "optim.resume")


def as_json(value: Any) -> Any:
    """``value`` as a JSON file gives it back (tuples as lists, other objects as their ``str``): how a setting
    written by one run compares with the live one of another."""
    return json.loads(json.dumps(value, default=str))


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def _same(x: Any, y: Any) -> bool:
    """Equal settings; two absolute paths count as one when they end in the same two components
    (``checkpoints/embedder``): the machines hold the source tree in different places."""
    if isinstance(x, str) and isinstance(y, str) and x.startswith("/") and y.startswith("/"):
        return Path(x).parts[-2:] == Path(y).parts[-2:]
    return x == y


def fitted_mismatch(prior: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """The training settings (flattened keys) on which two runs' configs differ, ``FITTED_FREE`` aside."""
    free = lambda key: any(key == f or key.startswith(f + ".") for f in FITTED_FREE)  # noqa: E731
    a, b = _flat(as_json(prior)), _flat(as_json(config))
    return sorted(k for k in set(a) | set(b) if not free(k) and not _same(a.get(k), b.get(k)))


def load_fitted(run: Path, config: dict[str, Any], digest: str) -> tuple[TrainResult, Path, str, str]:
    """An earlier run's training result, best weights, device and commit, refused unless it was fitted with these
    settings on this data and its ``best/`` is the one its summary describes.

    Raises:
        FileNotFoundError: ``run`` has no ``summary.json`` or no ``best`` weights.
        InvalidInputError: An unreadable summary, other settings or data than this run's, or ``best/`` weights from
            another evaluation than the summary's best.
    """
    if not (run / "summary.json").exists() or not (run / "best").is_dir():
        raise FileNotFoundError(f"fitted={run} holds no finished run (summary.json and best/ are what a trainer leaves)")
    try:
        prior = json.loads((run / "summary.json").read_text())
        fields = {f.name for f in dataclasses.fields(TrainResult)}
        result = TrainResult(**{k: v for k, v in prior["train"].items() if k in fields})
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InvalidInputError(f"{run}/summary.json is not a finished run's summary ({type(exc).__name__}: {exc})") from exc
    if "config" not in prior:
        raise InvalidInputError(f"{run}/summary.json records no config: it was written before fitted runs could be checked")
    kept = run / "best" / "metrics.json"
    if kept.exists() and json.loads(kept.read_text()).get("step") != result.best.get("step"):
        raise InvalidInputError(f"{run}/best holds the weights of another evaluation than its summary's best "
                                "(a run restarted in that folder?)")
    bad = fitted_mismatch(prior["config"], config)
    if bad:
        shown = ", ".join(f"{k}" for k in bad[:8])
        raise InvalidInputError(f"fitted={run} was trained with other settings ({shown}); pass the same overrides")
    if prior.get("data_sha256") != digest:
        raise InvalidInputError(f"fitted={run} was trained on other data (sha256 {prior.get('data_sha256')} against {digest})")
    return result, run / "best", str(prior.get("device", "unknown")), str(prior.get("commit", "unknown"))


def device_name(spec: TrainSpec) -> str:
    """What the loop trains on: the CUDA device's name, or ``cpu`` (``x N`` with N processes)."""
    n = distributed.world()[1]
    each = f"cuda ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() and not spec.cpu else "cpu"
    return each if n == 1 else f"{each} x {n}"


def finish_run(out: Path, export_dir: str | None, card: dict[str, Any], *, params: dict[str, Any],
               data_files: Sequence[str | Path], metrics: dict[str, float], training: dict[str, Any],
               config: dict[str, Any], logger: MetricLogger, best: Path | None = None) -> None:
    """How every trainer ends: with ``export_dir``, ``out/best`` goes there with its card (the trainer's own
    fields, then the trainable parameters, the training data's digest, the commit, the held-out metrics,
    the training facts and the config); then the logger is closed."""
    if export_dir:
        full = {**card, "params": params, "data_sha256": sha256_files(data_files), "commit": git_commit(), "metrics": metrics,
                "training": training, "config": config}
        export(best or out / "best", export_dir, full)
        logger.log_artifact(Path(export_dir) / "card.json")
    logger.finish()
