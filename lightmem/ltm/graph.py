"""The LTM knowledge graph: the store's graph tables (truth) + FAISS / BM25 views.

Nodes (Entity, Concept) and typed edges (IsA, HasProperty, RelatedTo, Implies) carry a
confidence and an evidence count accumulated across consolidation cycles (Algorithm 3,
steps 4-9). No link back to MTM: what a user's episodes taught is kept only as de-identified
statements and counts.

Scopes. By default (``scope="user"``) the LTM is per user, like MTM: a cycle writes what one
user's episodes taught into that user's partition (scope = the user id), a search reads only the
searching user's partition, and ``delete_user`` removes the partition whole. No query of one user
can return what another user said.

``scope="shared"`` is the operator's explicit choice of one graph for every user (LightMem-SLM's
user-agnostic LTM): every user's cycles merge into it and every user's searches read it, so a
statement one user made can reach another user's prompt, protected only by de-identification
(``lightmem.ltm.deidentify``: names, e-mails, phones, addresses, ids, account numbers and
credentials are masked; places, organisations, diagnoses and other free-text facts are not).
The shared graph records which users supported each node, statement and edge
(``ltm_sources``), so that ``delete_user`` removes what came only from that user and drops the
user from the rest.

A graph made before scopes existed (one graph for everyone, with no record of who said what) is
kept, every row as it was, in the shared scope: only a Memory opened with ``scope="shared"``
reads it, and a user's erasure cannot attribute its statements.

Writes happen inside the store's offline commit (``CycleUpdate`` runs ``integrate`` and
``decay`` there) and return a ``GraphDelta``; ``refresh(delta)`` updates the in-memory
indexes after the commit, so a rolled-back cycle leaves both the tables and the indexes as
they were.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lightmem.errors import InvalidInputError
from lightmem.ltm.abstraction import KnowledgeUnit
from lightmem.retrieval import scoring
from lightmem.stores.base import GraphStore, GraphTransaction
from lightmem.stores.rows import SHARED_SCOPE, fact_digest, node_document
from lightmem.stores.views.lexical import LexicalIndex
from lightmem.stores.views.vector import VectorIndex
from lightmem.types import Edge, EdgeType, KnowledgeNode

SCOPES = ("user", "shared")  # LTMOptions.scope: each user's own graph (default), or one graph for every user
__all__ = ["SCOPES", "SHARED_SCOPE", "CycleUpdate", "GraphDelta", "GraphPlan", "GraphSpec", "KnowledgeGraph",
           "check_scope", "node_document"]


def check_scope(scope: object) -> str:
    """Return ``scope`` when it names an LTM scope.

    Raises:
        InvalidInputError: ``scope`` is neither ``"user"`` nor ``"shared"``.
    """
    if scope not in SCOPES:
        raise InvalidInputError(
            f"ltm scope must be 'user' (each user's knowledge kept and searched in the user's own partition, the "
            f"default) or 'shared' (one graph for every user: statements reach other users, de-identified), got {scope!r}")
    return str(scope)


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
    """A batch prepared for ``integrate``: node drafts by key, merge targets, new vectors, links; the
    scope it is written to and, in the shared graph, the user it is recorded as coming from."""

    scope: str = SHARED_SCOPE
    source: str | None = None  # the user whose support the shared graph records (None: a user's own graph)
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
    """What a committed cycle changed in one scope: nodes to (re)index and nodes to drop from the index."""

    scope: str = SHARED_SCOPE
    upserted: dict[int, tuple[KnowledgeNode, np.ndarray]] = field(default_factory=dict)
    dropped: set[int] = field(default_factory=set)
    edges_changed: bool = False
    counts: dict[str, int] = field(default_factory=lambda: {"nodes_added": 0, "nodes_merged": 0, "edges_added": 0,
                                                            "edges_reinforced": 0, "nodes_dropped": 0, "edges_dropped": 0})


@dataclass
class _View:
    """One scope's in-memory indexes: vectors, BM25, active nodes and their edges."""

    vectors: VectorIndex
    lexical: LexicalIndex
    nodes: dict[int, KnowledgeNode]
    adj: dict[int, list[Edge]]


