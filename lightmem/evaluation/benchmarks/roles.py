"""Per-role latency and LLM cost on real queries and turns (a benchmark that writes numbers)."""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from lightmem.metrics.stats import percentile
from lightmem.types import Filters, Turn


def time_calls(fn: Callable[[Any], Any], inputs: Sequence[Any]) -> list[float]:
    out = []
    for x in inputs:
        t = time.perf_counter()
        fn(x)
        out.append((time.perf_counter() - t) * 1000)
    return out


def bench_role(name: str, setting: str, role: Any, unit: str, fn: Callable[[Any], Any], inputs: Sequence[Any],
               units_per_input: Sequence[int] | None = None) -> dict[str, Any]:
    """Time ``fn`` over ``inputs``; latency is per input, cost per unit (turn or query)."""
    meter = getattr(getattr(role, "llm", None), "meter", None)
    if meter is not None:
        meter.reset()
    ms = time_calls(fn, inputs)
    units = sum(units_per_input) if units_per_input else len(inputs)
    usage = meter.summary().get(name, {}) if meter is not None else {}
    return {
        "role": name, "setting": setting, "unit": unit, "n": len(inputs), "units": units,
        "ms_p50": percentile(ms, 50), "ms_p95": percentile(ms, 95),
        "ms_per_unit": float(np.sum(ms)) / max(units, 1),
        "llm_calls_per_unit": usage.get("calls", 0) / max(units, 1),
        "llm_tokens_per_unit": (usage.get("input_tokens", 0) + usage.get("output_tokens", 0)) / max(units, 1),
        "llm_failures": usage.get("failures", 0),
    }


def controller_inputs(questions: Sequence[str], stm: Sequence[str], now: float) -> list[tuple]:
    return [(q, stm, now) for q in questions]


def run_controller(role: Any, k: int) -> Callable[[tuple], Any]:
    return lambda x: role.plan(x[0], k, Filters(), x[1], x[2])


def run_writer(role: Any) -> Callable[[Sequence[Turn]], Any]:
    return lambda batch: role.write(batch, ())


def roles_table(rows: Sequence[dict[str, Any]], device: str) -> str:
    lines = [f"Per-role latency on {device}", "",
             "| role | setting | per | n | P50 ms | P95 ms | ms per unit | LLM calls per unit | LLM tokens per unit | failures |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['role']} | {r['setting']} | {r['unit']} | {r['n']} | {r['ms_p50']:.1f} | {r['ms_p95']:.1f} | "
                     f"{r['ms_per_unit']:.1f} | {r['llm_calls_per_unit']:.2f} | {r['llm_tokens_per_unit']:.0f} | {r['llm_failures']} |")
    return "\n".join(lines)
