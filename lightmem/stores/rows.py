"""The backend-free rules of a store's rows, which both backends call: the column order of an item
and of the LTM graph's nodes and edges, an item row turned back into a ``MemoryItem``, which items a
consolidation cycle takes first and which capacity archives, which fields an update may change,
when an update erases an item's earlier texts, and what erasing a user does to the shared LTM graph."""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lightmem.errors import InvalidInputError
from lightmem.timeutil import recency_decay
from lightmem.types import ItemKind, MemoryItem


def retention_score(
    last_access: np.ndarray, access_count: np.ndarray, utility: np.ndarray, now: float, half_life_days: float
) -> np.ndarray:
    """What capacity eviction keeps: recency(last access) × (1 + ln(1 + accesses)) × utility."""
    rec = recency_decay(last_access, now, half_life_days)
    return rec * (1.0 + np.log1p(np.asarray(access_count, dtype=np.float64))) * np.asarray(utility, dtype=np.float64)


ITEM_COLS = ("rid, id, user_id, text, provenance, created_at, event_time, last_access, access_count, utility, topic, "
             "entities, kind, valid_from, valid_to, superseded_by, archived, n_tokens, metadata, keys, updated_at")
# The same columns read through the alias ``i`` (the consolidation-candidate joins).
CANDIDATE_COLS = ", ".join(f"i.{c.strip()}" for c in ITEM_COLS.split(","))
NODE_COLS = "id, key, kind, text, facts, confidence, evidence, first_seen, last_seen, last_cycle, active"
EDGE_COLS = "src, dst, type, label, confidence, evidence"
UPDATABLE = frozenset({"text", "n_tokens", "utility", "topic", "entities", "valid_from", "valid_to", "superseded_by",
                       "metadata", "event_time", "provenance"})


def row_to_item(row: Sequence[Any]) -> MemoryItem:
    """An ``ITEM_COLS`` row (JSON fields as text) → ``MemoryItem``."""
    (_, iid, uid, text, prov, created, event, last, count, util, topic, ents, kind, vf, vt, sup, arch, ntok, meta,
     keys, updated) = row
    return MemoryItem(
        id=iid, user_id=uid, text=text, provenance=json.loads(prov), created_at=created, event_time=event,
        last_access=last, access_count=count, utility=util, topic=topic, entities=json.loads(ents),
        kind=ItemKind(kind), valid_from=vf, valid_to=vt, superseded_by=sup, archived=bool(arch), n_tokens=ntok,
        metadata=json.loads(meta), keys=keys or "", updated_at=created if updated is None else updated,
    )


def index_text_sql(alias: str = "") -> str:
    """SQL (SQLite and PostgreSQL alike) for an item row's ``MemoryItem.index_text``: what its vector and
    BM25 terms are computed from."""
    a = f"{alias}." if alias else ""
    return f"(CASE WHEN {a}keys = '' THEN {a}text ELSE {a}text || ' ' || {a}keys END)"


def merged_keys(facts: Sequence[str]) -> str:
    """An item's ``keys`` from the texts of the facts that cite it, in the order they were written."""
    return " ".join(f.strip() for f in facts if f.strip())


def new_candidates(new: Sequence[tuple[int, MemoryItem]], limit: int, under_pressure: bool,
                   half_life_days: float) -> list[tuple[int, MemoryItem, str]]:
    """Algorithm 3, step 1, for the never-consolidated items ``new`` (rid order): at most ``limit`` of them as
    (rid, item, reason), ``new``; under capacity pressure the least retained first, ``pressure`` (they are
    next to be archived). Each backend then fills what is left with its ``reactivated`` items."""
    new = list(new)
    if under_pressure and new:
        scores = retention_score(np.asarray([it.last_access for _, it in new]), np.asarray([it.access_count for _, it in new]),
                                 np.asarray([it.utility for _, it in new]), now=max(it.last_access for _, it in new),
                                 half_life_days=half_life_days)
        new = [new[i] for i in np.argsort(scores, kind="stable")]
    return [(rid, it, "pressure" if under_pressure else "new") for rid, it in new[:limit]]


