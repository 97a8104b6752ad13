"""The LTM graph's tables in the store's SQLite database (``GraphStore`` and ``GraphTransaction``).

The tables are part of the store's schema (``tables.py``); the graph's rules (merge, link,
decay) live in ``lightmem.ltm.graph`` and reach the tables only through these two classes.
"""
from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

import numpy as np

from lightmem.stores.embedded.tables import SQLiteTables
from lightmem.stores.rows import EDGE_COLS, NODE_COLS
from lightmem.types import Edge, EdgeType, KnowledgeNode, NodeKind


def _row_to_node(r: Sequence[Any]) -> KnowledgeNode:
    return KnowledgeNode(id=int(r[0]), key=r[1], kind=NodeKind(r[2]), text=r[3], facts=json.loads(r[4]), confidence=r[5],
                         evidence=r[6], first_seen=r[7], last_seen=r[8], last_cycle=r[9], active=bool(r[10]))


def _row_to_edge(r: Sequence[Any]) -> Edge:
    src, dst, et, label, conf, ev = r
    return Edge(src, dst, EdgeType(et), conf, ev, label)


class SQLiteGraph:
    """Reads of the LTM graph (``GraphStore``) over the store's database."""

    def __init__(self, sql: SQLiteTables, dim: int) -> None:
        self.sql, self.dim = sql, dim

    def data_version(self) -> int:
        return self.sql.data_version()

    def last_cycle(self) -> int:
        (cycle,), = self.sql.query("SELECT COALESCE(MAX(cycle), 0) FROM ltm_cycles")
        return int(cycle)

    def active_nodes(self) -> tuple[list[KnowledgeNode], np.ndarray]:
        rows = self.sql.query(f"SELECT {NODE_COLS}, embedding FROM ltm_nodes WHERE active = 1 ORDER BY id")
        if not rows:
            return [], np.zeros((0, self.dim), dtype=np.float32)
        vecs = np.frombuffer(b"".join(r[11] for r in rows), dtype=np.float32).reshape(len(rows), self.dim)
        return [_row_to_node(r) for r in rows], vecs

    def active_edges(self) -> list[Edge]:
        return [_row_to_edge(r) for r in self.sql.query(f"SELECT {EDGE_COLS} FROM ltm_edges WHERE active = 1")]

    def node(self, nid: int) -> KnowledgeNode | None:
        rows = self.sql.query(f"SELECT {NODE_COLS} FROM ltm_nodes WHERE id = ?", (nid,))
        return _row_to_node(rows[0]) if rows else None

    def node_by_key(self, key: str) -> KnowledgeNode | None:
        rows = self.sql.query(f"SELECT {NODE_COLS} FROM ltm_nodes WHERE key = ?", (key,))
        return _row_to_node(rows[0]) if rows else None

    def nodes(self, include_dropped: bool = False) -> list[KnowledgeNode]:
        where = "" if include_dropped else " WHERE active = 1"
        return [_row_to_node(r) for r in self.sql.query(f"SELECT {NODE_COLS} FROM ltm_nodes{where} ORDER BY id")]

    def edges(self, include_dropped: bool = False) -> list[Edge]:
        where = "" if include_dropped else " WHERE active = 1"
        return [_row_to_edge(r) for r in self.sql.query(f"SELECT {EDGE_COLS} FROM ltm_edges{where} ORDER BY src, dst")]

    def stats(self) -> dict[str, int]:
        (n_act, n_all), = self.sql.query("SELECT COALESCE(SUM(active), 0), COUNT(*) FROM ltm_nodes")
        (e_act, e_all), = self.sql.query("SELECT COALESCE(SUM(active), 0), COUNT(*) FROM ltm_edges")
        (cycles,), = self.sql.query("SELECT COUNT(*) FROM ltm_cycles")
        return {"nodes": int(n_act), "nodes_dropped": int(n_all - n_act), "edges": int(e_act),
                "edges_dropped": int(e_all - e_act), "cycles": int(cycles)}

    def texts(self) -> list[str]:
        out = [t for row in self.sql.query("SELECT key, text, facts FROM ltm_nodes") for t in (row[0], row[1], row[2])]
        out += [r[0] for r in self.sql.query("SELECT label FROM ltm_edges")]
        out += [r[0] for r in self.sql.query("SELECT stats FROM ltm_cycles")]
        return out

    @staticmethod
    def new_cycle(c: sqlite3.Connection, now: float) -> int:
        return int(c.execute("INSERT INTO ltm_cycles (at, stats) VALUES (?, '{}')", (now,)).lastrowid)

    @staticmethod
    def finish_cycle(c: sqlite3.Connection, cycle: int, stats: dict[str, Any]) -> None:
        c.execute("UPDATE ltm_cycles SET stats = ? WHERE cycle = ?", (json.dumps(stats), cycle))


