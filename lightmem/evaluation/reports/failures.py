"""Failures are reported as failures. A runner that could not do all it planned still writes what it
finished, and records one sentence per missing part under ``failures`` in its results.json; every entry
point under eval/ then exits non-zero (``exit_on_failures``), and the suite lists them in suite.md."""
from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lightmem.evaluation.harnesses.qa import QAOptions

_EFFECT = {"generator": "their questions were answered with an empty string",
           "judge": "their answers count as unjudged"}


def qa_usage(opts: QAOptions | None) -> dict[str, dict[str, int]]:
    """Calls and failed calls so far of the QA roles on their LLMs' meters (empty without QA options).

    Args:
        opts: The run's ``QAOptions`` (``llm`` and optional ``judge``), or None when QA is off.

    Returns:
        Role -> ``{"calls": n, "failures": n}`` for the generator and, when set, the judge.
    """
    if opts is None:
        return {}
    out: dict[str, dict[str, int]] = {}
    for llm, role in ((opts.llm, "generator"), (opts.judge, "judge")):
        meter = getattr(llm, "meter", None)
        if meter is not None:
            u = meter.summary().get(role, {})
            out[role] = {"calls": int(u.get("calls", 0)), "failures": int(u.get("failures", 0))}
    return out


def usage_delta(before: Mapping[str, Mapping[str, int]], after: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """``after - before`` per role and counter (counters of ``qa_usage``)."""
    return {role: {k: int(v) - int(before.get(role, {}).get(k, 0)) for k, v in u.items()} for role, u in after.items()}


def qa_failures(usage: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One sentence per QA role (generator, judge) whose backend failed calls during the run.

    Args:
        usage: Role -> counters with ``failures`` (results.json's ``cost.llm_qa``, or a ``usage_delta``).

    Returns:
        The failures to record; empty when every QA call succeeded.
    """
    out = []
    for role in _EFFECT:
        failed = int(usage.get(role, {}).get("failures", 0))
        if failed:
            out.append(f"QA {role}: {failed} LLM call(s) failed ({_EFFECT[role]})")
    return out


def recorded_failures(folder: Path) -> list[str]:
    """The ``failures`` a finished run recorded in ``folder/results.json`` (empty if none or no file)."""
    path = Path(folder) / "results.json"
    if not path.exists():
        return []
    return [str(f) for f in json.loads(path.read_text()).get("failures") or []]


def failures_md(failures: Sequence[str]) -> str:
    """A results.md section naming what did not complete ("" when nothing failed)."""
    if not failures:
        return ""
    return "\n## failed (the run exits non-zero)\n\n" + "".join(f"- {f}\n" for f in failures)


def failure_lines(failures: Sequence[str], what: str, where: str | Path | None = None) -> str:
    """The closing lines of an entry point whose run failed."""
    lines = [f"{what} FAILED (exit status 1); what did not complete:"]
    lines += [f"  - {f}" for f in failures]
    if where is not None:
        lines.append(f"  what did finish is in {where}")
    return "\n".join(lines)


def exit_on_failures(results: Mapping[str, Any], what: str, where: str | Path | None = None) -> None:
    """Entry points: print the run's recorded failures to stderr and exit 1 when there are any.

    Args:
        results: The run's results (its ``failures`` list is read; missing means none).
        what: The benchmark's name for the message.
        where: The folder holding what did finish, named in the message.

    Raises:
        SystemExit: With status 1 when ``results["failures"]`` is not empty. Raised inside a
            ``@hydra.main`` function, it becomes the process's exit status.
    """
    failures = list(results.get("failures") or [])
    if failures:
        print(failure_lines(failures, what, where), file=sys.stderr, flush=True)
        raise SystemExit(1)
