"""The LTM knowledge graph: the store's graph tables (truth) + FAISS / BM25 views.

Nodes (Entity, Concept) and typed edges (IsA, HasProperty, RelatedTo, Implies) carry a
confidence and an evidence count accumulated across consolidation cycles (Algorithm 3,
steps 4-9). The tables hold no user id and no link back to MTM: what a user's episodes
taught is kept only as de-identified statements and counts.

Writes happen inside the store's offline commit (``CycleUpdate`` runs ``integrate`` and
``decay`` there) and return a ``GraphDelta``; ``refresh(delta)`` updates the in-memory
indexes after the commit, so a rolled-back cycle leaves both the tables and the indexes as
they were.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lightmem.ltm.abstraction import KnowledgeUnit
from lightmem.retrieval import scoring
from lightmem.stores.base import GraphStore, GraphTransaction
from lightmem.stores.views.lexical import LexicalIndex
from lightmem.stores.views.vector import VectorIndex
from lightmem.types import Edge, EdgeType, KnowledgeNode


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


def node_document(name: str, facts: Sequence[str]) -> str:
    """What a node's embedding and BM25 entry are computed from."""
    return name + (": " + " | ".join(facts) if facts else "")


class KnowledgeGraph:
    """The LTM graph over the store's graph tables.

    Args:
        tables: The store's graph tables (``MemoryStore.graph``).
        encode: Embeds texts (the Memory's embedder); vectors are L2-normalised.
        dim: Embedding dimension.
        spec: Merge, link and decay rules.
    """

    def __init__(self, tables: GraphStore, encode: Callable[[list[str]], np.ndarray], dim: int,
                 spec: GraphSpec | None = None) -> None:
        self.tables, self.encode, self.dim, self.spec = tables, encode, dim, spec or GraphSpec()
        self._lock = threading.RLock()
        self._seen_version = tables.data_version()
        self._load()

    # -- in-memory views -----------------------------------------------------------------------
    def _sync(self) -> None:
        """Reload the views when another process committed a consolidation cycle (a PRAGMA otherwise)."""
        version = self.tables.data_version()
        if version == self._seen_version:
            return
        self._seen_version = version
        if self.tables.last_cycle() != self._loaded_cycle:
            self._load()

    def _load(self) -> None:
        cycle = self.tables.last_cycle()
        active, vecs = self.tables.active_nodes()
        vectors, lexical = VectorIndex(self.dim), LexicalIndex()
        nodes: dict[int, KnowledgeNode] = {}
        if active:
            vectors.add(np.asarray([n.id for n in active], dtype=np.int64), vecs)
            for node in active:
                nodes[node.id] = node
                lexical.add(node.id, node_document(node.text, node.facts))
        with self._lock:
            self._vectors, self._lexical, self._nodes = vectors, lexical, nodes
            self._adj = self._load_edges()
            self._loaded_cycle = cycle

    def _load_edges(self) -> dict[int, list[Edge]]:
        adj: dict[int, list[Edge]] = {}
        for e in self.tables.active_edges():
            adj.setdefault(e.src, []).append(e)
            adj.setdefault(e.dst, []).append(e)
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

    # -- consolidation writes (inside the store's offline commit) ----------------------------------
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
        existing = {k: n for k in keys if (n := self.tables.node_by_key(k)) is not None}
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
                target = self.tables.node(same[0][0])
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

    def integrate(self, tx: GraphTransaction, plan: "GraphPlan", now: float, cycle: int) -> GraphDelta:
        """Write a prepared batch inside the store's offline commit (Algorithm 3, steps 4-7).

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
                found = tx.node_by_key(key)
                if found is not None:
                    nid = found.id
                    plan.merged_vecs.setdefault(nid, plan.insert[key])
                    plan.merged_facts.setdefault(nid, d["facts"][-sp.max_facts:])
            if nid is not None:
                node = tx.node(nid)
                if node is None:
                    continue
                node.confidence = _reinforce(node.confidence if node.active else sp.initial_confidence, sp.reinforce, d["evidence"])
                node.evidence += d["evidence"]
                node.facts = plan.merged_facts.get(nid, node.facts)
                node.last_seen, node.last_cycle, node.active = now, cycle, True
                vec = plan.merged_vecs[nid]
                tx.save_node(node, vec)
                delta.counts["nodes_merged"] += 1
            else:
                vec = plan.insert[key]
                conf = _reinforce(sp.initial_confidence, sp.reinforce, d["evidence"] - 1)
                facts = d["facts"][-sp.max_facts:]
                nid = tx.insert_node(key, d["kind"], d["text"], facts, conf, d["evidence"], now, cycle, vec)
                node = KnowledgeNode(nid, key, d["kind"], d["text"], facts, conf, d["evidence"], now, now, cycle)
                delta.counts["nodes_added"] += 1
            id_of[key] = node.id
            delta.upserted[node.id] = (node, vec)
        for key, into in plan.alias.items():
            if into in id_of:
                id_of[key] = id_of[into]
        # Edges: one piece of evidence per unit, plus the anchor links of new nodes.
        edge_ev: dict[tuple[int, int, EdgeType], tuple[int, str]] = {}
        for (a, b, et), (n, label) in plan.edges.items():
            if a in id_of and b in id_of and id_of[a] != id_of[b]:
                k = (id_of[a], id_of[b], EdgeType(et))
                m, lab = edge_ev.get(k, (0, label))
                edge_ev[k] = (m + n, lab or label)
        for key, anchors in plan.links.items():
            for a in anchors:
                target = id_of.get(plan.alias.get(a, a)) if isinstance(a, str) else a
                if key in id_of and target is not None and target != id_of[key]:
                    edge_ev.setdefault((id_of[key], target, EdgeType.RELATED_TO), (1, "anchor"))
        for (a, b, et), (n, label) in edge_ev.items():
            state = tx.edge_state(a, b, et)
            if state:
                conf = _reinforce(state[0] if state[2] else sp.initial_confidence, sp.reinforce, n)
                tx.reinforce_edge(a, b, et, conf, n, now, cycle)
                delta.counts["edges_reinforced"] += 1
            elif tx.both_active(a, b):
                tx.insert_edge(a, b, et, label, _reinforce(sp.initial_confidence, sp.reinforce, n - 1), n, now, cycle)
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

    def decay(self, tx: GraphTransaction, cycle: int, delta: GraphDelta) -> None:
        """Algorithm 3, steps 8-9: weakly supported units not seen this cycle lose confidence;
        those below ``drop_below`` become inactive (kept on disk, out of the index)."""
        sp = self.spec
        dropped, n_edges = tx.decay(sp.decay, cycle, sp.strong_evidence, sp.drop_below)
        delta.dropped.update(int(i) for i in dropped)
        delta.counts["nodes_dropped"] += len(dropped)
        delta.counts["edges_dropped"] += n_edges
        delta.edges_changed = delta.edges_changed or n_edges > 0
        # Decayed confidences are read from the tables by the next refresh of these nodes; the
        # index only needs to forget the dropped ones.
        for nid, (node, _) in delta.upserted.items():
            if nid in delta.dropped:
                node.active = False

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
        node = self.tables.node(nid)
        if node is None:
            raise KeyError(f"no LTM node {nid}")
        return node

    def nodes(self, include_dropped: bool = False) -> list[KnowledgeNode]:
        return self.tables.nodes(include_dropped)

    def edges(self, include_dropped: bool = False) -> list[Edge]:
        return self.tables.edges(include_dropped)

    def stats(self) -> dict[str, int]:
        return self.tables.stats()

    def texts(self) -> list[str]:
        """Every text LTM stores (node names, facts, edge labels): what a privacy audit scans."""
        return self.tables.texts()


@dataclass
class CycleUpdate:
    """A cycle's graph half (``GraphUpdate``): integrate the prepared batch, then decay.

    ``MemoryStore.commit_offline`` runs it inside the cycle's transaction; ``delta`` is what
    ``KnowledgeGraph.refresh`` applies once the cycle committed.
    """

    graph: KnowledgeGraph
    plan: GraphPlan | None
    decay: bool = True
    delta: GraphDelta = field(default_factory=GraphDelta)

    def apply(self, tx: GraphTransaction, cycle: int, now: float) -> dict[str, int]:
        self.delta = self.graph.integrate(tx, self.plan, now, cycle) if self.plan is not None else GraphDelta()
        if self.decay:
            self.graph.decay(tx, cycle, self.delta)
        return dict(self.delta.counts)


def _reinforce(conf: float, rate: float, times: int) -> float:
    """Confidence after ``times`` more pieces of evidence: each closes ``rate`` of the gap to 1."""
    return float(1.0 - (1.0 - conf) * (1.0 - rate) ** max(0, times))


def _merge_facts(old: list[str], new: list[str], limit: int) -> list[str]:
    facts = [f for f in old if f not in new] + new
    return facts[-limit:]
