"""The LTM graph's tables in the PostgreSQL store (``GraphStore`` and ``GraphTransaction``).

Same tables and rules as ``embedded/graph.py`` (SQLite); the graph's logic lives in
``lightmem.ltm.graph`` and reaches the tables only through these two classes.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from lightmem.stores.rows import EDGE_COLS, NODE_COLS
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


class PostgresGraph:
    """Reads of the LTM graph (``GraphStore``) through the store's ``query`` (a pooled connection,
    or the thread's read snapshot or write transaction; retried like every store read)."""

    def __init__(self, query: Callable[..., list[tuple]], dim: int) -> None:
        self._query, self.dim = query, dim

    def data_version(self) -> int:
        """The newest committed cycle: cycles commit one at a time in cycle order, and the graph
        changes only in a cycle."""
        return self.last_cycle()

    def last_cycle(self) -> int:
        (cycle,), = self._query("SELECT COALESCE(MAX(cycle), 0) FROM ltm_cycles")
        return int(cycle)

    def active_nodes(self) -> tuple[list[KnowledgeNode], np.ndarray]:
        rows = self._query(f"SELECT {NODE_COLS}, embedding FROM ltm_nodes WHERE active ORDER BY id")
        if not rows:
            return [], np.zeros((0, self.dim), dtype=np.float32)
        return [_row_to_node(r) for r in rows], np.stack([as_array(r[11]) for r in rows])

    def active_edges(self) -> list[Edge]:
        return [_row_to_edge(r) for r in self._query(f"SELECT {EDGE_COLS} FROM ltm_edges WHERE active ORDER BY src, dst")]

    def node(self, nid: int) -> KnowledgeNode | None:
        rows = self._query(f"SELECT {NODE_COLS} FROM ltm_nodes WHERE id = %s", (nid,))
        return _row_to_node(rows[0]) if rows else None

    def node_by_key(self, key: str) -> KnowledgeNode | None:
        rows = self._query(f"SELECT {NODE_COLS} FROM ltm_nodes WHERE key = %s", (key,))
        return _row_to_node(rows[0]) if rows else None

    def nodes(self, include_dropped: bool = False) -> list[KnowledgeNode]:
        where = "" if include_dropped else " WHERE active"
        return [_row_to_node(r) for r in self._query(f"SELECT {NODE_COLS} FROM ltm_nodes{where} ORDER BY id")]

    def edges(self, include_dropped: bool = False) -> list[Edge]:
        where = "" if include_dropped else " WHERE active"
        return [_row_to_edge(r) for r in self._query(f"SELECT {EDGE_COLS} FROM ltm_edges{where} ORDER BY src, dst, type")]

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

    def node_by_key(self, key: str) -> KnowledgeNode | None:
        row = self._c.execute(f"SELECT {NODE_COLS} FROM ltm_nodes WHERE key = %s", (key,)).fetchone()
        return _row_to_node(row) if row else None

    def insert_node(self, key: str, kind: NodeKind, text: str, facts: list[str], confidence: float, evidence: int,
                    now: float, cycle: int, vector: np.ndarray) -> int:
        (nid,), = self._c.execute(
            "INSERT INTO ltm_nodes (key, kind, text, facts, confidence, evidence, first_seen, last_seen, last_cycle, "
            "active, embedding) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, TRUE, %s) RETURNING id",
            (key, kind.value, text, json.dumps(facts), confidence, evidence, now, now, cycle,
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
                    cycle: int) -> None:
        self._c.execute("INSERT INTO ltm_edges (src, dst, type, label, confidence, evidence, first_seen, last_seen, "
                        "last_cycle, active) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, TRUE)",
                        (src, dst, type.value, label, confidence, evidence, now, now, cycle))

    def both_active(self, a: int, b: int) -> bool:
        (n,), = self._c.execute("SELECT COUNT(*) FROM ltm_nodes WHERE id IN (%s, %s) AND active", (a, b)).fetchall()
        return n == 2

    def decay(self, factor: float, cycle: int, strong_evidence: int, drop_below: float) -> tuple[list[int], int]:
        c = self._c
        for table in ("ltm_nodes", "ltm_edges"):
            c.execute(f"UPDATE {table} SET confidence = confidence * %s WHERE active AND last_cycle < %s AND evidence < %s",
                      (factor, cycle, strong_evidence))
        dropped = [int(r[0]) for r in c.execute("UPDATE ltm_nodes SET active = FALSE WHERE active AND confidence < %s "
                                                "RETURNING id", (drop_below,)).fetchall()]
        c.execute("UPDATE ltm_edges SET active = FALSE WHERE active AND (confidence < %s OR src IN (SELECT id FROM ltm_nodes "
                  "WHERE NOT active) OR dst IN (SELECT id FROM ltm_nodes WHERE NOT active))", (drop_below,))
        return sorted(dropped), int(c.rowcount)
