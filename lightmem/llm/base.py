"""The LLM protocol and the per-role usage meter the evaluation reads."""
from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from lightmem.errors import LightMemError


class GenerationError(LightMemError):
    """A backend could not produce an output (timeout, HTTP error, exhausted retries)."""


@runtime_checkable
class LLM(Protocol):
    """Generates chat completions for a batch of single-turn prompts.

    Implementations count every call in ``meter`` under the ``role`` given.
    """

    name: str
    meter: "UsageMeter"

    def generate(self, prompts: Sequence[str], *, role: str = "default", max_new_tokens: int | None = None) -> list[str]: ...


@dataclass
class RoleUsage:
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: list[float] = field(default_factory=list)
    failures: int = 0  # backend errors (counted by the backend) and outputs still malformed after a retry
    repaired: int = 0  # outputs that needed JSON repair or a retry


class UsageMeter:
    """Thread-safe counters per role: calls, tokens in/out, latency, failures."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._roles: dict[str, RoleUsage] = defaultdict(RoleUsage)

    def record(self, role: str, input_tokens: int, output_tokens: int, latency_ms: float, calls: int = 1) -> None:
        with self._lock:
            u = self._roles[role]
            u.calls += calls
            u.input_tokens += input_tokens
            u.output_tokens += output_tokens
            u.latency_ms.append(latency_ms)

    def failure(self, role: str) -> None:
        with self._lock:
            self._roles[role].failures += 1

    def repaired(self, role: str) -> None:
        with self._lock:
            self._roles[role].repaired += 1

    def summary(self) -> dict[str, dict[str, float]]:
        """Per role: calls, tokens, failures, repaired, latency P50/P95 (ms per batch call)."""
        with self._lock:
            out = {}
            for role, u in self._roles.items():
                lat = np.asarray(u.latency_ms) if u.latency_ms else np.asarray([np.nan])
                out[role] = {
                    "calls": u.calls, "input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
                    "failures": u.failures, "repaired": u.repaired,
                    "latency_ms_p50": float(np.percentile(lat, 50)), "latency_ms_p95": float(np.percentile(lat, 95)),
                }
            return out

    def reset(self) -> None:
        with self._lock:
            self._roles.clear()


class DryRunLLM:
    """Counts calls and prompt tokens without a model: every answer is ``reply``.

    For cost accounting (LLM calls per conversation depend on the write path, not on what
    the model says); the generative roles fall back to their non-generative path.
    """

    name = "dry-run"

    def __init__(self, reply: str = '{"memories": []}', **_backend_options: object) -> None:
        self.reply, self.meter = reply, UsageMeter()

    def generate(self, prompts: Sequence[str], *, role: str = "default", max_new_tokens: int | None = None) -> list[str]:
        for p in prompts:
            self.meter.record(role, len(p.split()), len(self.reply.split()), 0.0)
        return [self.reply for _ in prompts]
