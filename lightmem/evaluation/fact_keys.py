"""A ceiling for fact keys (SLM-3 writing facts that index their source turns), taken from LoCoMo's own
annotations: each session's ``observation`` lists facts about a speaker, each citing the turns it comes from.

Dense first hop only: a question's evidence turns are ranked by cosine to the question, with each turn keyed by

- ``text``: ``"Speaker: text"``, as the default writer keys it;
- ``text+facts``: the text followed by every fact citing the turn (one merged key, as LongMemEval's authors did);
- ``facts+text``: the same, facts first (the encoder reads 128 tokens: this order keeps the facts);
- ``text|fact items``: the text, or any fact citing the turn if closer (facts as separate key items that
  point back to their turns).

``recall_all@N``: every evidence turn among the N closest. Gold facts are the best an SLM could write, so a key
that does not gain here will not gain with generated facts either.
"""
from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from lightmem.datasets.formats import Conversation

KEYS = ("text", "text+facts", "facts+text", "text|fact items")
CATEGORIES = ("1", "2", "3", "4")  # LoCoMo's answerable categories (5 is adversarial)


def cited_facts(raw: Mapping[str, Any], turn_ids: Sequence[str]) -> list[tuple[str, list[str]]]:
    """(fact, the ids of the turns it cites) from a raw LoCoMo sample's ``observation``; citations of turns
    that do not exist are dropped, and so is a fact left citing none."""
    known = set(turn_ids)
    out = []
    for session in (raw.get("observation") or {}).values():
        for items in session.values():
            for fact, evidence in items:
                ids = evidence if isinstance(evidence, list) else re.split(r"[;,\s]+", str(evidence))
                ids = [i.strip() for i in ids if i.strip() in known]
                if ids:
                    out.append((fact, ids))
    return out


def turn_keys(texts: Sequence[str], turn_ids: Sequence[str], facts: Sequence[tuple[str, list[str]]]) -> dict[str, list[str]]:
    """The merged keys of each turn (``text``, ``text+facts``, ``facts+text``)."""
    by_turn: dict[str, list[str]] = defaultdict(list)
    for fact, ids in facts:
        for i in ids:
            by_turn[i].append(fact)
    return {
        "text": list(texts),
        "text+facts": [" ".join([t, *by_turn[i]]) for t, i in zip(texts, turn_ids)],
        "facts+text": [" ".join([*by_turn[i], t]) for t, i in zip(texts, turn_ids)],
    }


def worst_rank(scores: np.ndarray, evidence: Sequence[int]) -> int:
    """The rank (0 = closest) of the evidence turn ranked last; ties go to the earlier turn."""
    order = np.argsort(-scores, kind="stable")
    rank = np.empty(len(scores), dtype=int)
    rank[order] = np.arange(len(scores))
    return int(max(rank[e] for e in evidence))


def conversation_ranks(conv: Conversation, raw: Mapping[str, Any], embedder) -> list[dict[str, Any]]:
    """Per answerable question: the question, its category and each key's worst evidence rank."""
    turns = [t for s in conv.sessions for t in s.turns]
    ids = [t.turn_id for t in turns]
    pos = {i: n for n, i in enumerate(ids)}
    facts = cited_facts(raw, ids)
    vecs = {k: embedder.encode(v) for k, v in turn_keys([f"{t.speaker}: {t.text}" for t in turns], ids, facts).items()}
    fact_vecs = embedder.encode([f for f, _ in facts]) if facts else None
    qa = [q for q in conv.qa if str(q.category) in CATEGORIES and q.evidence and all(e in pos for e in q.evidence)]
    if not qa:
        return []
    out = []
    for q, v in zip(qa, embedder.encode([q.question for q in qa], is_query=True)):
        scores = {k: m @ v for k, m in vecs.items()}
        best = scores["text"].copy()
        if fact_vecs is not None:
            for (_, cited), s in zip(facts, fact_vecs @ v):
                for i in cited:
                    best[pos[i]] = max(best[pos[i]], float(s))
        scores["text|fact items"] = best
        evidence = [pos[e] for e in q.evidence]
        out.append({"question": q.question, "category": str(q.category),
                    "ranks": {k: worst_rank(s, evidence) for k, s in scores.items()}})
    return out


def recall_table(rows: Sequence[Mapping[str, Any]], ns: Sequence[int]) -> dict[str, dict[str, dict[int, list[float]]]]:
    """key → category (and ``all``) → N → per-question 1.0/0.0 (all evidence within the N closest)."""
    out: dict[str, dict[str, dict[int, list[float]]]] = {k: defaultdict(lambda: defaultdict(list)) for k in KEYS}
    for row in rows:
        for k in KEYS:
            for n in ns:
                hit = float(row["ranks"][k] < n)
                out[k][row["category"]][n].append(hit)
                out[k]["all"][n].append(hit)
    return out
