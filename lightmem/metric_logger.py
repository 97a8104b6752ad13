"""One MetricLogger protocol for metrics and artifacts: W&B, disk, stdout, or nothing.

A run's logger is chosen in config by its class (``conf/logger/*.yaml`` name a ``_target_``:
``logger=wandb``, ``logger=disk``...) and built by ``make_run_logger`` with the run's folder and
name; every implementation takes ``out_dir`` and ``name`` (and uses what it needs).
"""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

log = logging.getLogger(__name__)


@runtime_checkable
class MetricLogger(Protocol):
    def log_config(self, config: dict[str, Any]) -> None: ...

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None: ...

    def log_artifact(self, path: str | Path, name: str | None = None) -> None: ...

    def finish(self) -> None: ...


class NullLogger:
    """Logs nothing (``logger=none``, the default)."""

    def __init__(self, out_dir: str | Path | None = None, name: str | None = None) -> None:
        pass

    def log_config(self, config: dict[str, Any]) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        pass

    def log_artifact(self, path: str | Path, name: str | None = None) -> None:
        pass

    def finish(self) -> None:
        pass


class StdoutLogger(NullLogger):
    """Metrics as log lines (``logger=stdout``)."""

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        log.info("step %s: %s", step, ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items()))


class DiskLogger:
    """Appends metrics as JSON lines to ``<out_dir>/metrics.jsonl``; config to ``config.json`` (``logger=disk``)."""

    def __init__(self, out_dir: str | Path, name: str | None = None) -> None:
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)

    def log_config(self, config: dict[str, Any]) -> None:
        (self.dir / "config.json").write_text(json.dumps(config, indent=2, default=str))

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        with open(self.dir / "metrics.jsonl", "a") as fh:
            fh.write(json.dumps({"step": step, **metrics}, default=float) + "\n")

    def log_artifact(self, path: str | Path, name: str | None = None) -> None:
        log.info("artifact %s at %s", name or Path(path).name, path)

    def finish(self) -> None:
        pass


class WandbLogger:
    """Weights & Biases, offline unless ``mode='online'`` (these machines have no network; ``logger=wandb``)."""

    def __init__(self, out_dir: str | Path, name: str | None = None, project: str = "lightmem", mode: str = "offline",
                 group: str | None = None, tags: list[str] | None = None) -> None:
        import wandb

        os.environ.setdefault("WANDB_SILENT", "true")
        self._wandb = wandb
        self.run = wandb.init(project=project, dir=str(out_dir), mode=mode, name=name, group=group, tags=tags, reinit="finish_previous")

    def log_config(self, config: dict[str, Any]) -> None:
        self.run.config.update(config, allow_val_change=True)

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.run.log(metrics, step=step)

    def log_artifact(self, path: str | Path, name: str | None = None) -> None:
        art = self._wandb.Artifact(name or Path(path).stem.replace(".", "_"), type="result")
        art.add_file(str(path))
        self.run.log_artifact(art)

    def finish(self) -> None:
        self.run.finish()


NULL_LOGGER = f"{__name__}.NullLogger"


def make_run_logger(node: Mapping[str, Any] | None, out_dir: str | Path, default_name: str) -> MetricLogger:
    """The MetricLogger of a ``conf/logger/*.yaml`` node (``_target_`` plus its own settings), built for
    the run's ``out_dir`` and named ``node.name`` or ``default_name``; no node logs nothing."""
    from hydra.utils import instantiate
    from omegaconf import DictConfig, OmegaConf

    spec = dict(OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else (node or {}))
    if "kind" in spec:
        raise ValueError(f"logger.kind={spec['kind']!r} is gone: choose the logger with logger=none|stdout|disk|wandb "
                         "(conf/logger/*.yaml name its class as _target_)")
    spec.setdefault("_target_", NULL_LOGGER)
    spec["name"] = spec.get("name") or default_name
    logger = instantiate(spec, out_dir=str(out_dir))
    if not isinstance(logger, MetricLogger):
        raise TypeError(f"logger._target_={spec['_target_']} is not a MetricLogger (log_config, log_metrics, log_artifact, finish)")
    return logger


def log_results(logger: MetricLogger, config: dict[str, Any], metrics: dict[str, Any], artifact: str | Path | None = None) -> None:
    """One evaluation's config, its numeric metrics and its results file, then finish the logger."""
    logger.log_config(config)
    logger.log_metrics({k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
    if artifact is not None:
        logger.log_artifact(artifact)
    logger.finish()


def quiet_third_party_logs() -> None:
    """Entry points call this: loader chatter (FAISS CPU probing, weight-loading bars) hides results."""
    for name in ("faiss.loader", "sentence_transformers", "httpx", "urllib3"):
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()  # v5 prints a load report for every freshly initialised head
    except ImportError:
        pass
