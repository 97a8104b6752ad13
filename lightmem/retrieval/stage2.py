"""Stage 2 of retrieval: the ``Selector`` protocol every selector meets, the selectors that generate nothing
(the Stage-1 order, a cosine threshold, the learned ranker) and the default one.

A selector only selects: scores decide which candidates stay, the memory text is never changed. The selectors
that run a small language model (a cross-encoder, SLM-2, a generative judge) are roles: ``lightmem.roles.selector``.
"""
from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from lightmem.models.registry import checkpoint_path
from lightmem.retrieval.features import FEATURES, candidate_features
from lightmem.retrieval.trees import ranker_scorer
from lightmem.timeutil import iso
from lightmem.types import Hit, MemoryItem, RetrievalPlan

log = logging.getLogger(__name__)


@runtime_checkable
class Selector(Protocol):
    """Selects ≤ k hits from the candidates; it never rewrites memory text."""

    def select(self, plan: RetrievalPlan, candidates: Sequence[Hit], k: int) -> list[Hit]: ...


class Stage1Selector:
    """Keeps the top k by Stage-1 score (the "without semantic reranking" setting)."""

    def select(self, plan: RetrievalPlan, candidates: Sequence[Hit], k: int) -> list[Hit]:
        return sorted(candidates, key=lambda h: -h.score)[:k]


class ThresholdSelector:
    """Keeps candidates whose dense cosine reaches ``tau``, best first (query-aware pipeline, Algorithm 1).

    Args:
        tau: Cosine threshold (0.30 in the paper).
        key: The Stage-1 signal compared with ``tau``.
    """

    def __init__(self, tau: float = 0.30, key: str = "dense") -> None:
        self.tau, self.key = float(tau), key

    def select(self, plan: RetrievalPlan, candidates: Sequence[Hit], k: int) -> list[Hit]:
        kept = [h for h in candidates if h.scores.get(self.key, h.score) >= self.tau]
        return sorted(kept, key=lambda h: -h.score)[:k]


def rank_by(candidates: Sequence[Hit], scores: Sequence[float], k: int, key: str) -> list[Hit]:
    """Order by the selector's score, ties by Stage 1; record the score on each hit."""
    for h, s in zip(candidates, scores):
        h.scores[key] = float(s)
    order = sorted(range(len(candidates)), key=lambda i: (-scores[i], -candidates[i].score))
    return [candidates[i] for i in order[:k]]


def candidate_text(hit: Hit) -> str:
    """What a selector reads of a candidate: its date and text (short inputs keep it fast)."""
    return item_text(hit.item)


def item_text(item: MemoryItem) -> str:
    """A memory as a selector reads it: ``[YYYY-MM-DD] text``."""
    return f"[{iso(item.event_time)[:10]}] {item.text}"


def weights_digest(weights: dict) -> str:
    """A short fingerprint of a ranker.json's fitted weights (what a stacked model was fitted on top of)."""
    keys = ("features", "kind", "baseline", "trees") if weights.get("kind", "linear") == "trees" else \
        ("features", "mean", "scale", "coef", "intercept")  # a linear model's digest as before trees existed
    return hashlib.sha256(json.dumps({k: weights[k] for k in keys}, sort_keys=True).encode()).hexdigest()[:16]


# How a ranker checkpoint is made: each kind exports to its own folder (lightmem.training.schemas.RankerTrainConfig)
RETRAIN = ("`python train/ranker.py model=trees` (checkpoints/ranker_trees, the default Stage 2) or `python train/ranker.py` "
           "(checkpoints/ranker, the linear one); `make train` makes both")


class LearnedRanker:
    """A ranker over cheap candidate features (``retrieval/features.py``), fitted by ``train/ranker.py`` on
    Stage-1 candidate groups: linear and listwise (ranking 60 candidates takes ~0.5 ms on 2 CPU cores), or
    boosted trees (``model=trees``, ``retrieval/trees.py``; ~3 ms for 100 candidates).

    Args:
        checkpoint: Folder with ``ranker.json`` (feature names and the model: standardisation and weights, or trees).
    """

    def __init__(self, checkpoint: str) -> None:
        path = Path(checkpoint) / "ranker.json"
        if not path.exists():
            raise FileNotFoundError(f"no trained ranker at {path}; train one with {RETRAIN}")
        w = json.loads(path.read_text())
        if tuple(w.get("features", ())) != FEATURES:
            raise ValueError(f"{path} was trained on features {w.get('features')}, this version computes {list(FEATURES)}: "
                             f"retrain it with {RETRAIN}")
        self.kind, self.digest = w.get("kind", "linear"), weights_digest(w)  # what it is, and which fit
        self._scores = ranker_scorer(w)

    def select(self, plan: RetrievalPlan, candidates: Sequence[Hit], k: int) -> list[Hit]:
        if not candidates:
            return []
        scores = self._scores(candidate_features(plan.query, candidates))
        return rank_by(candidates, scores.tolist(), k, "ranker")


def default_selector() -> Selector:
    """The default Stage 2: the learned ranker shipped in checkpoints/ranker_trees (boosted trees; the linear
    ranker of checkpoints/ranker before them beat the trained cross-encoder within the token budget at 1/100 of
    its latency, see conf/suite_stage2.yaml; docs/results/locomo.md compares the two).

    Without that checkpoint (an install without the source tree and no
    ``$LIGHTMEM_CHECKPOINTS``) it keeps the Stage-1 order and says so once.
    """
    ckpt = checkpoint_path("ranker_trees")
    if (ckpt / "ranker.json").exists():
        return LearnedRanker(str(ckpt))
    log.warning("no trained ranker at %s (set LIGHTMEM_CHECKPOINTS or run `make train`); keeping the Stage-1 order", ckpt)
    return Stage1Selector()
