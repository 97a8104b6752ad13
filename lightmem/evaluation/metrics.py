"""Pure evaluation metrics: evidence recall from provenance, LoCoMo answer F1, percentiles."""
from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from lightmem.text import stem

_EVIDENCE = re.compile(r"^D:?(\d+):0*(\d+)$")


def normalize_evidence(raw: Iterable[str]) -> list[str]:
    """Clean LoCoMo evidence ids: split ``"D8:6; D9:17"``, fix ``"D:11:26"``, drop junk like ``"D"``."""
    out: list[str] = []
    for entry in raw:
        for tok in re.split(r"[;,\s]+", str(entry).strip()):
            m = _EVIDENCE.match(tok)
            if m:
                out.append(f"D{int(m.group(1))}:{int(m.group(2))}")
            elif tok and not tok.startswith("D"):
                out.append(tok)  # other datasets' ids pass through unchanged
    return list(dict.fromkeys(out))


@dataclass(frozen=True)
class Recall:
    """Evidence coverage of a retrieved set: all covered, any covered, fraction covered."""

    all: float
    any: float
    mean: float


def evidence_recall(provenances: Sequence[Sequence[str]], evidence: Sequence[str]) -> Recall:
    """Coverage of ``evidence`` by the union of the retrieved items' provenance.

    Raises:
        ValueError: ``evidence`` is empty (such a question cannot be scored).
    """
    gold = set(evidence)
    if not gold:
        raise ValueError("a question without evidence cannot be scored for recall")
    covered = gold & {p for prov in provenances for p in prov}
    return Recall(float(covered == gold), float(bool(covered)), len(covered) / len(gold))


def evidence_precision(provenances: Sequence[Sequence[str]], evidence: Sequence[str]) -> float:
    """Share of the retrieved items that cite at least one evidence turn (0 for an empty set)."""
    gold = set(evidence)
    return sum(1 for prov in provenances if gold & set(prov)) / len(provenances) if provenances else 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (linear interpolation); NaN for no values."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if len(values) else float("nan")


# -- LoCoMo's official answer F1 (snap-research/locomo, task_eval/evaluation.py) -----------
def normalize_answer(s: str) -> str:
    """Lower case, drop commas, punctuation, articles and 'and', fold white space."""
    s = str(s).replace(",", "").lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the|and)\b", " ", s)
    return " ".join(s.split())


def token_f1(prediction: str, ground_truth: str) -> float:
    """Token F1 over Porter-stemmed normalised words."""
    pred = [stem(w) for w in normalize_answer(prediction).split()]
    gold = [stem(w) for w in normalize_answer(ground_truth).split()]
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0.0
    p, r = same / len(pred), same / len(gold)
    return 2 * p * r / (p + r)


def multi_answer_f1(prediction: str, ground_truth: str) -> float:
    """Category 1: mean over comma-separated gold sub-answers of the best matching predicted part."""
    preds = [p.strip() for p in str(prediction).split(",")]
    golds = [g.strip() for g in str(ground_truth).split(",")]
    return float(np.mean([max(token_f1(p, g) for p in preds) for g in golds]))


def locomo_f1(prediction: str, answer: object, category: int) -> float:
    """LoCoMo's per-category QA score.

    1 multi-hop: sub-answer F1; 2 temporal, 4 single-hop: token F1; 3 open-domain: token F1
    against the answer before the first ';'; 5 adversarial: 1 when the prediction says
    "no information available" or "not mentioned", else 0.
    """
    prediction = str(prediction)
    if category == 5:
        low = prediction.lower()
        return float("no information available" in low or "not mentioned" in low)
    gold = str(answer)
    if category == 3:
        gold = gold.split(";")[0].strip()
    if category == 1:
        return multi_answer_f1(prediction, gold)
    if category in (2, 3, 4):
        return token_f1(prediction, gold)
    raise ValueError(f"LoCoMo categories are 1-5, got {category!r}")
