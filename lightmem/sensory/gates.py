"""Which turns are worth summarizing: SimpleMem's entropy-aware gate and the query-aware
pipeline's importance windows. Pure functions of entity sets and L2-normalized embeddings;
they return keep flags, and a dropped turn stays in the store's turn table (provenance).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


def information_score(n_new_entities: int, n_turns: int, window_vec: np.ndarray, prev_vec: np.ndarray | None,
                      alpha: float = 0.5) -> float:
    """SimpleMem Eq. 1: H(W) = α·|E_new|/|W| + (1−α)·(1 − cos(E(W), E(H_prev))).

    With no history (the first window of a user) the semantic novelty is 1.
    """
    novelty = 1.0 if prev_vec is None else 1.0 - float(_unit(window_vec) @ _unit(prev_vec))
    return alpha * n_new_entities / max(n_turns, 1) + (1.0 - alpha) * novelty


def _unit(v: np.ndarray) -> np.ndarray:
    return v / max(float(np.linalg.norm(v)), 1e-12)


@dataclass
class GateHistory:
    """The turns before the next block (H_prev of its first window): their vectors and entities."""

    vectors: np.ndarray | None = None
    entities: list[set[str]] = field(default_factory=list)


def entropy_gate(entities: Sequence[set[str]], vectors: np.ndarray, window: int = 10, stride: int = 5, alpha: float = 0.5,
                 tau: float = 0.35, history: GateHistory | None = None) -> tuple[list[bool], list[float], GateHistory]:
    """SimpleMem Eq. 2 over sliding windows: a turn is kept when any window holding it scores ≥ τ.

    Windows of ``window`` turns start every ``stride`` turns (the last may be shorter); H_prev of
    a window is the ``window`` turns before it, reaching into ``history`` for a block's start.

    Returns:
        (keep flag per turn, score per window, history for the next block).
    """
    if window <= 0 or stride <= 0:
        raise ValueError("window and stride must be positive")
    n = len(entities)
    if n == 0:
        return [], [], history or GateHistory()
    hist = history or GateHistory()
    h_vecs = hist.vectors if hist.vectors is not None else np.zeros((0, vectors.shape[1]), dtype=np.float32)
    all_vecs = np.vstack([h_vecs, vectors]) if len(h_vecs) else np.asarray(vectors)
    all_ents = list(hist.entities) + [set(e) for e in entities]
    off = len(hist.entities)
    keep, scores = [False] * n, []
    starts = list(range(0, max(n - window, 0) + 1, stride))
    if starts[-1] + window < n:
        starts.append(starts[-1] + stride)
    for s in starts:
        e = min(s + window, n)
        a, b = off + s, off + e
        prev_lo = max(0, a - window)
        prev_vec = all_vecs[prev_lo:a].mean(axis=0) if a > prev_lo else None
        seen = set().union(*all_ents[prev_lo:a]) if a > prev_lo else set()
        new = set().union(*all_ents[a:b]) - seen
        score = information_score(len(new), e - s, all_vecs[a:b].mean(axis=0), prev_vec, alpha)
        scores.append(score)
        if score >= tau:
            for i in range(s, e):
                keep[i] = True
    tail = max(0, len(all_ents) - window)
    return keep, scores, GateHistory(all_vecs[tail:].copy(), all_ents[tail:])


def importance_windows(anchors: Sequence[bool], vectors: np.ndarray, radius: int = 10, tau: float = 0.30) -> list[bool]:
    """Query-aware pipeline §III.A–B at write time: anchors (turns naming a key entity) are kept;
    a turn within ±``radius`` of an anchor is kept when its cosine with one of those anchors
    reaches ``tau``. Everything else is dropped."""
    n = len(anchors)
    keep = [bool(a) for a in anchors]
    idx = [i for i, a in enumerate(anchors) if a]
    if not idx:
        return keep
    sims = np.asarray(vectors) @ np.asarray(vectors)[idx].T  # [n, n_anchors]
    pos = np.asarray(idx)
    for i in range(n):
        if keep[i]:
            continue
        near = np.abs(pos - i) <= radius
        if near.any() and float(sims[i, near].max()) >= tau:
            keep[i] = True
    return keep
