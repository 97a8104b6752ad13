"""One MetricLogger protocol for metrics and artifacts: W&B, disk, stdout, or nothing."""
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
    def log_config(self, config: dict[str, Any]) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        pass

    def log_artifact(self, path: str | Path, name: str | None = None) -> None:
        pass

    def finish(self) -> None:
        pass


class StdoutLogger(NullLogger):
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        log.info("step %s: %s", step, ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items()))


class DiskLogger:
    """Appends metrics as JSON lines to ``<out_dir>/metrics.jsonl``; config to ``config.json``."""

    def __init__(self, out_dir: str | Path) -> None:
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
    """Weights & Biases, offline unless ``mode='online'`` (these machines have no network)."""

    def __init__(self, project: str, out_dir: str | Path, mode: str = "offline", name: str | None = None,
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


def make_logger(kind: str, out_dir: str | Path, project: str = "lightmem", mode: str = "offline", name: str | None = None) -> MetricLogger:
    """``none``, ``stdout``, ``disk`` or ``wandb``."""
    if kind == "none":
        return NullLogger()
    if kind == "stdout":
        return StdoutLogger()
    if kind == "disk":
        return DiskLogger(out_dir)
    if kind == "wandb":
        return WandbLogger(project, out_dir, mode=mode, name=name)
    raise ValueError(f"logger must be none, stdout, disk or wandb, got {kind!r}")


def make_run_logger(node: Mapping[str, Any], out_dir: str | Path, default_name: str) -> MetricLogger:
    """A MetricLogger from a ``conf/logger/*.yaml`` node (missing keys take LoggerConfig's defaults)."""
    return make_logger(node.get("kind", "none"), out_dir, node.get("project", "lightmem"), node.get("mode", "offline"),
                       node.get("name") or default_name)


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
