"""The candidate group both miners write: one question and its Stage-1 candidates, labelled by the evidence.

``ranker.mine_groups`` fills the fields the ranker and SLM-2 read (features, provenance, token counts, evidence);
``distill.mine_selector_groups`` and ``distill.synth_groups`` those the selector and embedder files keep
(Stage-1 scores, evidence counts). Groups travel as plain dicts (JSON lines, the ranker's cache): ``to_dict``
writes the fields that are set, in this order, so the files read as they did before the type existed.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


@dataclass
class CandidateGroup:
    """One question with its candidates, the unit every Stage-2 and embedder recipe trains and scores on.

    Attributes:
        query: The question.
        texts: Each candidate as a cross-encoder reads it (``"[YYYY-MM-DD] text"``, ``candidate_text``).
        features: The ranker's features of each candidate (``retrieval.features.candidate_features``).
        labels: 1 for a candidate citing an evidence turn, else 0.
        provenance: The turn ids each candidate was written from.
        tokens: Each candidate's token count (what packing spends).
        evidence: The question's evidence turn ids, sorted.
        stage1: Each candidate's Stage-1 score (``-inf`` for a missed evidence turn added as a positive).
        n_evidence: How many evidence turns (or hops) the question has.
        n_missed: How many of them Stage 1 did not retrieve.
        source: ``locomo``, ``longmemeval`` or ``synth``.
        conversation: The conversation (or synthetic user) the question belongs to.
        category: The benchmark's question category (LoCoMo's 1-5, a LongMemEval type, a synthetic kind).
    """

    query: str
    texts: list[str]
    features: list[list[float]] | None = None
    labels: list[int] = field(default_factory=list)
    provenance: list[list[str]] | None = None
    tokens: list[int] | None = None
    evidence: list[str] | None = None
    stage1: list[float] | None = None
    n_evidence: int | None = None
    n_missed: int | None = None
    source: str = ""
    conversation: str = ""
    category: Any = None

    def to_dict(self) -> dict[str, Any]:
        """The fields that are set (``category`` always), in declaration order."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None or f.name == "category"}
