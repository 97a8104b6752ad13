"""The LTM knowledge graph: SQLite (truth, same database as MTM) + FAISS / BM25 views.

Nodes (Entity, Concept) and typed edges (IsA, HasProperty, RelatedTo, Implies) carry a
confidence and an evidence count accumulated across consolidation cycles (Algorithm 3,
steps 4-9). The tables hold no user id and no link back to MTM: what a user's episodes
taught is kept only as de-identified statements and counts.

Writes happen inside the consolidator's transaction (``integrate``, ``decay``) and return
a ``GraphDelta``; ``refresh(delta)`` updates the in-memory indexes after the commit, so a
rolled-back cycle leaves both the tables and the indexes as they were.
"""
from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lightmem.ltm.abstraction import KnowledgeUnit
from lightmem.retrieval import scoring
from lightmem.stores.lexical_index import LexicalIndex
from lightmem.stores.sqlite import SQLiteStore
from lightmem.stores.vector_index import VectorIndex
from lightmem.types import Edge, EdgeType, KnowledgeNode, NodeKind

LTM_SCHEMA = """
CREATE TABLE IF NOT EXISTS ltm_nodes (
  id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL UNIQUE, kind TEXT NOT NULL, text TEXT NOT NULL,
  facts TEXT NOT NULL DEFAULT '[]', confidence REAL NOT NULL, evidence INTEGER NOT NULL,
  first_seen REAL NOT NULL, last_seen REAL NOT NULL, last_cycle INTEGER NOT NULL, active INTEGER NOT NULL DEFAULT 1,
  embedding BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS ltm_edges (
  src INTEGER NOT NULL, dst INTEGER NOT NULL, type TEXT NOT NULL, label TEXT NOT NULL DEFAULT '',
  confidence REAL NOT NULL, evidence INTEGER NOT NULL, first_seen REAL NOT NULL, last_seen REAL NOT NULL,
  last_cycle INTEGER NOT NULL, active INTEGER NOT NULL DEFAULT 1,
  PRIMARY KEY (src, dst, type)
);
CREATE INDEX IF NOT EXISTS ltm_edges_dst ON ltm_edges (dst);
CREATE TABLE IF NOT EXISTS ltm_cycles (cycle INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, stats TEXT NOT NULL);
"""
_NODE_COLS = "id, key, kind, text, facts, confidence, evidence, first_seen, last_seen, last_cycle, active"


@dataclass(frozen=True)
class GraphSpec:
    """Merge, link and forgetting rules of the graph.

    Attributes:
        merge_threshold: Cosine at or above which a new unit merges into an existing node.
        link_threshold: Cosine above which a new node is linked (RelatedTo) to an anchor.
        anchors: Nearest existing nodes looked up per new node.
        initial_confidence: Confidence of a node or edge seen once.
        reinforce: Each new piece of evidence moves confidence this share of the way to 1.
        decay: Per-cycle factor on the confidence of weakly supported units not seen in the cycle.
        strong_evidence: Units with at least this much evidence do not decay.
        drop_below: Units whose confidence falls below this are dropped (kept on disk, inactive).
        max_facts: Supporting statements kept per node (newest).
    """

    merge_threshold: float = 0.9
    link_threshold: float = 0.6
    anchors: int = 2
    initial_confidence: float = 0.5
    reinforce: float = 0.3
    decay: float = 0.85
    strong_evidence: int = 3
    drop_below: float = 0.2
    max_facts: int = 3


@dataclass
class GraphPlan:
    """A batch prepared for ``integrate``: node drafts by key, merge targets, new vectors, links."""

    drafts: dict[str, dict[str, Any]] = field(default_factory=dict)
    edges: dict[tuple[str, str, EdgeType], tuple[int, str]] = field(default_factory=dict)
    merge: dict[str, int] = field(default_factory=dict)  # key → existing node id
    merged_facts: dict[int, list[str]] = field(default_factory=dict)
    merged_vecs: dict[int, np.ndarray] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    insert: dict[str, np.ndarray] = field(default_factory=dict)  # key → vector of a new node
    links: dict[str, list[int | str]] = field(default_factory=dict)  # new key → anchor ids / batch keys
    alias: dict[str, str] = field(default_factory=dict)  # key folded into an earlier key of the batch


