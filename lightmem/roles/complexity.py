"""Query complexity C_q in [0, 1] and SimpleMem's adaptive depth (Eq. 8).

Until the trained classifier exists (training issue), C_q is a transparent heuristic:
each cue of multi-step reasoning adds a fixed amount.
"""
from __future__ import annotations

import math
import re
from typing import Protocol, runtime_checkable

_CUES: list[tuple[str, float]] = [
    (r"\b(and|both|as well as|along with)\b", 0.25),  # several facts
    (r"\b(before|after|since|until|first|last time|earlier|later|between)\b", 0.25),  # temporal relation
    (r"\b(how many|how often|how long|times|ever|all|every|list|which .* (have|has))\b", 0.25),  # aggregation
    (r"\b(why|would|likely|might|could|if)\b", 0.2),  # inference
    (r"\b(compare|differ|difference|same|common|both)\b", 0.2),
]


@runtime_checkable
class ComplexityScorer(Protocol):
    def score(self, query: str, n_entities: int = 0) -> float: ...


class HeuristicComplexity:
    """C_q = min(1, Σ cue weights + 0.15 per named entity beyond the first + 0.1 if long)."""

    def score(self, query: str, n_entities: int = 0) -> float:
        q = query.lower()
        c = sum(w for pat, w in _CUES if re.search(pat, q))
        c += 0.15 * max(n_entities - 1, 0)
        c += 0.1 if len(q.split()) > 14 else 0.0
        return min(1.0, c)


def adaptive_k(k_base: int, c_q: float, delta: float, k_min: int, k_max: int) -> int:
    """k_dyn = ⌊k_base · (1 + δ · C_q)⌋ clipped to [k_min, k_max] (SimpleMem Eq. 8)."""
    if not 0.0 <= c_q <= 1.0:
        raise ValueError("C_q must be in [0, 1]")
    return max(k_min, min(k_max, math.floor(k_base * (1.0 + delta * c_q))))


class TrainedComplexity:
    """C_q = P(HIGH) from the LoRA-trained MiniLM classifier of train/complexity.py.

    Args:
        checkpoint: Folder exported by train/complexity.py (adapter + head + card).
        base_model: Packaged base the adapter was trained on.
        device: ``auto``, ``cpu`` or ``cuda``.
    """

    def __init__(self, checkpoint: str = "checkpoints/complexity", base_model: str = "all-MiniLM-L6-v2", max_length: int = 64,
                 device: str = "auto") -> None:
        from transformers import AutoModelForSequenceClassification

        from lightmem.models.adapters import load_adapted
        from lightmem.models.registry import pick_device

        self.device = pick_device(device)
        model, tok = load_adapted(AutoModelForSequenceClassification, checkpoint, base_model, "complexity classifier", num_labels=2)
        self.model, self.tok, self.max_length = model.to(self.device), tok, max_length

    @classmethod
    def from_objects(cls, model, tokenizer, max_length: int = 64) -> "TrainedComplexity":
        self = cls.__new__(cls)
        self.model, self.tok, self.max_length = model, tokenizer, max_length
        self.device = str(next(model.parameters()).device)
        return self

    def probabilities(self, queries: list[str]) -> list[float]:
        import torch

        if not queries:
            return []
        enc = self.tok(queries, truncation=True, max_length=self.max_length, padding=True, return_tensors="pt").to(self.device)
        with torch.inference_mode():
            return torch.softmax(self.model(**enc).logits.float(), dim=-1)[:, 1].tolist()

    def score(self, query: str, n_entities: int = 0) -> float:
        return self.probabilities([query])[0]