class SQLiteGraphTransaction:
    """The graph's writes (``GraphTransaction``) on the connection of an open transaction."""

    def __init__(self, c: sqlite3.Connection) -> None:
        self._c = c

    def node(self, nid: int) -> KnowledgeNode | None:
        row = self._c.execute(f"SELECT {NODE_COLS} FROM ltm_nodes WHERE id = ?", (nid,)).fetchone()
        return _row_to_node(row) if row else None

    def node_by_key(self, key: str) -> KnowledgeNode | None:
        row = self._c.execute(f"SELECT {NODE_COLS} FROM ltm_nodes WHERE key = ?", (key,)).fetchone()
        return _row_to_node(row) if row else None

    def insert_node(self, key: str, kind: NodeKind, text: str, facts: list[str], confidence: float, evidence: int,
                    now: float, cycle: int, vector: np.ndarray) -> int:
        cur = self._c.execute(
            "INSERT INTO ltm_nodes (key, kind, text, facts, confidence, evidence, first_seen, last_seen, last_cycle, "
            "active, embedding) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?)",
            (key, kind.value, text, json.dumps(facts), confidence, evidence, now, now, cycle,
             np.asarray(vector, dtype=np.float32).tobytes()),
        )
        return int(cur.lastrowid)

    def save_node(self, node: KnowledgeNode, vector: np.ndarray) -> None:
        self._c.execute("UPDATE ltm_nodes SET facts = ?, confidence = ?, evidence = ?, last_seen = ?, last_cycle = ?, "
                        "active = 1, embedding = ? WHERE id = ?",
                        (json.dumps(node.facts), node.confidence, node.evidence, node.last_seen, node.last_cycle,
                         np.asarray(vector, dtype=np.float32).tobytes(), node.id))

    def edge_state(self, src: int, dst: int, type: EdgeType) -> tuple[float, int, bool] | None:
        row = self._c.execute("SELECT confidence, evidence, active FROM ltm_edges WHERE src = ? AND dst = ? AND type = ?",
                              (src, dst, type.value)).fetchone()
        return (row[0], int(row[1]), bool(row[2])) if row else None

    def reinforce_edge(self, src: int, dst: int, type: EdgeType, confidence: float, evidence: int, now: float,
                       cycle: int) -> None:
        self._c.execute("UPDATE ltm_edges SET confidence = ?, evidence = evidence + ?, last_seen = ?, last_cycle = ?, "
                        "active = 1 WHERE src = ? AND dst = ? AND type = ?",
                        (confidence, evidence, now, cycle, src, dst, type.value))

    def insert_edge(self, src: int, dst: int, type: EdgeType, label: str, confidence: float, evidence: int, now: float,
                    cycle: int) -> None:
        self._c.execute("INSERT INTO ltm_edges (src, dst, type, label, confidence, evidence, first_seen, last_seen, "
                        "last_cycle, active) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
                        (src, dst, type.value, label, confidence, evidence, now, now, cycle))

    def both_active(self, a: int, b: int) -> bool:
        return self._c.execute("SELECT COUNT(*) FROM ltm_nodes WHERE id IN (?, ?) AND active = 1", (a, b)).fetchone()[0] == 2

    def decay(self, factor: float, cycle: int, strong_evidence: int, drop_below: float) -> tuple[list[int], int]:
        c = self._c
        c.execute("UPDATE ltm_nodes SET confidence = confidence * ? WHERE active = 1 AND last_cycle < ? AND evidence < ?",
                  (factor, cycle, strong_evidence))
        c.execute("UPDATE ltm_edges SET confidence = confidence * ? WHERE active = 1 AND last_cycle < ? AND evidence < ?",
                  (factor, cycle, strong_evidence))
        dropped = [int(r[0]) for r in c.execute("SELECT id FROM ltm_nodes WHERE active = 1 AND confidence < ?", (drop_below,))]
        c.execute("UPDATE ltm_nodes SET active = 0 WHERE active = 1 AND confidence < ?", (drop_below,))
        n_edges = c.execute(
            "UPDATE ltm_edges SET active = 0 WHERE active = 1 AND (confidence < ? OR src IN (SELECT id FROM ltm_nodes "
            "WHERE active = 0) OR dst IN (SELECT id FROM ltm_nodes WHERE active = 0))", (drop_below,)
        ).rowcount
        return dropped, int(n_edges)
