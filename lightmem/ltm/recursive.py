"""Recursive consolidation (SimpleMem §2.2): dense clusters of MTM entries → abstract entries.

Affinity ω_ij = β·cos(v_i, v_j) + (1 − β)·exp(−λ·|t_i − t_j|) (Eq. 5, t in days). A cluster
is grown greedily from a seed while its mean pairwise affinity stays at or above τ_cluster
and each member's affinity to the seed does too. A cluster becomes one abstract entry
(Eq. 6); its members are archived, never deleted, and the abstract lists them.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, Field

from lightmem.llm import prompts
from lightmem.llm.base import LLM
from lightmem.llm.jsonio import call_json

DAY = 86_400.0


@dataclass(frozen=True)
class ClusterSpec:
    """Attributes:
        beta: β, weight of semantic similarity against temporal proximity.
        lam: λ, temporal decay per day.
        tau: τ_cluster (0.85 in SimpleMem).
        min_size: Smallest cluster that is abstracted.
        max_size: Largest cluster.
        neighbours: Nearest entries looked at around each seed.
        max_words: The extractive abstract keeps every member's text; clusters longer than
            this are left alone (nothing is abstracted lossily without a model).
    """

    beta: float = 0.8
    lam: float = 0.05
    tau: float = 0.85
    min_size: int = 3
    max_size: int = 6
    neighbours: int = 12
    max_words: int = 200


def affinity(vecs: np.ndarray, times: np.ndarray, beta: float, lam: float) -> np.ndarray:
    """The (n, n) matrix of ω_ij; ``times`` in Unix seconds. Pure."""
    v = np.asarray(vecs, dtype=np.float32)
    t = np.asarray(times, dtype=np.float64) / DAY
    return beta * (v @ v.T) + (1.0 - beta) * np.exp(-lam * np.abs(t[:, None] - t[None, :]))


def dense_clusters(omega: np.ndarray, seeds: Sequence[int], tau: float, min_size: int, max_size: int) -> list[list[int]]:
    """Disjoint clusters grown from ``seeds`` in order (greedy, mean pairwise ω ≥ τ). Pure."""
    used: set[int] = set()
    out = []
    for s in seeds:
        if s in used:
            continue
        members = [s]
        for j in np.argsort(-omega[s], kind="stable"):
            j = int(j)
            if j == s or j in used or omega[s, j] < tau or len(members) >= max_size:
                continue
            trial = [*members, j]
            sub = omega[np.ix_(trial, trial)]
            mean = (sub.sum() - np.trace(sub)) / (len(trial) * (len(trial) - 1))
            if mean >= tau:
                members = trial
        if len(members) >= min_size:
            out.append(sorted(members))
            used.update(members)
    return out


def extractive_abstract(texts: Sequence[str], max_words: int) -> str | None:
    """Every member's distinct sentences in order, joined; None when that exceeds ``max_words``."""
    seen: list[str] = []
    for t in texts:
        for sent in re.split(r"(?<=[.!?])\s+", t.strip()):
            if sent and sent.lower() not in {s.lower() for s in seen}:
                seen.append(sent)
    text = " ".join(seen)
    return text if len(text.split()) <= max_words else None


class _AbstractOut(BaseModel):
    text: str = Field(min_length=3, max_length=2000)


def synthesize(clusters: Sequence[Sequence[str]], max_words: int, llm: LLM | None = None) -> list[str | None]:
    """G_syn of each cluster: the LLM's summary when given (extractive when it fails), else extractive."""
    extractive = [extractive_abstract(c, max_words) for c in clusters]
    if llm is None or not clusters:
        return extractive
    texts = [prompts.ABSTRACT.format(entries=prompts.bullet(list(c))) for c in clusters]
    answers = call_json(llm, texts, _AbstractOut, "consolidator", prompts.retry, 256)
    return [a.text.strip() if a is not None else e for a, e in zip(answers, extractive)]
