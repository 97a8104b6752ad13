"""The transfer share of a training source, read from three evaluation runs of the same questions: the untrained
model (base), the model trained on that source only (part) and the one trained on the reference data (full).
Reads the ``questions.jsonl`` that ``eval/locomo.py`` and ``eval/longmemeval.py`` write; ``stats.share_bootstrap``
does the arithmetic (``experiments/transfer/run.py`` is the command)."""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightmem.evaluation.reports.comparison import RunResult
from lightmem.metrics.stats import ShareResult, share_bootstrap

METRICS = ("recall", "coverage")  # recall_all within the budget (turns), answer coverage within the budget
_LOCOMO = {"recall": "R_all@budget", "coverage": "coverage@budget"}  # comparison.PAIRED's readers
_LONGMEMEVAL = {"recall": "turn_recall_all@budget", "coverage": "answer_coverage@budget"}  # keys of a record's "metrics"


def read_scores(run_dir: Path | str, metric: str) -> dict[Any, float]:
    """Question key -> score of one run (questions it does not score are left out). LoCoMo records are read as
    the suite reads them (``comparison.RunResult.per_question``: a repeated question keeps its own key);
    LongMemEval records by their question id."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    path = Path(run_dir) / "questions.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: point at an eval/locomo.py or eval/longmemeval.py out_dir")
    try:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if rows and "metrics" in rows[0]:  # LongMemEval
            scores = ((q["question_id"], q["metrics"].get(_LONGMEMEVAL[metric])) for q in rows)
            return {k: float(v) for k, v in scores if v is not None and not math.isnan(v)}
        return RunResult(str(run_dir), questions=[rows]).per_question(_LOCOMO[metric])
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not an eval/locomo.py or eval/longmemeval.py questions.jsonl ({e!r})") from None


def transfer_share(base: Path | str, part: Path | str, full: Path | str, metric: str = "recall", resamples: int = 2000,
                   seed: int = 0) -> tuple[ShareResult, dict[str, float]]:
    """The share and the three runs' means over the questions all three score; the runs must hold the same questions."""
    runs = [read_scores(d, metric) for d in (base, part, full)]
    keys = set(runs[0])
    if any(set(r) != keys for r in runs[1:]):
        raise ValueError("the three runs score different questions: evaluate the same data and settings with each model")
    if not keys:
        raise ValueError("the runs score no question")
    order = sorted(keys)
    cols: Sequence[list[float]] = [[r[k] for k in order] for r in runs]
    res = share_bootstrap(*cols, resamples=resamples, seed=seed)
    means = {name: sum(c) / len(c) for name, c in zip(("base", "part", "full"), cols)}
    return res, means
