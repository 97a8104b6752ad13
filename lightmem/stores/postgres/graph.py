"""The LTM graph's tables in the PostgreSQL store (``GraphStore`` and ``GraphTransaction``).

Same tables and rules as ``embedded/graph.py`` (SQLite), scopes included; the graph's logic lives in
``lightmem.ltm.graph`` and reaches the tables only through these two classes.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from lightmem.stores.rows import EDGE_COLS, NODE_COLS, SHARED_SCOPE, node_document, shared_erasure
from lightmem.types import Edge, EdgeType, KnowledgeNode, NodeKind


def as_array(v: Any) -> np.ndarray:
    """A vector column's value as float32 (pgvector's loader gives a ``Vector``)."""
    return np.asarray(v.to_numpy() if hasattr(v, "to_numpy") else v, dtype=np.float32)


def _row_to_node(r: Sequence[Any]) -> KnowledgeNode:
    return KnowledgeNode(id=int(r[0]), key=r[1], kind=NodeKind(r[2]), text=r[3], facts=json.loads(r[4]), confidence=r[5],
                         evidence=r[6], first_seen=r[7], last_seen=r[8], last_cycle=r[9], active=bool(r[10]))


def _row_to_edge(r: Sequence[Any]) -> Edge:
    src, dst, et, label, conf, ev = r
    return Edge(int(src), int(dst), EdgeType(et), conf, ev, label)


def _where(scope: str | None, include_dropped: bool = False) -> tuple[str, tuple[Any, ...]]:
    """The WHERE clause of a listing: ``scope`` (None: every scope), active rows unless ``include_dropped``."""
    parts, params = ([] if include_dropped else ["active"]), ()
    if scope is not None:
        parts.append("scope = %s")
        params = (scope,)
    return (" WHERE " + " AND ".join(parts) if parts else ""), params


_GENERATION = ("SELECT (SELECT COALESCE(MAX(cycle), 0) FROM ltm_cycles), "
               "(SELECT COALESCE(MAX(value::bigint), 0) FROM meta WHERE key = 'ltm_erasures')")


class PostgresGraph:
    """Reads of the LTM graph (``GraphStore``) through the store's ``query`` (a pooled connection,
    or the thread's read snapshot or write transaction; retried like every store read)."""

    def __init__(self, query: Callable[..., list[tuple]], dim: int) -> None:
        self._query, self.dim = query, dim

    def data_version(self) -> int:
        """The newest committed cycle plus the erasures: cycles commit one at a time in cycle order, and
        the graph changes only in a cycle or a user's erasure."""
        return sum(self.generation())

    def generation(self) -> tuple[int, int]:
        """(newest cycle, erasures): changes whenever the graph does."""
        (cycle, erased), = self._query(_GENERATION)
        return int(cycle), int(erased)

    def last_cycle(self) -> int:
        (cycle,), = self._query("SELECT COALESCE(MAX(cycle), 0) FROM ltm_cycles")
        return int(cycle)

    def active_nodes(self, scope: str | None = None) -> tuple[list[KnowledgeNode], np.ndarray]:
        where, params = _where(scope)
        rows = self._query(f"SELECT {NODE_COLS}, embedding FROM ltm_nodes{where} ORDER BY id", params)
        if not rows:
            return [], np.zeros((0, self.dim), dtype=np.float32)
        return [_row_to_node(r) for r in rows], np.stack([as_array(r[11]) for r in rows])

    def active_edges(self, scope: str | None = None) -> list[Edge]:
        where, params = _where(scope)
        return [_row_to_edge(r) for r in self._query(f"SELECT {EDGE_COLS} FROM ltm_edges{where} ORDER BY src, dst", params)]

    def node(self, nid: int) -> KnowledgeNode | None:
        rows = self._query(f"SELECT {NODE_COLS} FROM ltm_nodes WHERE id = %s", (nid,))
        return _row_to_node(rows[0]) if rows else None

    def node_by_key(self, key: str, scope: str = SHARED_SCOPE) -> KnowledgeNode | None:
        rows = self._query(f"SELECT {NODE_COLS} FROM ltm_nodes WHERE scope = %s AND key = %s", (scope, key))
        return _row_to_node(rows[0]) if rows else None

    def nodes(self, include_dropped: bool = False, scope: str | None = None) -> list[KnowledgeNode]:
        where, params = _where(scope, include_dropped)
        return [_row_to_node(r) for r in self._query(f"SELECT {NODE_COLS} FROM ltm_nodes{where} ORDER BY id", params)]

    def edges(self, include_dropped: bool = False, scope: str | None = None) -> list[Edge]:
        where, params = _where(scope, include_dropped)
        return [_row_to_edge(r) for r in self._query(f"SELECT {EDGE_COLS} FROM ltm_edges{where} ORDER BY src, dst, type",
                                                     params)]

    def stats(self) -> dict[str, int]:
        (n_act, n_all), = self._query("SELECT COUNT(*) FILTER (WHERE active), COUNT(*) FROM ltm_nodes")
        (e_act, e_all), = self._query("SELECT COUNT(*) FILTER (WHERE active), COUNT(*) FROM ltm_edges")
        (cycles,), = self._query("SELECT COUNT(*) FROM ltm_cycles")
        return {"nodes": int(n_act), "nodes_dropped": int(n_all - n_act), "edges": int(e_act),
                "edges_dropped": int(e_all - e_act), "cycles": int(cycles)}

    def texts(self) -> list[str]:
        out = [t for row in self._query("SELECT key, text, facts FROM ltm_nodes") for t in row]
        out += [r[0] for r in self._query("SELECT label FROM ltm_edges")]
        out += [r[0] for r in self._query("SELECT stats FROM ltm_cycles")]
        return out

    @staticmethod
    def new_cycle(cur: Any, now: float) -> int:
        """The next cycle's row (call holding the cycle lock, so numbers follow commit order)."""
        (cycle,), = cur.execute("INSERT INTO ltm_cycles (cycle, at, stats) SELECT COALESCE(MAX(cycle), 0) + 1, %s, '{}' "
                                "FROM ltm_cycles RETURNING cycle", (now,)).fetchall()
        return int(cycle)

    @staticmethod
    def finish_cycle(cur: Any, cycle: int, stats: dict[str, Any]) -> None:
        cur.execute("UPDATE ltm_cycles SET stats = %s WHERE cycle = %s", (json.dumps(stats), cycle))


