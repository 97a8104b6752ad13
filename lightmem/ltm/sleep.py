"""Sleep-time update (LightMem §3.3): update queues over MTM, decisions applied offline.

For each target entry e_i an update queue holds the top-k most similar entries with a
later timestamp (Eq. in §3.3: t_j ≥ t_i, j ≠ i). Queues are independent, so their
decisions are computed in parallel (vectorised rules, or one batched LLM call), then
applied in time order in the consolidation transaction.

Decisions, acting on the target only: ``merge`` (the newer entry says the same: the target
is superseded by it and its provenance moves to it), ``update`` (the newer entry replaces
or contradicts it: the target's validity ends), ``ignore``. Nothing is deleted.
"""
from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel

from lightmem.llm import prompts
from lightmem.llm.base import LLM
from lightmem.llm.jsonio import call_json
from lightmem.roles.maintenance import slot

log = logging.getLogger(__name__)


class Decision(str, enum.Enum):
    MERGE = "merge"
    UPDATE = "update"
    IGNORE = "ignore"


@dataclass(frozen=True)
class QueueSpec:
    """Attributes:
        k: Length n of each update queue.
        min_similarity: Entries less similar than this never enter a queue.
        merge_similarity: Rule decider: at or above this cosine the newer entry merges the target.
    """

    k: int = 3
    min_similarity: float = 0.5
    merge_similarity: float = 0.9


def update_queues(vecs: np.ndarray, order: np.ndarray, targets: Sequence[int], k: int,
                  min_similarity: float) -> dict[int, list[tuple[int, float]]]:
    """Q(e_i) for each target row i: up to ``k`` rows j ≠ i, later than i, most similar first.

    ``order`` ranks rows in time (event time, then write order), so two entries of the same
    moment never queue each other. Pure.
    """
    out: dict[int, list[tuple[int, float]]] = {}
    if len(vecs) == 0 or not len(targets):
        return out
    sims = np.asarray(vecs, dtype=np.float32)[list(targets)] @ np.asarray(vecs, dtype=np.float32).T
    for row, i in enumerate(targets):
        s = sims[row].copy()
        s[(order <= order[i])] = -np.inf
        s[s < min_similarity] = -np.inf
        cand = np.flatnonzero(np.isfinite(s))
        if cand.size:
            top = cand[np.argsort(-s[cand], kind="stable")[:k]]
            out[int(i)] = [(int(j), float(s[j])) for j in top]
    return out


def rule_decision(old: str, new: str, similarity: float, merge_similarity: float) -> Decision:
    """Merge near-duplicates; update a slot fact ("lives in X") the newer entry changes; else ignore."""
    if similarity >= merge_similarity:
        return Decision.MERGE
    a, b = slot(old), slot(new)
    if a and b and a[:2] == b[:2] and a[2] != b[2]:
        return Decision.UPDATE
    return Decision.IGNORE


class _DecisionOut(BaseModel):
    decision: Literal["merge", "update", "ignore", "MERGE", "UPDATE", "IGNORE"]


def decide(pairs: Sequence[tuple[str, str, float]], spec: QueueSpec, llm: LLM | None = None) -> list[Decision]:
    """Decisions for (old text, new text, cosine) pairs: the rules, or one batched LLM call
    whose malformed answers fall back to the rules."""
    rules = [rule_decision(o, n, s, spec.merge_similarity) for o, n, s in pairs]
    if llm is None or not pairs:
        return rules
    texts = [prompts.UPDATE.format(old=o, new=n) for o, n, _ in pairs]
    answers = call_json(llm, texts, _DecisionOut, "consolidator", prompts.retry, 16)
    return [Decision(a.decision.lower()) if a is not None else r for a, r in zip(answers, rules)]


@dataclass(frozen=True)
class Change:
    """What applying the queues does to one target: superseded by ``by`` (and, for a
    merge, the target's provenance moves to ``by``)."""

    target: int
    by: int
    decision: Decision


def resolve(queues: dict[int, list[tuple[int, float]]], decisions: dict[tuple[int, int], Decision],
            order: np.ndarray) -> list[Change]:
    """The first non-ignore decision of each queue, targets oldest first. Pure."""
    out = []
    for i in sorted(queues, key=lambda r: order[r]):
        for j, _ in queues[i]:
            d = decisions.get((i, j), Decision.IGNORE)
            if d is not Decision.IGNORE:
                out.append(Change(i, j, d))
                break
    return out
