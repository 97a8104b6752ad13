"""The ceiling of aggregate memories, from LoCoMo's own annotations (issue 68, step 1).

Each LoCoMo session carries ``observation``: facts about each speaker, written by people, each citing the turns it
comes from. An aggregate gathers one speaker's facts on one topic across sessions into one memory that cites every
turn its facts cite, so a question whose evidence is scattered over sessions can be answered from one slot.

Grouping (why this design): per speaker, because a multi-hop question is nearly always about one person ("What
activities does Melanie do?"); by topic, found as groups of facts whose vectors (the default encoder) lie close,
because the annotations name no topics and a word-level rule would split "painting" from "pottery class" while a
question about activities needs both; across sessions, which is the point. Greedy and deterministic: facts in time
order, each joins the group whose centroid is closest when that cosine is at least ``tau`` and the group has room,
else starts one. A group of one fact is no aggregate (its turn is already a memory) and is not written. Each fact is
shown with the day it was said and its relative dates resolved from that day, so the memory reads the same
wherever the packing puts it.

The aggregates are written into the store after ingestion as ordinary memories (``ItemKind.ABSTRACT``, provenance =
the cited turns, vectors from the store's embedder), beside the turns. Stage 1 finds them, the served ranker orders
them and the packing spends the budget on them like on any memory: nothing in the read path knows them.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from experiments.fact_keys.ceiling import cited_ids
from lightmem.datasets.formats import Conversation
from lightmem.retrieval.anchoring import dated
from lightmem.timeutil import spoken_date
from lightmem.types import ItemKind, MemoryItem


@dataclass(frozen=True)
class Fact:
    """One annotated observation: its text, its speaker, the day it was said and the turns it cites."""

    text: str
    speaker: str
    time: float
    turns: tuple[str, ...]


@dataclass
class Aggregate:
    """Facts about one speaker on one topic, in time order."""

    speaker: str
    facts: list[Fact] = field(default_factory=list)

    @property
    def turns(self) -> list[str]:
        return list(dict.fromkeys(t for f in self.facts for t in f.turns))

    def text(self) -> str:
        """``Speaker, over N sessions: [8 May 2023] fact; [25 May 2023] fact; ...`` with relative dates resolved."""
        days = len({spoken_date(f.time) for f in self.facts})
        parts = [f"[{spoken_date(f.time)}] {dated(f.text, f.time)}" for f in self.facts]
        return f"{self.speaker}, from {days} day{'s' if days > 1 else ''}: " + " ".join(parts)


def annotated_facts(raw: Mapping[str, Any], conv: Conversation) -> list[Fact]:
    """The observations of a raw LoCoMo sample, each with its session's time; citations of unknown turns are
    dropped, and so is a fact left citing none."""
    known = {t.turn_id for t in conv.turns}
    when = {s.session_id: s.timestamp for s in conv.sessions}
    out = []
    for key, per_speaker in (raw.get("observation") or {}).items():
        session = key.removesuffix("_observation")
        if session not in when:
            continue
        for speaker, items in per_speaker.items():
            for text, evidence in items:
                ids = tuple(cited_ids(evidence, known))
                if ids:
                    out.append(Fact(text, speaker, when[session], ids))
    return sorted(out, key=lambda f: f.time)


def topic_text(fact: Fact) -> str:
    """The fact with its speaker's name (and possessive) left out: what it is about, for grouping."""
    name = re.escape(fact.speaker.split()[0])
    return re.sub(rf"\b{name}(?:'s)?\b\s*", "", fact.text).strip()


def group_facts(facts: Sequence[Fact], vectors: np.ndarray, tau: float, max_facts: int) -> list[Aggregate]:
    """Per speaker, greedy centroid grouping of unit ``vectors`` (one row per fact, in ``facts``' order); groups of
    one fact are dropped."""
    groups: list[tuple[Aggregate, np.ndarray]] = []
    for fact, vec in zip(facts, vectors):
        best, best_sim = None, tau
        for i, (agg, total) in enumerate(groups):
            if agg.speaker != fact.speaker or len(agg.facts) >= max_facts:
                continue
            sim = float(total @ vec) / max(float(np.linalg.norm(total)), 1e-9)
            if sim >= best_sim:
                best, best_sim = i, sim
        if best is None:
            groups.append((Aggregate(fact.speaker, [fact]), vec.astype(np.float64).copy()))
        else:
            groups[best][0].facts.append(fact)
            groups[best] = (groups[best][0], groups[best][1] + vec)
    return [agg for agg, _ in groups if len(agg.facts) > 1]


def aggregate_items(memory: Any, user_id: str, aggregates: Sequence[Aggregate]) -> list[MemoryItem]:
    """Write ``aggregates`` to ``memory``'s store as abstract memories of ``user_id`` (one transaction)."""
    if not aggregates:
        return []
    texts = [a.text() for a in aggregates]
    vecs = np.asarray(memory.embedder.encode(texts), dtype=np.float32)
    counts = memory.embedder.token_counter().count(texts)
    now = memory.clock()
    items = [
        MemoryItem(id=memory.store.new_id(), user_id=user_id, text=text, provenance=a.turns, created_at=now,
                   event_time=max(f.time for f in a.facts), last_access=now, kind=ItemKind.ABSTRACT,
                   valid_from=min(f.time for f in a.facts), n_tokens=int(n),
                   metadata={"aggregate": "annotated", "facts": len(a.facts)})
        for a, text, n in zip(aggregates, texts, counts)
    ]
    return memory.store.write(user_id, [], items, vecs, now)


class AnnotatedAggregates:
    """An ``after_ingest`` hook of the LoCoMo harness: writes each conversation's annotated aggregates into the
    system's store after ingestion (the conversation id is the user, as the harness names it).

    Args:
        path: The LoCoMo file whose samples carry ``observation`` (the one being evaluated).
        tau: The cosine a fact needs to its group's centroid to join it.
        max_facts: The most facts one aggregate holds (bounds its tokens: a fact is ~20).
    """

    def __init__(self, path: str, tau: float = 0.55, max_facts: int = 6) -> None:
        from lightmem.datasets.formats import read_json
        from lightmem.datasets.locomo import parse_locomo

        raw = read_json(path)
        raw = raw if isinstance(raw, list) else [raw]
        self.raw = {conv.conv_id: r for conv, r in zip(parse_locomo(raw), raw)}
        self.tau, self.max_facts = tau, max_facts
        self.written: dict[str, list[MemoryItem]] = {}

    def build(self, memory: Any, conv: Conversation) -> list[Aggregate]:
        facts = annotated_facts(self.raw.get(conv.conv_id, {}), conv)
        if not facts:
            return []
        # the speaker's name is in nearly every fact: embedded with it, facts group by person and time, not topic
        vecs = np.asarray(memory.embedder.encode([topic_text(f) for f in facts]), dtype=np.float32)
        vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-9)
        return group_facts(facts, vecs, self.tau, self.max_facts)

    def __call__(self, memory: Any, conv: Conversation) -> dict[str, Any]:
        aggregates = self.build(memory, conv)
        items = aggregate_items(memory, conv.conv_id, aggregates)
        memory.flush_index()
        self.written[conv.conv_id] = items
        # the harness sums the ``injected_`` stats over conversations (results.json: cost.injected)
        return {"injected_aggregates": len(items), "injected_aggregate_facts": sum(len(a.facts) for a in aggregates),
                "injected_aggregate_tokens": sum(i.n_tokens for i in items)}