class PostgresGraphTransaction:
    """The graph's writes (``GraphTransaction``) on the cursor of an open transaction."""

    def __init__(self, cur: Any) -> None:
        self._c = cur

    def node(self, nid: int) -> KnowledgeNode | None:
        row = self._c.execute(f"SELECT {NODE_COLS} FROM ltm_nodes WHERE id = %s", (nid,)).fetchone()
        return _row_to_node(row) if row else None

    def node_by_key(self, key: str, scope: str = SHARED_SCOPE) -> KnowledgeNode | None:
        row = self._c.execute(f"SELECT {NODE_COLS} FROM ltm_nodes WHERE scope = %s AND key = %s", (scope, key)).fetchone()
        return _row_to_node(row) if row else None

    def insert_node(self, key: str, kind: NodeKind, text: str, facts: list[str], confidence: float, evidence: int,
                    now: float, cycle: int, vector: np.ndarray, scope: str = SHARED_SCOPE) -> int:
        (nid,), = self._c.execute(
            "INSERT INTO ltm_nodes (scope, key, kind, text, facts, confidence, evidence, first_seen, last_seen, last_cycle, "
            "active, embedding) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, TRUE, %s) RETURNING id",
            (scope, key, kind.value, text, json.dumps(facts), confidence, evidence, now, now, cycle,
             np.asarray(vector, dtype=np.float32)),
        ).fetchall()
        return int(nid)

    def save_node(self, node: KnowledgeNode, vector: np.ndarray) -> None:
        self._c.execute("UPDATE ltm_nodes SET facts = %s, confidence = %s, evidence = %s, last_seen = %s, last_cycle = %s, "
                        "active = TRUE, embedding = %s WHERE id = %s",
                        (json.dumps(node.facts), node.confidence, node.evidence, node.last_seen, node.last_cycle,
                         np.asarray(vector, dtype=np.float32), node.id))

    def edge_state(self, src: int, dst: int, type: EdgeType) -> tuple[float, int, bool] | None:
        row = self._c.execute("SELECT confidence, evidence, active FROM ltm_edges WHERE src = %s AND dst = %s AND type = %s",
                              (src, dst, type.value)).fetchone()
        return (row[0], int(row[1]), bool(row[2])) if row else None

    def reinforce_edge(self, src: int, dst: int, type: EdgeType, confidence: float, evidence: int, now: float,
                       cycle: int) -> None:
        self._c.execute("UPDATE ltm_edges SET confidence = %s, evidence = evidence + %s, last_seen = %s, last_cycle = %s, "
                        "active = TRUE WHERE src = %s AND dst = %s AND type = %s",
                        (confidence, evidence, now, cycle, src, dst, type.value))

    def insert_edge(self, src: int, dst: int, type: EdgeType, label: str, confidence: float, evidence: int, now: float,
                    cycle: int, scope: str = SHARED_SCOPE) -> None:
        self._c.execute("INSERT INTO ltm_edges (src, dst, type, label, confidence, evidence, first_seen, last_seen, "
                        "last_cycle, active, scope) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, TRUE, %s)",
                        (src, dst, type.value, label, confidence, evidence, now, now, cycle, scope))

    def both_active(self, a: int, b: int) -> bool:
        (n,), = self._c.execute("SELECT COUNT(*) FROM ltm_nodes WHERE id IN (%s, %s) AND active", (a, b)).fetchall()
        return n == 2

    def add_sources(self, nid: int, user_id: str, facts: Sequence[tuple[str, int]]) -> None:
        self._c.executemany("INSERT INTO ltm_sources AS s (node, user_id, fact, evidence) VALUES (%s, %s, %s, %s) "
                            "ON CONFLICT (node, user_id, fact) DO UPDATE SET evidence = s.evidence + excluded.evidence",
                            [(nid, user_id, f, int(n)) for f, n in facts])

    def add_edge_source(self, src: int, dst: int, type: EdgeType, user_id: str, evidence: int) -> None:
        self._c.execute("INSERT INTO ltm_edge_sources AS s (src, dst, type, user_id, evidence) VALUES (%s, %s, %s, %s, %s) "
                        "ON CONFLICT (src, dst, type, user_id) DO UPDATE SET evidence = s.evidence + excluded.evidence",
                        (src, dst, type.value, user_id, int(evidence)))

    def decay(self, factor: float, cycle: int, strong_evidence: int, drop_below: float,
              scope: str = SHARED_SCOPE) -> tuple[list[int], int]:
        c = self._c
        for table in ("ltm_nodes", "ltm_edges"):
            c.execute(f"UPDATE {table} SET confidence = confidence * %s WHERE scope = %s AND active AND last_cycle < %s "
                      "AND evidence < %s", (factor, scope, cycle, strong_evidence))
        dropped = [int(r[0]) for r in c.execute("UPDATE ltm_nodes SET active = FALSE WHERE scope = %s AND active AND "
                                                "confidence < %s RETURNING id", (scope, drop_below)).fetchall()]
        c.execute("UPDATE ltm_edges SET active = FALSE WHERE scope = %s AND active AND (confidence < %s OR src IN (SELECT id "
                  "FROM ltm_nodes WHERE NOT active) OR dst IN (SELECT id FROM ltm_nodes WHERE NOT active))", (scope, drop_below))
        return sorted(dropped), int(c.rowcount)

    def erase_user(self, user_id: str, encode: Callable[[list[str]], np.ndarray] | None = None) -> dict[str, int]:
        """Remove what the LTM holds of ``user_id`` (inside the store's ``delete_user`` transaction); see
        ``SQLiteGraphTransaction.erase_user``."""
        c = self._c
        own = [int(r[0]) for r in c.execute("SELECT id FROM ltm_nodes WHERE scope = %s", (user_id,)).fetchall()]
        n_edges = c.execute("DELETE FROM ltm_edges WHERE scope = %s", (user_id,)).rowcount + self._forget_nodes(own)
        n_nodes = c.execute("DELETE FROM ltm_nodes WHERE scope = %s", (user_id,)).rowcount
        sources = c.execute("SELECT node, user_id, fact, evidence FROM ltm_sources WHERE node IN "
                            "(SELECT node FROM ltm_sources WHERE user_id = %s)", (user_id,)).fetchall()
        e_sources = c.execute("SELECT s.src, s.dst, s.type, s.user_id, s.evidence FROM ltm_edge_sources s JOIN "
                              "ltm_edge_sources m ON m.src = s.src AND m.dst = s.dst AND m.type = s.type "
                              "WHERE m.user_id = %s", (user_id,)).fetchall()
        node_rows = c.execute("SELECT id, text, facts, evidence FROM ltm_nodes WHERE id = ANY(%s)",
                              (sorted({int(r[0]) for r in sources}),)).fetchall()
        nodes = {int(r[0]): (json.loads(r[2]), int(r[3])) for r in node_rows}
        texts = {int(r[0]): r[1] for r in node_rows}
        edges = {(int(r[0]), int(r[1]), str(r[2])): int(r[3]) for r in c.execute(
            "SELECT e.src, e.dst, e.type, e.evidence FROM ltm_edges e JOIN ltm_edge_sources m ON m.src = e.src AND "
            "m.dst = e.dst AND m.type = e.type WHERE m.user_id = %s", (user_id,)).fetchall()}
        plan = shared_erasure(user_id, sources, nodes, e_sources, edges)
        for src, dst, et in plan.edges:
            n_edges += c.execute("DELETE FROM ltm_edges WHERE src = %s AND dst = %s AND type = %s", (src, dst, et)).rowcount
            c.execute("DELETE FROM ltm_edge_sources WHERE src = %s AND dst = %s AND type = %s", (src, dst, et))
        for (src, dst, et), evidence in plan.edge_evidence.items():
            c.execute("UPDATE ltm_edges SET evidence = %s WHERE src = %s AND dst = %s AND type = %s",
                      (evidence, src, dst, et))
        n_edges += self._forget_nodes(plan.nodes)
        n_nodes += c.execute("DELETE FROM ltm_nodes WHERE id = ANY(%s)", (plan.nodes,)).rowcount if plan.nodes else 0
        ids = list(plan.kept)
        vecs = np.asarray(encode([node_document(texts[i], plan.kept[i][0]) for i in ids]), dtype=np.float32) \
            if encode is not None and ids else None
        for row, nid in enumerate(ids):
            facts, evidence = plan.kept[nid]
            c.execute("UPDATE ltm_nodes SET facts = %s, evidence = %s WHERE id = %s", (json.dumps(facts), evidence, nid))
            if vecs is not None:
                c.execute("UPDATE ltm_nodes SET embedding = %s WHERE id = %s", (vecs[row], nid))
        n_sources = c.execute("DELETE FROM ltm_sources WHERE user_id = %s", (user_id,)).rowcount
        n_sources += c.execute("DELETE FROM ltm_edge_sources WHERE user_id = %s", (user_id,)).rowcount
        if n_nodes or n_edges or n_sources or plan.kept or plan.edge_evidence:
            # Every process's in-memory views of the graph reload (``KnowledgeGraph`` watches the generation).
            c.execute("INSERT INTO meta AS m (key, value) VALUES ('ltm_erasures', '1') ON CONFLICT (key) DO UPDATE "
                      "SET value = (m.value::bigint + 1)::text")
        return {"ltm_nodes": n_nodes, "ltm_edges": n_edges, "ltm_facts": plan.facts_removed}

    def _forget_nodes(self, ids: Sequence[int]) -> int:
        """Delete the edges touching these nodes and the nodes' recorded sources; returns edges deleted."""
        if not ids:
            return 0
        ids = list(ids)
        n = self._c.execute("DELETE FROM ltm_edges WHERE src = ANY(%s) OR dst = ANY(%s)", (ids, ids)).rowcount
        self._c.execute("DELETE FROM ltm_edge_sources WHERE src = ANY(%s) OR dst = ANY(%s)", (ids, ids))
        self._c.execute("DELETE FROM ltm_sources WHERE node = ANY(%s)", (ids,))
        return n
