"""The transfer share of a training source, read from three evaluation runs of the same questions: the untrained
model (base), the model trained on that source only (part) and the one trained on the reference data (full).
Reads the ``questions.jsonl`` that ``eval/locomo.py`` and ``eval/longmemeval.py`` write; ``stats.share_bootstrap``
does the arithmetic."""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightmem.evaluation.stats import ShareResult, share_bootstrap

METRICS = ("recall", "coverage")  # recall_all within the budget (turns), answer coverage within the budget


def _score(q: dict[str, Any], metric: str) -> tuple[str, float | None]:
    """(question key, score) of one record of either benchmark's questions.jsonl; None: not scored."""
    if "metrics" in q:  # LongMemEval
        m = q["metrics"]
        v = m.get("turn_recall_all@budget") if metric == "recall" else m.get("answer_coverage@budget")
        key = str(q.get("question_id", q.get("question")))
    else:  # LoCoMo; adversarial questions (category 5) have no evidence to recall
        v = None if q.get("category") == 5 else q["recall"]["@budget"]["all"] if metric == "recall" else q.get("coverage")
        key = f"{q.get('conv_id')}\t{q.get('question')}"
    return key, None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def read_scores(run_dir: Path | str, metric: str) -> dict[str, float]:
    """Question key -> score of one run (questions it does not score are left out)."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    path = Path(run_dir) / "questions.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: point at an eval/locomo.py or eval/longmemeval.py out_dir")
    out = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                key, v = _score(json.loads(line), metric)
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{n}: not a questions.jsonl record ({e})") from None
            if v is not None:
                out[key] = v
    return out


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
