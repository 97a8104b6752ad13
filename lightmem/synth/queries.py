"""Queries that follow graph paths (1-3 hops), temporal and unanswerable ones, as
(Query, Subgraph, Path) samples: the candidates of the query's subgraph are the memory
items on the path (positives), items of its neighbourhood (hard negatives) and random items.
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field

from lightmem.synth.dialogue import Rendered, human_date
from lightmem.synth.graph import LIST_QUESTIONS, RELATIONS, Fact, UserGraph

# LoCoMo categories, so that synthetic conversations run through the LoCoMo evaluation.
CATEGORY = {"1-hop": 4, "2-hop": 1, "3-hop": 1, "temporal": 2, "unanswerable": 5, "list": 1}
UNKNOWN = "Not mentioned in the conversation"


@dataclass
class Query:
    text: str
    answer: str
    kind: str  # 1-hop | 2-hop | 3-hop | temporal | unanswerable | list
    path: list[Fact]
    anchor: set[str] = field(default_factory=set)  # entities named in the query (their neighbourhood holds hard negatives)

    @property
    def hops(self) -> int:
        return len(self.path)


def _person_q(g: UserGraph, f: Fact, who: str) -> tuple[str, str] | None:
    if f.rel == "lives_in":
        return f"Where does {who} live?", f.obj
    if f.rel == "works_at":
        return f"Where does {who} work?", f.obj
    if f.rel == "has_pet":
        return f"What is the name of {who}'s {f.get('species')}?", f.obj
    if f.rel == "likes":
        return f"What is {who} really into?", f.obj
    return None


def make_queries(g: UserGraph, facts: list[Fact], rng: random.Random) -> list[Query]:
    """Every query the graph supports; the caller samples from them."""
    out: list[Query] = []
    by = {(f.subj, f.rel): f for f in facts}
    u = g.user
    for p in g.people:
        intro = by[(u, p.relation)]
        for f in (x for x in facts if x.subj == p.name):
            if q := _person_q(g, f, p.name):
                out.append(Query(q[0], q[1], "1-hop", [f], {p.name}))
            if q := _person_q(g, f, f"{u}'s {p.relation}"):
                out.append(Query(q[0], q[1], "2-hop", [intro, f], {u}))
            if f.rel == "works_at" and (loc := by.get((f.obj, "located_in"))):
                out.append(Query(f"In which city is the company where {u}'s {p.relation} works based?", loc.obj, "3-hop",
                                 [intro, f, loc], {u}))
                out.append(Query(f"In which city is the company {p.name} works for based?", loc.obj, "2-hop", [f, loc],
                                 {p.name}))
        if (p.name, "has_pet") not in by:
            out.append(Query(f"What is the name of {p.name}'s pet?", UNKNOWN, "unanswerable", [], {p.name}))
    for f in facts:
        if f.subj != u:
            continue
        if f.rel == "attended":
            out.append(Query(f"When did {u} go to the {f.obj}?", human_date(f.date or 0), "temporal", [f], {u}))
            out.append(Query(f"Who did {u} go to the {f.obj} with?", f.get("companion") or "", "1-hop", [f], {u}))
        elif f.rel == "likes":
            out.append(Query(f"What hobby has {u} been getting into?", f.obj, "1-hop", [f], {u}))
        elif f.rel == "works_at" and (loc := by.get((f.obj, "located_in"))):
            out.append(Query(f"In which city is the company {u} works at based?", loc.obj, "2-hop", [f, loc], {u}))
    lists: dict[str, list[Fact]] = {}
    for f in facts:
        if f.subj == u and f.rel == "did":
            lists.setdefault(f.get("category") or "", []).append(f)
    for category, members in sorted(lists.items()):  # every member is evidence: the answer is the whole list
        out.append(Query(rng.choice(LIST_QUESTIONS[category]).format(u=u), ", ".join(f.obj for f in members), "list",
                         members, {u}))
    missing = [r for r in RELATIONS if (u, r) not in by]
    for r in rng.sample(missing, k=min(2, len(missing))):
        out.append(Query(f"Where does {u}'s {r} live?", UNKNOWN, "unanswerable", [], {u}))
    return out


def subgraph_candidates(q: Query, g: UserGraph, r: Rendered, rng: random.Random, n: int, n_hard: int) -> list[dict]:
    """Positives (the path's turns), hard negatives (turns of neighbouring facts), random turns; shuffled."""
    pos = [r.fact_turn[f.fid] for f in q.path]
    entities = set(q.anchor) | {f.subj for f in q.path} | {f.obj for f in q.path}
    rels = {f.rel for f in q.path} | ({"lives_in", "has_pet"} if q.kind == "unanswerable" else set())
    hard = sorted({r.fact_turn[f.fid] for f in r.facts if (f.subj in entities or f.obj in entities or f.rel in rels)} - set(pos))
    rng.shuffle(hard)
    hard = hard[:n_hard]
    rest = sorted(set(r.turn_text) - set(pos) - set(hard))
    rnd = rng.sample(rest, k=max(0, min(len(rest), n - len(pos) - len(hard))))
    cands = [{"id": d, "text": r.turn_text[d], "label": 1, "kind": "pos"} for d in pos]
    cands += [{"id": d, "text": r.turn_text[d], "label": 0, "kind": "hard"} for d in hard]
    cands += [{"id": d, "text": r.turn_text[d], "label": 0, "kind": "random"} for d in rnd]
    rng.shuffle(cands)
    return cands


def to_sample(q: Query, g: UserGraph, r: Rendered, conv_id: str, idx: int, cands: list[dict]) -> dict:
    return {
        "id": f"{conv_id}-q{idx}", "conversation": conv_id, "user": g.user, "query": q.text, "answer": q.answer,
        "kind": q.kind, "hops": q.hops,
        "path": [{**{k: v for k, v in asdict(f).items() if k != "extra"}, **dict(f.extra), "turn": r.fact_turn[f.fid]}
                 for f in q.path],
        "candidates": cands,
    }
