"""Statistics over evaluation runs: percentiles, mean ± std across seeds, paired bootstrap (LightMem-SLM §9.1).

Pure functions of per-question score arrays.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np


def spread(items: Sequence, n: int | None) -> list:
    """``n`` items evenly spaced over ``items``, first and last included (all of them for None or n >= len)."""
    if n is None or n >= len(items):
        return list(items)
    if n <= 0:
        return []
    return [items[i] for i in np.unique(np.linspace(0, len(items) - 1, n).round().astype(int))]


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (linear interpolation); NaN for no values."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if len(values) else float("nan")


@dataclass(frozen=True)
class MeanStd:
    mean: float
    std: float  # sample std (ddof=1); 0 for a single seed
    n: int

    def __str__(self) -> str:
        return f"{self.mean:.3f} ± {self.std:.3f}" if self.n > 1 else f"{self.mean:.3f}"


def mean_std(values: Sequence[float]) -> MeanStd:
    """Mean and sample standard deviation of per-seed values; NaN values are ignored."""
    vals = np.asarray([v for v in values if v is not None and not np.isnan(v)], dtype=np.float64)
    if vals.size == 0:
        return MeanStd(float("nan"), float("nan"), 0)
    return MeanStd(float(vals.mean()), float(vals.std(ddof=1)) if vals.size > 1 else 0.0, int(vals.size))


class _Numbers:
    """A result whose fields are plain numbers, written out as a dict (JSON, tables)."""

    def to_dict(self) -> dict[str, float]:
        return asdict(self)  # type: ignore[call-overload]


def _paired(samples: Sequence[Sequence[float]], resamples: int) -> list[np.ndarray]:
    """Per-question score arrays of the same questions, checked for a bootstrap."""
    arrays = [np.asarray(x, dtype=np.float64) for x in samples]
    if len({a.shape for a in arrays}) != 1 or arrays[0].ndim != 1:
        raise ValueError(f"paired samples must be 1-d and equally long, got {' and '.join(str(a.shape) for a in arrays)}")
    if arrays[0].size == 0:
        raise ValueError("paired samples need at least one instance")
    if resamples < 1:
        raise ValueError("resamples must be >= 1")
    return arrays


@dataclass(frozen=True)
class BootstrapResult(_Numbers):
    """Paired difference ``a - b`` of per-question means with its percentile CI and p-value."""

    diff: float
    ci_low: float
    ci_high: float
    p_value: float
    n: int
    resamples: int


def paired_bootstrap(a: Sequence[float], b: Sequence[float], resamples: int = 1000, seed: int = 0,
                     alpha: float = 0.05) -> BootstrapResult:
    """Paired bootstrap over evaluation instances: resample question indices with replacement.

    The CI is the (alpha/2, 1 - alpha/2) percentile interval of the resampled mean differences;
    the two-sided p-value is twice the share of resampled differences on the far side of 0
    (capped at 1), the usual bootstrap test of "no difference".

    Raises:
        ValueError: the arrays differ in length, are empty, or ``resamples`` < 1.
    """
    x, y = _paired((a, b), resamples)
    d = x - y
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, d.size, size=(resamples, d.size))
    means = d[idx].mean(axis=1)
    lo, hi = np.percentile(means, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    observed = float(d.mean())
    if observed > 0:
        p = 2 * float(np.mean(means <= 0))
    elif observed < 0:
        p = 2 * float(np.mean(means >= 0))
    else:
        p = 1.0
    return BootstrapResult(observed, float(lo), float(hi), min(1.0, p), int(d.size), resamples)


@dataclass(frozen=True)
class ShareResult(_Numbers):
    """How much of ``full``'s gain over ``base`` ``part`` gets: ``(part - base) / (full - base)`` of per-question means,
    with a percentile CI over paired resamples of the questions (those whose ``full`` gain is not positive are left
    out of the CI: the ratio means nothing there; ``undefined`` counts them)."""

    share: float
    ci_low: float
    ci_high: float
    gain_part: float
    gain_full: float
    n: int
    resamples: int
    undefined: int


def share_bootstrap(base: Sequence[float], part: Sequence[float], full: Sequence[float], resamples: int = 2000, seed: int = 0,
                    alpha: float = 0.05) -> ShareResult:
    """The transfer share of ``part`` (e.g. a model trained on synthetic data only) relative to ``full`` (trained on
    real data), both over ``base`` (untrained), per question and paired. NaN share and CI when ``full`` gains nothing.

    Raises:
        ValueError: the arrays differ in length, are empty, or ``resamples`` < 1.
    """
    b, p, f = _paired((base, part, full), resamples)
    gp, gf = p - b, f - b
    idx = np.random.default_rng(seed).integers(0, b.size, size=(resamples, b.size))
    num, den = gp[idx].mean(axis=1), gf[idx].mean(axis=1)
    ok = den > 0
    ratios = num[ok] / den[ok]
    defined = gf.mean() > 0 and ratios.size
    lo, hi = np.percentile(ratios, [100 * alpha / 2, 100 * (1 - alpha / 2)]) if defined else (float("nan"), float("nan"))
    share = float(gp.mean() / gf.mean()) if defined else float("nan")
    return ShareResult(share, float(lo), float(hi), float(gp.mean()), float(gf.mean()), int(b.size), resamples,
                       int((~ok).sum()))
