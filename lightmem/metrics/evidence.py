"""Evidence scores: which gold turns the retrieved items' provenance covers (LoCoMo's evidence ids)."""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

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