def to_archive(n_active: int, capacity: int) -> int:
    """How many of a user's ``n_active`` active items to archive: none within ``capacity``; past it, down to 1% under
    it (capacities of 100 and more), so that a user at capacity is not read whole on each write that follows (a batch
    of 1,000 single-turn adds for a user at 10,000 read all 10,000 rows 1,000 times)."""
    if n_active <= capacity:
        return 0
    return min(n_active, n_active - capacity + capacity // 100)


def least_retained(rows: Sequence[Sequence[Any]], n: int, now: float, half_life_days: float) -> list[Sequence[Any]]:
    """The capacity rule: the ``n`` least retained of ``rows`` (rid, id, last_access, access_count, utility, ...),
    by recency, access count and utility; ties keep the rows' order."""
    scores = retention_score(np.asarray([r[2] for r in rows]), np.asarray([r[3] for r in rows]),
                             np.asarray([r[4] for r in rows]), now=now, half_life_days=half_life_days)
    return [rows[i] for i in np.argsort(scores, kind="stable")[:n]]


def check_update(fields: Mapping[str, Any], has_vector: bool) -> None:
    """Refuse an update of fields outside ``UPDATABLE``, or a new text without its new vector."""
    unknown = set(fields) - UPDATABLE
    if unknown:
        raise InvalidInputError(f"cannot update fields {sorted(unknown)}; updatable: {sorted(UPDATABLE)}")
    if "text" in fields and not has_vector:
        raise InvalidInputError("a new text needs its new vector")


def rewrites_text(old_text: str, fields: Mapping[str, Any]) -> bool:
    """Whether an update gives the item a new text (which also deletes the fact keys citing it)."""
    return "text" in fields and fields["text"] != old_text


def forgets_old_text(old_text: str, fields: Mapping[str, Any], keep_history: bool) -> bool:
    """Whether an update erases the item's earlier texts from its history: it changes the text and
    the caller did not ask to keep history."""
    return rewrites_text(old_text, fields) and not keep_history


# -- the LTM graph's partitions (scopes) --------------------------------------------------------------------
SHARED_SCOPE = ""  # the scope of the shared graph (``LTMOptions.scope="shared"``); no user id is empty


def node_document(name: str, facts: Sequence[str]) -> str:
    """What an LTM node's embedding and BM25 entry are computed from."""
    return name + (": " + " | ".join(facts) if facts else "")


def fact_digest(statement: str) -> str:
    """The key under which a shared node records who stated ``statement`` (``ltm_sources.fact``)."""
    return hashlib.sha256(statement.encode("utf-8")).hexdigest()[:32]


@dataclass
class SharedErasure:
    """What erasing one user does to the shared graph (``shared_erasure``).

    Attributes:
        nodes: Nodes every recorded piece of evidence of which came from the user: deleted.
        kept: Nodes other users support too: node id → (facts kept, evidence left), for those that change.
        facts_removed: Statements removed from the kept nodes (stated by the user and no one else).
        edges: Edges only the user supported: deleted.
        edge_evidence: Edges others support too: (src, dst, type) → evidence left.
    """

    nodes: list[int] = field(default_factory=list)
    kept: dict[int, tuple[list[str], int]] = field(default_factory=dict)
    facts_removed: int = 0
    edges: list[tuple[int, int, str]] = field(default_factory=list)
    edge_evidence: dict[tuple[int, int, str], int] = field(default_factory=dict)


def shared_erasure(user_id: str, node_sources: Sequence[Sequence[Any]], nodes: Mapping[int, tuple[list[str], int]],
                   edge_sources: Sequence[Sequence[Any]], edges: Mapping[tuple[int, int, str], int]) -> SharedErasure:
    """The shared graph without ``user_id``'s contributions.

    Args:
        user_id: The user being erased.
        node_sources: Every ``ltm_sources`` row (node, user_id, fact digest, evidence) of the nodes the user supported.
        nodes: Those nodes' (facts, evidence).
        edge_sources: Every ``ltm_edge_sources`` row (src, dst, type, user_id, evidence) of the edges the user supported.
        edges: Those edges' evidence.

    A node (edge) whose only recorded contributor is the user goes; otherwise it loses the user's evidence and
    the statements that the user alone stated. A statement another user stated as well stays: it came from them
    too. Pure.
    """
    out = SharedErasure()
    by_node: dict[int, list[Sequence[Any]]] = {}
    for row in node_sources:
        by_node.setdefault(int(row[0]), []).append(row)
    for nid, rows in sorted(by_node.items()):
        if nid not in nodes:
            continue
        mine = [r for r in rows if r[1] == user_id]
        theirs = {r[2] for r in rows if r[1] != user_id}
        if not mine:
            continue
        if len(mine) == len(rows):
            out.nodes.append(nid)
            continue
        facts, evidence = nodes[nid]
        only_mine = {r[2] for r in mine} - theirs
        kept = [f for f in facts if fact_digest(f) not in only_mine]
        left = max(1, evidence - sum(int(r[3]) for r in mine))
        if kept != facts or left != evidence:
            out.kept[nid] = (kept, left)
            out.facts_removed += len(facts) - len(kept)
    by_edge: dict[tuple[int, int, str], list[Sequence[Any]]] = {}
    for row in edge_sources:
        by_edge.setdefault((int(row[0]), int(row[1]), str(row[2])), []).append(row)
    gone = set(out.nodes)
    for key, rows in sorted(by_edge.items()):
        if key not in edges:
            continue
        mine = [r for r in rows if r[3] == user_id]
        if not mine:
            continue
        if len(mine) == len(rows) or key[0] in gone or key[1] in gone:
            out.edges.append(key)
        else:
            out.edge_evidence[key] = max(1, edges[key] - sum(int(r[4]) for r in mine))
    return out