@dataclass
class GraphDelta:
    """What a committed cycle changed: nodes to (re)index and nodes to drop from the index."""

    upserted: dict[int, tuple[KnowledgeNode, np.ndarray]] = field(default_factory=dict)
    dropped: set[int] = field(default_factory=set)
    edges_changed: bool = False
    counts: dict[str, int] = field(default_factory=lambda: {"nodes_added": 0, "nodes_merged": 0, "edges_added": 0,
                                                            "edges_reinforced": 0, "nodes_dropped": 0, "edges_dropped": 0})


def _row_to_node(r: Sequence[Any]) -> KnowledgeNode:
    return KnowledgeNode(id=int(r[0]), key=r[1], kind=NodeKind(r[2]), text=r[3], facts=json.loads(r[4]), confidence=r[5],
                         evidence=r[6], first_seen=r[7], last_seen=r[8], last_cycle=r[9], active=bool(r[10]))


def node_document(name: str, facts: Sequence[str]) -> str:
    """What a node's embedding and BM25 entry are computed from."""
    return name + (": " + " | ".join(facts) if facts else "")


class KnowledgeGraph:
    """The LTM graph over the store's SQLite database.

    Args:
        sql: The store's database (LTM tables are created in it).
        encode: Embeds texts (the Memory's embedder); vectors are L2-normalised.
        dim: Embedding dimension.
        spec: Merge, link and decay rules.
    """

    def __init__(self, sql: SQLiteStore, encode: Callable[[list[str]], np.ndarray], dim: int,
                 spec: GraphSpec | None = None) -> None:
        self.sql, self.encode, self.dim, self.spec = sql, encode, dim, spec or GraphSpec()
        with sql.lock:
            sql.connection.executescript(LTM_SCHEMA)
        self._lock = threading.RLock()
        self._seen_version = sql.data_version()
        self._load()

    # -- in-memory views -----------------------------------------------------------------------
    def _last_cycle(self) -> int:
        (cycle,), = self.sql.query("SELECT COALESCE(MAX(cycle), 0) FROM ltm_cycles")
        return int(cycle)

    def _sync(self) -> None:
        """Reload the views when another process committed a consolidation cycle (a PRAGMA otherwise)."""
        version = self.sql.data_version()
        if version == self._seen_version:
            return
        self._seen_version = version
        if self._last_cycle() != self._loaded_cycle:
            self._load()

    def _load(self) -> None:
        cycle = self._last_cycle()
        rows = self.sql.query(f"SELECT {_NODE_COLS}, embedding FROM ltm_nodes WHERE active = 1 ORDER BY id")
        vectors, lexical = VectorIndex(self.dim), LexicalIndex()
        nodes: dict[int, KnowledgeNode] = {}
        if rows:
            ids = np.asarray([r[0] for r in rows], dtype=np.int64)
            vecs = np.frombuffer(b"".join(r[11] for r in rows), dtype=np.float32).reshape(len(rows), self.dim)
            vectors.add(ids, vecs)
            for r in rows:
                node = _row_to_node(r)
                nodes[node.id] = node
                lexical.add(node.id, node_document(node.text, node.facts))
        with self._lock:
            self._vectors, self._lexical, self._nodes = vectors, lexical, nodes
            self._adj = self._load_edges()
            self._loaded_cycle = cycle

    def _load_edges(self) -> dict[int, list[Edge]]:
        adj: dict[int, list[Edge]] = {}
        for src, dst, et, label, conf, ev in self.sql.query(
            "SELECT src, dst, type, label, confidence, evidence FROM ltm_edges WHERE active = 1"
        ):
            e = Edge(src, dst, EdgeType(et), conf, ev, label)
            adj.setdefault(src, []).append(e)
            adj.setdefault(dst, []).append(e)
        return adj

    def refresh(self, delta: GraphDelta) -> None:
        """Apply a committed cycle's changes to the indexes (brief lock; searches see old or new)."""
        with self._lock:
            gone = [i for i in delta.dropped | set(delta.upserted) if i in self._vectors]
            if gone:
                self._vectors.remove(gone)
                self._lexical.remove(gone)
            for i in delta.dropped:
                self._nodes.pop(i, None)
            for i, (node, vec) in delta.upserted.items():
                if i in delta.dropped:
                    continue
                self._vectors.add(np.asarray([i]), vec[None, :])
                self._lexical.add(i, node_document(node.text, node.facts))
                self._nodes[i] = node
        if delta.edges_changed or delta.dropped:
            adj = self._load_edges()
            with self._lock:
                self._adj = adj

    def __len__(self) -> int:
        return len(self._nodes)

    # -- consolidation writes (inside the caller's transaction) ----------------------------------
    def prepare(self, units: Sequence[KnowledgeUnit]) -> "GraphPlan":
        """The expensive half of ``integrate``, run without any lock: group the batch by node
        key (one piece of evidence per unit), embed, find anchors, decide merge or insert."""
        sp, plan = self.spec, GraphPlan()
        drafts = plan.drafts
        for u in units:
            for n in u.nodes:
                d = drafts.setdefault(n.key, {"text": n.text, "kind": n.kind, "facts": [], "evidence": 0})
                d["evidence"] += 1
                if u.statement not in d["facts"]:
                    d["facts"].append(u.statement)
            for e in {(e.src, e.dst, e.type, e.label) for e in u.edges}:
                n_, label = plan.edges.get(e[:3], (0, e[3]))
                plan.edges[e[:3]] = (n_ + 1, label or e[3])
        if not drafts:
            return plan
        keys = list(drafts)
        docs = [node_document(drafts[k]["text"], drafts[k]["facts"][-1:]) for k in keys]
        enc = np.asarray(self.encode(docs + [drafts[k]["text"] for k in keys]), dtype=np.float32)
        vecs, name_vec = enc[: len(keys)], dict(zip(keys, enc[len(keys):]))
        existing = {r[1]: _row_to_node(r) for k in keys for r in
                    self.sql.query(f"SELECT {_NODE_COLS} FROM ltm_nodes WHERE key = ?", (k,))}
        # Neighbourhoods come from the documents; identity (merge) from the names alone:
        # two nodes of one statement share a document but not a name.
        neighbours = [self._anchors(v, keys[:i], list(vecs[:i])) for i, v in enumerate(vecs)]
        with self._lock:
            anchor_names = {a: self._nodes[a].text for ns in neighbours for a, _ in ns if isinstance(a, int) and a in self._nodes}
        ids = list(anchor_names)
        if ids:
            name_vec.update(zip(ids, np.asarray(self.encode([anchor_names[i] for i in ids]), dtype=np.float32)))
        for key, vec, anchors in zip(keys, vecs, neighbours):
            target = existing.get(key)
            same = [(a, float(name_vec[key] @ name_vec[a])) for a, _ in anchors if a in name_vec and a != key]
            same = sorted([t for t in same if t[1] >= sp.merge_threshold], key=lambda t: -t[1])
            if target is None and same and isinstance(same[0][0], str) and same[0][0] in drafts:
                into = plan.alias.get(same[0][0], same[0][0])  # a near-duplicate new in this batch
                if into in plan.insert:
                    plan.alias[key] = into
                    drafts[into]["evidence"] += drafts[key]["evidence"]
                    drafts[into]["facts"] = _merge_facts(drafts[into]["facts"], drafts[key]["facts"], sp.max_facts)
                    continue
                if into in plan.merge:  # that one merged into an existing node: so does this one
                    same = [(plan.merge[into], same[0][1])]
            if target is None and same and isinstance(same[0][0], int):
                rows = self.sql.query(f"SELECT {_NODE_COLS} FROM ltm_nodes WHERE id = ?", (same[0][0],))
                target = _row_to_node(rows[0]) if rows else None
            if target is not None:
                plan.merge[key] = target.id
                plan.merged_facts.setdefault(target.id, list(target.facts))
                plan.merged_facts[target.id] = _merge_facts(plan.merged_facts[target.id], drafts[key]["facts"], sp.max_facts)
                plan.names[target.id] = target.text
            else:
                plan.insert[key] = vec
                plan.links[key] = [a for a, cos in anchors[: sp.anchors] if cos >= sp.link_threshold and a != key]
        if plan.merged_facts:
            ids = list(plan.merged_facts)
            docs = [node_document(plan.names[i], plan.merged_facts[i]) for i in ids]
            plan.merged_vecs = dict(zip(ids, np.asarray(self.encode(docs), dtype=np.float32)))
        return plan

    def integrate(self, c: sqlite3.Connection, plan: "GraphPlan", now: float, cycle: int) -> GraphDelta:
        """Write a prepared batch inside the caller's transaction (Algorithm 3, steps 4-7).

        A node whose key exists, or whose document is at least ``merge_threshold`` similar
        to an existing node's, merges into it (evidence + n, confidence reinforced, the
        statements added to its facts); otherwise it is inserted and linked (RelatedTo) to
        its nearest anchors above ``link_threshold``. Cheap: no model runs here.
        """
        sp, delta = self.spec, GraphDelta()
        id_of: dict[str, int] = {}
        for key, d in plan.drafts.items():
            if key in plan.alias:
                continue
            nid = plan.merge.get(key)
            if nid is None:  # inserted by a concurrent cycle since prepare(): merge into it
                row = c.execute("SELECT id FROM ltm_nodes WHERE key = ?", (key,)).fetchone()
                if row is not None:
                    nid = int(row[0])
                    plan.merged_vecs.setdefault(nid, plan.insert[key])
                    plan.merged_facts.setdefault(nid, d["facts"][-sp.max_facts:])
            if nid is not None:
                row = c.execute(f"SELECT {_NODE_COLS} FROM ltm_nodes WHERE id = ?", (nid,)).fetchone()
                if row is None:
                    continue
                node = _row_to_node(row)
                node.confidence = _reinforce(node.confidence if node.active else sp.initial_confidence, sp.reinforce, d["evidence"])
                node.evidence += d["evidence"]
                node.facts = plan.merged_facts.get(nid, node.facts)
                node.last_seen, node.last_cycle, node.active = now, cycle, True
                vec = plan.merged_vecs[nid]
                c.execute("UPDATE ltm_nodes SET facts = ?, confidence = ?, evidence = ?, last_seen = ?, last_cycle = ?, "
                          "active = 1, embedding = ? WHERE id = ?",
                          (json.dumps(node.facts), node.confidence, node.evidence, now, cycle, vec.tobytes(), nid))
                delta.counts["nodes_merged"] += 1
            else:
                vec = plan.insert[key]
                conf = _reinforce(sp.initial_confidence, sp.reinforce, d["evidence"] - 1)
                facts = d["facts"][-sp.max_facts:]
                cur = c.execute(
                    "INSERT INTO ltm_nodes (key, kind, text, facts, confidence, evidence, first_seen, last_seen, last_cycle, "
                    "active, embedding) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?)",
                    (key, d["kind"].value, d["text"], json.dumps(facts), conf, d["evidence"], now, now, cycle, vec.tobytes()),
                )
                node = KnowledgeNode(int(cur.lastrowid), key, d["kind"], d["text"], facts, conf, d["evidence"], now, now, cycle)
                delta.counts["nodes_added"] += 1
            id_of[key] = node.id
            delta.upserted[node.id] = (node, vec)
        for key, into in plan.alias.items():
            if into in id_of:
                id_of[key] = id_of[into]
        # Edges: one piece of evidence per unit, plus the anchor links of new nodes.
        edge_ev: dict[tuple[int, int, str], tuple[int, str]] = {}
        for (a, b, et), (n, label) in plan.edges.items():
            if a in id_of and b in id_of and id_of[a] != id_of[b]:
                k = (id_of[a], id_of[b], et.value)
                m, lab = edge_ev.get(k, (0, label))
                edge_ev[k] = (m + n, lab or label)
        for key, anchors in plan.links.items():
            for a in anchors:
                target = id_of.get(plan.alias.get(a, a)) if isinstance(a, str) else a
                if key in id_of and target is not None and target != id_of[key]:
                    edge_ev.setdefault((id_of[key], target, EdgeType.RELATED_TO.value), (1, "anchor"))
        for (a, b, et), (n, label) in edge_ev.items():
            row = c.execute("SELECT confidence, evidence, active FROM ltm_edges WHERE src = ? AND dst = ? AND type = ?",
                            (a, b, et)).fetchone()
            if row:
                conf = _reinforce(row[0] if row[2] else sp.initial_confidence, sp.reinforce, n)
                c.execute("UPDATE ltm_edges SET confidence = ?, evidence = evidence + ?, last_seen = ?, last_cycle = ?, "
                          "active = 1 WHERE src = ? AND dst = ? AND type = ?", (conf, n, now, cycle, a, b, et))
                delta.counts["edges_reinforced"] += 1
            elif c.execute("SELECT COUNT(*) FROM ltm_nodes WHERE id IN (?, ?) AND active = 1", (a, b)).fetchone()[0] == 2:
                c.execute("INSERT INTO ltm_edges (src, dst, type, label, confidence, evidence, first_seen, last_seen, "
                          "last_cycle, active) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
                          (a, b, et, label, _reinforce(sp.initial_confidence, sp.reinforce, n - 1), n, now, now, cycle))
                delta.counts["edges_added"] += 1
        delta.edges_changed = bool(edge_ev)
        return delta

    def _anchors(self, vec: np.ndarray, new_ids: list[str], new_vecs: list[np.ndarray]) -> list[tuple[int | str, float]]:
        """Nearest nodes: (id, cosine) of indexed ones, (key, cosine) of those new in this batch."""
        with self._lock:
            ids, cos = self._vectors.search(vec, self.spec.anchors) if len(self._vectors) else (np.zeros(0), np.zeros(0))
        out: list[tuple[int | str, float]] = [(int(i), float(s)) for i, s in zip(ids, cos)]
        if new_vecs:
            sims = np.stack(new_vecs) @ vec
            out += [(new_ids[j], float(sims[j])) for j in np.argsort(-sims)[: self.spec.anchors]]
        return sorted(out, key=lambda t: -t[1])[: self.spec.anchors]

    def decay(self, c: sqlite3.Connection, cycle: int, delta: GraphDelta) -> None:
        """Algorithm 3, steps 8-9: weakly supported units not seen this cycle lose confidence;
        those below ``drop_below`` become inactive (kept on disk, out of the index)."""
        sp = self.spec
        c.execute("UPDATE ltm_nodes SET confidence = confidence * ? WHERE active = 1 AND last_cycle < ? AND evidence < ?",
                  (sp.decay, cycle, sp.strong_evidence))
        c.execute("UPDATE ltm_edges SET confidence = confidence * ? WHERE active = 1 AND last_cycle < ? AND evidence < ?",
                  (sp.decay, cycle, sp.strong_evidence))
        dropped = [r[0] for r in c.execute("SELECT id FROM ltm_nodes WHERE active = 1 AND confidence < ?", (sp.drop_below,))]
        c.execute("UPDATE ltm_nodes SET active = 0 WHERE active = 1 AND confidence < ?", (sp.drop_below,))
        n_edges = c.execute(
            "UPDATE ltm_edges SET active = 0 WHERE active = 1 AND (confidence < ? OR src IN (SELECT id FROM ltm_nodes "
            "WHERE active = 0) OR dst IN (SELECT id FROM ltm_nodes WHERE active = 0))", (sp.drop_below,)
        ).rowcount
        delta.dropped.update(int(i) for i in dropped)
        delta.counts["nodes_dropped"] += len(dropped)
        delta.counts["edges_dropped"] += n_edges
        delta.edges_changed = delta.edges_changed or n_edges > 0
        # Decayed confidences are read from SQLite by the next refresh of these nodes; the
        # index only needs to forget the dropped ones.
        for nid, (node, _) in delta.upserted.items():
            if nid in delta.dropped:
                node.active = False

    @staticmethod
    def new_cycle(c: sqlite3.Connection, now: float) -> int:
        return int(c.execute("INSERT INTO ltm_cycles (at, stats) VALUES (?, '{}')", (now,)).lastrowid)

    @staticmethod
    def finish_cycle(c: sqlite3.Connection, cycle: int, stats: dict[str, Any]) -> None:
        c.execute("UPDATE ltm_cycles SET stats = ? WHERE cycle = ?", (json.dumps(stats), cycle))

    # -- reads -----------------------------------------------------------------------------------
    def search(self, qvec: np.ndarray, query: str, quota: int, hops: int = 1, w_lexical: float = 0.5,
               hop_decay: float = 0.5, depth_factor: int = 2) -> list[tuple[KnowledgeNode, float, str]]:
        """Stage-1 over LTM: hybrid seeds, then expansion along edges (1-2 hops), at most ``quota``.

        Returns (node, score, rendered text) best first. A neighbour reached through an edge
        scores seed score × edge confidence × ``hop_decay`` per hop.
        """
        if quota <= 0:
            return []
        self._sync()
        with self._lock:
            if not self._nodes:
                return []
            depth = quota * depth_factor
            d_ids, _ = self._vectors.search(qvec, depth)
            lex = self._lexical.top(query, depth if w_lexical else 0, lambda ids: None)
            union = list(dict.fromkeys([*d_ids.tolist(), *lex.ids.tolist()]))
            if not union:
                return []
            cos = self._vectors.cosine(qvec, union)
            bm = scoring.normalize_max(self._lexical.lookup(lex.row_scores, union))
            fused = cos + w_lexical * bm
            best = {nid: float(s) for nid, s in zip(union, fused)}
            frontier = sorted(best.items(), key=lambda t: -t[1])[:quota]
            for _ in range(max(0, hops)):
                nxt: dict[int, float] = {}
                for nid, s in frontier:
                    for e in self._adj.get(nid, ()):
                        other = e.dst if e.src == nid else e.src
                        if other in self._nodes:
                            score = s * e.confidence * hop_decay
                            if score > best.get(other, -np.inf) and score > nxt.get(other, -np.inf):
                                nxt[other] = score
                best.update(nxt)
                frontier = sorted(nxt.items(), key=lambda t: -t[1])[:quota]
            top = sorted(best.items(), key=lambda t: -t[1])[:quota]
            return [(self._nodes[nid], s, self._render(nid)) for nid, s in top]

    def _render(self, nid: int, max_links: int = 4) -> str:
        node = self._nodes[nid]
        edges = sorted(self._adj.get(nid, ()), key=lambda e: -e.confidence)
        links = []
        for e in edges:
            other = e.dst if e.src == nid else e.src
            if other in self._nodes and len(links) < max_links:
                name = self._nodes[other].text
                links.append((e.type, name if e.src == nid else f"{name} (from)"))
        return node.render(links)

    def node(self, nid: int) -> KnowledgeNode:
        rows = self.sql.query(f"SELECT {_NODE_COLS} FROM ltm_nodes WHERE id = ?", (nid,))
        if not rows:
            raise KeyError(f"no LTM node {nid}")
        return _row_to_node(rows[0])

    def nodes(self, include_dropped: bool = False) -> list[KnowledgeNode]:
        where = "" if include_dropped else " WHERE active = 1"
        return [_row_to_node(r) for r in self.sql.query(f"SELECT {_NODE_COLS} FROM ltm_nodes{where} ORDER BY id")]

    def edges(self, include_dropped: bool = False) -> list[Edge]:
        where = "" if include_dropped else " WHERE active = 1"
        return [Edge(s, d, EdgeType(t), cf, ev, lb) for s, d, t, lb, cf, ev in
                self.sql.query(f"SELECT src, dst, type, label, confidence, evidence FROM ltm_edges{where} ORDER BY src, dst")]

    def stats(self) -> dict[str, int]:
        (n_act, n_all), = self.sql.query("SELECT COALESCE(SUM(active), 0), COUNT(*) FROM ltm_nodes")
        (e_act, e_all), = self.sql.query("SELECT COALESCE(SUM(active), 0), COUNT(*) FROM ltm_edges")
        (cycles,), = self.sql.query("SELECT COUNT(*) FROM ltm_cycles")
        return {"nodes": int(n_act), "nodes_dropped": int(n_all - n_act), "edges": int(e_act),
                "edges_dropped": int(e_all - e_act), "cycles": int(cycles)}

    def texts(self) -> list[str]:
        """Every text LTM stores (node names, facts, edge labels): what a privacy audit scans."""
        out = [t for row in self.sql.query("SELECT key, text, facts FROM ltm_nodes") for t in (row[0], row[1], row[2])]
        out += [r[0] for r in self.sql.query("SELECT label FROM ltm_edges")]
        out += [r[0] for r in self.sql.query("SELECT stats FROM ltm_cycles")]
        return out


def _reinforce(conf: float, rate: float, times: int) -> float:
    """Confidence after ``times`` more pieces of evidence: each closes ``rate`` of the gap to 1."""
    return float(1.0 - (1.0 - conf) * (1.0 - rate) ** max(0, times))


def _merge_facts(old: list[str], new: list[str], limit: int) -> list[str]:
    facts = [f for f in old if f not in new] + new
    return facts[-limit:]
