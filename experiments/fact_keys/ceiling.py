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

``AnnotatedFactKeyer`` gives the same facts to the served pipeline's own fact-key step (``ltm=fact_keys``): a
consolidation cycle keys each memory by the observations citing its turns, in the store, as SLM-3 would.

``pipeline_ceiling`` takes the same facts through the whole read path: each memory is stored and indexed (vector
and BM25 terms) under ``text + facts`` (``FactKeyedWriter``), Stage 1 and the served Stage 2 rank it as they rank
any memory, and the prompt packs the memory as written, without the facts (strict recall of the composed prompt,
as the ranker's trainer scores it: ``lightmem.training.ranker.ServedPacking``). ``run.py`` beside this file is the
command; docs/results/locomo.md records what it measured.
"""
from __future__ import annotations

import dataclasses
import json
import re
import tempfile
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from lightmem.datasets.formats import Conversation
from lightmem.types import Turn

KEYS = ("text", "text+facts", "facts+text", "text|fact items")
CATEGORIES = ("1", "2", "3", "4")  # LoCoMo's answerable categories (5 is adversarial)


def cited_ids(evidence: Any, known: set[str]) -> list[str]:
    """The turn ids an observation's ``evidence`` cites (a list, or one string split at ``;``, ``,`` and spaces),
    those not in ``known`` dropped."""
    ids = evidence if isinstance(evidence, list) else re.split(r"[;,\s]+", str(evidence))
    return [i.strip() for i in ids if i.strip() in known]


def cited_facts(raw: Mapping[str, Any], turn_ids: Sequence[str]) -> list[tuple[str, list[str]]]:
    """(fact, the ids of the turns it cites) from a raw LoCoMo sample's ``observation``; citations of turns
    that do not exist are dropped, and so is a fact left citing none."""
    known = set(turn_ids)
    out = []
    for session in (raw.get("observation") or {}).values():
        for items in session.values():
            for fact, evidence in items:
                ids = cited_ids(evidence, known)
                if ids:
                    out.append((fact, ids))
    return out


def turn_keys(texts: Sequence[str], turn_ids: Sequence[str], facts: Sequence[tuple[str, list[str]]]) -> dict[str, list[str]]:
    """The merged keys of each turn (``text``, ``text+facts``, ``facts+text``)."""
    by_turn = _by_turn(facts)
    return {
        "text": list(texts),
        "text+facts": [" ".join([t, *by_turn.get(i, ())]) for t, i in zip(texts, turn_ids)],
        "facts+text": [" ".join([*by_turn.get(i, ()), t]) for t, i in zip(texts, turn_ids)],
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


def _by_turn(facts: Sequence[tuple[str, list[str]]]) -> dict[str, list[str]]:
    """Turn id → the facts citing it, in their order."""
    out: dict[str, list[str]] = defaultdict(list)
    for fact, ids in facts:
        for i in ids:
            out[i].append(fact)
    return dict(out)


def facts_by_turn(raw: Mapping[str, Any], conv: Conversation) -> dict[str, list[str]]:
    """Turn id → the facts of ``raw``'s ``observation`` that cite it, in the file's order."""
    return _by_turn(cited_facts(raw, [t.turn_id for s in conv.sessions for t in s.turns]))


class AnnotatedFactKeyer:
    """A ``FactKeyer`` (``lightmem.ltm.fact_keys``) that returns LoCoMo's annotated observations instead of writing
    facts: each observation citing a turn of the batch's memories, citing those memories. The memories' user is
    the conversation's id (as ``eval/locomo.py`` names it); a user that is no conversation of ``path`` gets none.

    Args:
        path: A LoCoMo file whose samples carry ``observation``.
    """

    def __init__(self, path: str) -> None:
        from lightmem.datasets.formats import read_json
        from lightmem.datasets.locomo import parse_locomo

        raw = read_json(path)
        raw = raw if isinstance(raw, list) else [raw]
        self.facts_of: dict[str, list[tuple[str, list[str]]]] = {
            conv.conv_id: cited_facts(r, [t.turn_id for s in conv.sessions for t in s.turns])
            for conv, r in zip(parse_locomo(raw), raw)}

    def facts(self, items: Sequence[Any]) -> list[tuple[str, list[str]]]:
        out = []
        for user in dict.fromkeys(it.user_id for it in items):
            by_turn: dict[str, list[str]] = defaultdict(list)
            for it in items:
                if it.user_id == user:
                    for turn in it.provenance:
                        by_turn[turn].append(it.id)
            for fact, turns in self.facts_of.get(user, []):
                cited = list(dict.fromkeys(i for t in turns for i in by_turn.get(t, ())))
                if cited:
                    out.append((fact, cited))
        return out


class FactKeyedWriter:
    """Wraps a writer so that each entry it writes is stored under its text followed by the facts citing the
    entry's source turns (each fact once): the key the store embeds and indexes for BM25. ``written`` maps
    each such key back to the text the wrapped writer wrote, which a prompt of the memory would show."""

    def __init__(self, inner: Any, facts: Mapping[str, Sequence[str]]) -> None:
        self.inner, self.facts = inner, facts
        self.written: dict[str, str] = {}

    def write(self, turns: Sequence[Turn], context: Sequence[str] = ()) -> list[Any]:
        out = []
        for d in self.inner.write(turns, context):
            facts = list(dict.fromkeys(f for p in d.provenance for f in self.facts.get(p, ())))
            if facts:
                key = " ".join([d.text, *facts])
                self.written[key] = d.text
                d = dataclasses.replace(d, text=key)
            out.append(d)
        return out


def shown(groups: Sequence[dict[str, Any]], written: Mapping[str, str]) -> list[dict[str, Any]]:
    """``groups`` with each candidate's text as the prompt shows it: a fact-keyed memory's text as written."""
    from lightmem.training.selector import split_dated

    out = []
    for g in groups:
        texts = []
        for t in g["texts"]:
            day, text = split_dated(t)
            texts.append(f"[{day}] {written[text]}" if day and text in written else written.get(t, t))
        out.append({**g, "texts": texts})
    return out


def pipeline_ceiling(cfg: Any, convs: Sequence[Conversation], raws: Sequence[Mapping[str, Any]], budget: int = 600,
                     show_progress: bool = False) -> list[dict[str, Any]]:
    """Per answerable question of ``convs`` (their raw samples ``raws``), for the keys ``text`` and ``text+facts``:
    whether every evidence turn is among the Stage-1 candidates (``pool``) and packed whole into a ``budget``-token
    prompt in the order of ``cfg``'s ranker (``strict``). ``cfg`` is an evaluation config (conf/locomo.yaml) whose
    selector is a learned ranker."""
    from pathlib import Path

    from lightmem.config import SharedRuntime, build_embedder, build_memory
    from lightmem.retrieval.trees import ranker_scorer
    from lightmem.training.ranker import holds_evidence, mine_groups, ranker_order, served_packing

    checkpoint = cfg.selector.get("checkpoint")
    if not checkpoint:
        raise ValueError("pipeline_ceiling ranks with a learned ranker: use selector=ranker or another with a checkpoint")
    score = ranker_scorer(json.loads((Path(checkpoint) / "ranker.json").read_text()))
    embedder, shared = build_embedder(cfg), SharedRuntime(cfg)
    packing = served_packing(cfg)
    k = int(cfg.memory.k)
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for conv, raw in zip(convs, raws):
        facts = facts_by_turn(raw, conv)
        for key in ("text", "text+facts"):
            writer = FactKeyedWriter(shared.role(cfg.writer), facts if key == "text+facts" else {})
            with tempfile.TemporaryDirectory(prefix="lightmem-facts-") as scratch:
                def make_memory(conv_id: str, scratch: str = scratch, writer: FactKeyedWriter = writer) -> Any:
                    return build_memory(cfg, Path(scratch) / conv_id, embedder=embedder, shared=shared, writer=writer)

                groups = mine_groups(make_memory, [conv], "locomo", k, [int(c) for c in CATEGORIES], show_progress)
            seen: dict[tuple[str, ...], int] = defaultdict(int)
            for g in shown(groups, writer.written):
                _, order = ranker_order(g, score)
                evidence = set(g["evidence"])
                ask = (g["query"], *sorted(evidence))
                seen[ask] += 1  # a question asked twice with the same evidence is two rows
                row = rows.setdefault((conv.conv_id, *ask, str(seen[ask])),
                                      {"question": g["query"], "category": str(g["category"])})
                row[key] = {"pool": holds_evidence(g, order), "strict": holds_evidence(g, packing.kept(g, order, budget))}
    return list(rows.values())