class KnowledgeGraph:
    """The LTM graph over the store's graph tables.

    Args:
        tables: The store's graph tables (``MemoryStore.graph``).
        encode: Embeds texts (the Memory's embedder); vectors are L2-normalised.
        dim: Embedding dimension.
        spec: Merge, link and decay rules.
        scope: ``"user"`` (default): each user's knowledge is written to and searched in that user's own
            partition. ``"shared"``: one graph for every user (see the module docstring for what that exposes).
        max_views: Scopes whose in-memory indexes are kept at once (least recently used dropped first; they
            are rebuilt from the tables on use).

    Raises:
        InvalidInputError: ``scope`` is neither ``"user"`` nor ``"shared"``.
    """

    def __init__(self, tables: GraphStore, encode: Callable[[list[str]], np.ndarray], dim: int,
                 spec: GraphSpec | None = None, scope: str = "user", max_views: int = 256) -> None:
        self.tables, self.encode, self.dim, self.spec = tables, encode, dim, spec or GraphSpec()
        self.scope = check_scope(scope)
        self.max_views = max(1, int(max_views))
        self._lock = threading.RLock()
        self._views: OrderedDict[str, _View] = OrderedDict()
        self._seen_version = tables.data_version()
        self._loaded_gen = tables.generation()

    @property
    def shared(self) -> bool:
        """Whether every user reads and writes one shared graph (``scope="shared"``)."""
        return self.scope == "shared"

    def scope_of(self, user_id: str) -> str:
        """The partition ``user_id``'s cycles write and searches read: the user's own, or the shared one."""
        if not isinstance(user_id, str) or not user_id.strip():
            raise InvalidInputError(f"the LTM needs the id of the user it acts for, got {user_id!r}")
        return SHARED_SCOPE if self.shared else user_id

    # -- in-memory views (one per scope, loaded on first use) --------------------------------------
    def _sync(self) -> None:
        """Drop the views when another process changed the graph (a cycle or an erasure); a PRAGMA otherwise."""
        version = self.tables.data_version()
        if version == self._seen_version:
            return
        self._seen_version = version
        gen = self.tables.generation()
        if gen != self._loaded_gen:
            with self._lock:
                self._views.clear()
                self._loaded_gen = gen

    def invalidate(self) -> None:
        """Drop every scope's views (this process erased from the graph); they reload from the tables on use."""
        with self._lock:
            self._views.clear()
            self._loaded_gen = self.tables.generation()

    def _view(self, scope: str) -> _View:
        """``scope``'s views, loaded from the tables when missing (call holding the lock: a refresh waits)."""
        view = self._views.get(scope)
        if view is not None:
            self._views.move_to_end(scope)
            return view
        active, vecs = self.tables.active_nodes(scope)
        view = _View(VectorIndex(self.dim), LexicalIndex(), {}, {})
        if active:
            view.vectors.add(np.asarray([n.id for n in active], dtype=np.int64), vecs)
            for node in active:
                view.nodes[node.id] = node
                view.lexical.add(node.id, node_document(node.text, node.facts))
        view.adj = self._load_edges(scope)
        self._views[scope] = view
        while len(self._views) > self.max_views:
            self._views.popitem(last=False)
        return view

    def _load_edges(self, scope: str) -> dict[int, list[Edge]]:
        adj: dict[int, list[Edge]] = {}
        for e in self.tables.active_edges(scope):
            adj.setdefault(e.src, []).append(e)
            adj.setdefault(e.dst, []).append(e)
        return adj

    def refresh(self, delta: GraphDelta) -> None:
        """Apply a committed cycle's changes to its scope's indexes (brief lock; searches see old or new).
        A scope not loaded here loads from the tables, which have the cycle, when first used."""
        with self._lock:
            view = self._views.get(delta.scope)
            if view is None:
                return
            gone = [i for i in delta.dropped | set(delta.upserted) if i in view.vectors]
            if gone:
                view.vectors.remove(gone)
                view.lexical.remove(gone)
            for i in delta.dropped:
                view.nodes.pop(i, None)
            for i, (node, vec) in delta.upserted.items():
                if i in delta.dropped:
                    continue
                view.vectors.add(np.asarray([i]), vec[None, :])
                view.lexical.add(i, node_document(node.text, node.facts))
                view.nodes[i] = node
            if delta.edges_changed or delta.dropped:
                view.adj = self._load_edges(delta.scope)

    def __len__(self) -> int:
        """Active nodes in every scope."""
        return self.tables.stats()["nodes"]

    # -- consolidation writes (inside the store's offline commit) ----------------------------------
    def prepare(self, units: Sequence[KnowledgeUnit], user_id: str) -> "GraphPlan":
        """The expensive half of ``integrate``, run without the store's lock: group ``user_id``'s batch by
        node key (one piece of evidence per unit), embed, find anchors in the user's scope, decide merge
        or insert."""
        scope = self.scope_of(user_id)
        sp, plan = self.spec, GraphPlan(scope=scope, source=user_id if self.shared else None)
        drafts = plan.drafts
        for u in units:
            for n in u.nodes:
                d = drafts.setdefault(n.key, {"text": n.text, "kind": n.kind, "facts": [], "evidence": 0, "stated": {}})
                d["evidence"] += 1
                d["stated"][u.statement] = d["stated"].get(u.statement, 0) + 1
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
        existing = {k: n for k in keys if (n := self.tables.node_by_key(k, scope)) is not None}
        # Neighbourhoods come from the documents; identity (merge) from the names alone:
        # two nodes of one statement share a document but not a name.
        self._sync()
        neighbours = [self._anchors(scope, v, keys[:i], list(vecs[:i])) for i, v in enumerate(vecs)]
        with self._lock:
            nodes = self._view(scope).nodes
            anchor_names = {a: nodes[a].text for ns in neighbours for a, _ in ns if isinstance(a, int) and a in nodes}
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
                    for statement, n in drafts[key]["stated"].items():
                        drafts[into]["stated"][statement] = drafts[into]["stated"].get(statement, 0) + n
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
        sp, delta = self.spec, GraphDelta(scope=plan.scope)
        id_of: dict[str, int] = {}
        for key, d in plan.drafts.items():
            if key in plan.alias:
                continue
            nid = plan.merge.get(key)
            if nid is None:  # inserted by a concurrent cycle since prepare(): merge into it
                found = tx.node_by_key(key, plan.scope)
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
                nid = tx.insert_node(key, d["kind"], d["text"], facts, conf, d["evidence"], now, cycle, vec, scope=plan.scope)
                node = KnowledgeNode(nid, key, d["kind"], d["text"], facts, conf, d["evidence"], now, now, cycle)
                delta.counts["nodes_added"] += 1
            if plan.source is not None:  # the shared graph: who supported it, and with which statements
                tx.add_sources(node.id, plan.source, [(fact_digest(st), n) for st, n in d["stated"].items()])
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
                tx.insert_edge(a, b, et, label, _reinforce(sp.initial_confidence, sp.reinforce, n - 1), n, now, cycle,
                               scope=plan.scope)
                delta.counts["edges_added"] += 1
            else:
                continue
            if plan.source is not None:
                tx.add_edge_source(a, b, et, plan.source, n)
        delta.edges_changed = bool(edge_ev)
        return delta

    def _anchors(self, scope: str, vec: np.ndarray, new_ids: list[str],
                 new_vecs: list[np.ndarray]) -> list[tuple[int | str, float]]:
        """Nearest nodes: (id, cosine) of ``scope``'s indexed ones, (key, cosine) of those new in this batch."""
        with self._lock:
            vectors = self._view(scope).vectors
            ids, cos = vectors.search(vec, self.spec.anchors) if len(vectors) else (np.zeros(0), np.zeros(0))
        out: list[tuple[int | str, float]] = [(int(i), float(s)) for i, s in zip(ids, cos)]
        if new_vecs:
            sims = np.stack(new_vecs) @ vec
            out += [(new_ids[j], float(sims[j])) for j in np.argsort(-sims)[: self.spec.anchors]]
        return sorted(out, key=lambda t: -t[1])[: self.spec.anchors]

    def decay(self, tx: GraphTransaction, cycle: int, delta: GraphDelta) -> None:
        """Algorithm 3, steps 8-9: weakly supported units of the cycle's scope not seen this cycle lose
        confidence; those below ``drop_below`` become inactive (kept on disk, out of the index)."""
        sp = self.spec
        dropped, n_edges = tx.decay(sp.decay, cycle, sp.strong_evidence, sp.drop_below, scope=delta.scope)
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
               hop_decay: float = 0.5, depth_factor: int = 2, *, user_id: str) -> list[tuple[KnowledgeNode, float, str]]:
        """Stage-1 over the LTM ``user_id`` may read (``scope_of``): hybrid seeds, then expansion along
        edges (1-2 hops), at most ``quota``.

        Returns (node, score, rendered text) best first. A neighbour reached through an edge
        scores seed score × edge confidence × ``hop_decay`` per hop.
        """
        scope = self.scope_of(user_id)
        if quota <= 0:
            return []
        self._sync()
        with self._lock:
            view = self._view(scope)
            if not view.nodes:
                return []
            depth = quota * depth_factor
            d_ids, _ = view.vectors.search(qvec, depth)
            lex = view.lexical.top(query, depth if w_lexical else 0, lambda ids: None)
            union = list(dict.fromkeys([*d_ids.tolist(), *lex.ids.tolist()]))
            if not union:
                return []
            cos = view.vectors.cosine(qvec, union)
            bm = scoring.normalize_max(view.lexical.lookup(lex.row_scores, union))
            fused = cos + w_lexical * bm
            best = {nid: float(s) for nid, s in zip(union, fused)}
            frontier = sorted(best.items(), key=lambda t: -t[1])[:quota]
            for _ in range(max(0, hops)):
                nxt: dict[int, float] = {}
                for nid, s in frontier:
                    for e in view.adj.get(nid, ()):
                        other = e.dst if e.src == nid else e.src
                        if other in view.nodes:
                            score = s * e.confidence * hop_decay
                            if score > best.get(other, -np.inf) and score > nxt.get(other, -np.inf):
                                nxt[other] = score
                best.update(nxt)
                frontier = sorted(nxt.items(), key=lambda t: -t[1])[:quota]
            top = sorted(best.items(), key=lambda t: -t[1])[:quota]
            return [(view.nodes[nid], s, self._render(view, nid)) for nid, s in top]

    @staticmethod
    def _render(view: _View, nid: int, max_links: int = 4) -> str:
        node = view.nodes[nid]
        edges = sorted(view.adj.get(nid, ()), key=lambda e: -e.confidence)
        links = []
        for e in edges:
            other = e.dst if e.src == nid else e.src
            if other in view.nodes and len(links) < max_links:
                name = view.nodes[other].text
                links.append((e.type, name if e.src == nid else f"{name} (from)"))
        return node.render(links)

    def node(self, nid: int) -> KnowledgeNode:
        node = self.tables.node(nid)
        if node is None:
            raise KeyError(f"no LTM node {nid}")
        return node

    def nodes(self, include_dropped: bool = False, user_id: str | None = None) -> list[KnowledgeNode]:
        """Nodes of every scope (the operator's view), or of the scope ``user_id`` reads."""
        return self.tables.nodes(include_dropped, None if user_id is None else self.scope_of(user_id))

    def edges(self, include_dropped: bool = False, user_id: str | None = None) -> list[Edge]:
        """Edges of every scope, or of the scope ``user_id`` reads."""
        return self.tables.edges(include_dropped, None if user_id is None else self.scope_of(user_id))

    def stats(self) -> dict[str, int]:
        return self.tables.stats()

    def texts(self) -> list[str]:
        """Every text LTM stores, in every scope (node names, facts, edge labels): what a privacy audit scans."""
        return self.tables.texts()


@dataclass
class CycleUpdate:
    """A cycle's graph half (``GraphUpdate``) for ``user_id``: integrate the prepared batch, then decay,
    in the scope the user's cycles write.

    ``MemoryStore.commit_offline`` runs it inside the cycle's transaction; ``delta`` is what
    ``KnowledgeGraph.refresh`` applies once the cycle committed.
    """

    graph: KnowledgeGraph
    plan: GraphPlan | None
    user_id: str
    decay: bool = True
    delta: GraphDelta = field(default_factory=GraphDelta)

    def apply(self, tx: GraphTransaction, cycle: int, now: float) -> dict[str, int]:
        scope = self.graph.scope_of(self.user_id)
        self.delta = self.graph.integrate(tx, self.plan, now, cycle) if self.plan is not None else GraphDelta(scope=scope)
        if self.decay:
            self.graph.decay(tx, cycle, self.delta)
        return dict(self.delta.counts)


def _reinforce(conf: float, rate: float, times: int) -> float:
    """Confidence after ``times`` more pieces of evidence: each closes ``rate`` of the gap to 1."""
    return float(1.0 - (1.0 - conf) * (1.0 - rate) ** max(0, times))


def _merge_facts(old: list[str], new: list[str], limit: int) -> list[str]:
    facts = [f for f in old if f not in new] + new
    return facts[-limit:]
