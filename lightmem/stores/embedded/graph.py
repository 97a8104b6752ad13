"""The LTM graph's tables in the store's SQLite database (``GraphStore`` and ``GraphTransaction``).

The tables are part of the store's schema (``tables.py``); the graph's rules (merge, link,
decay) live in ``lightmem.ltm.graph`` and reach the tables only through these two classes.

Every node and edge belongs to one scope (``lightmem.ltm.graph``): a user's own partition (the user id)
or the shared graph (``SHARED_SCOPE``). Reads and writes name their scope; listings without one
(``nodes``, ``edges``, ``stats``, ``texts``) are the operator's and span every scope.
"""
from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from lightmem.stores.embedded.tables import SQLiteTables
from lightmem.stores.rows import EDGE_COLS, NODE_COLS, SHARED_SCOPE, node_document, shared_erasure
from lightmem.types import Edge, EdgeType, KnowledgeNode, NodeKind


def _row_to_node(r: Sequence[Any]) -> KnowledgeNode:
    return KnowledgeNode(id=int(r[0]), key=r[1], kind=NodeKind(r[2]), text=r[3], facts=json.loads(r[4]), confidence=r[5],
                         evidence=r[6], first_seen=r[7], last_seen=r[8], last_cycle=r[9], active=bool(r[10]))


def _row_to_edge(r: Sequence[Any]) -> Edge:
    src, dst, et, label, conf, ev = r
    return Edge(src, dst, EdgeType(et), conf, ev, label)


def _in_scope(scope: str | None, first: bool = True) -> tuple[str, tuple[Any, ...]]:
    """A WHERE (``first``) or AND clause limiting rows to ``scope`` (None: every scope)."""
    if scope is None:
        return "", ()
    return (" WHERE" if first else " AND") + " scope = ?", (scope,)


class SQLiteGraph:
    """Reads of the LTM graph (``GraphStore``) over the store's database."""

    def __init__(self, sql: SQLiteTables, dim: int) -> None:
        self.sql, self.dim = sql, dim

    def data_version(self) -> int:
        return self.sql.data_version()

    def last_cycle(self) -> int:
        (cycle,), = self.sql.query("SELECT COALESCE(MAX(cycle), 0) FROM ltm_cycles")
        return int(cycle)

    def generation(self) -> tuple[int, int]:
        """(newest cycle, erasures): changes whenever the graph does (a cycle, or a user's erasure)."""
        (cycle, erased), = self.sql.query(
            "SELECT (SELECT COALESCE(MAX(cycle), 0) FROM ltm_cycles), "
            "(SELECT COALESCE(MAX(CAST(value AS INTEGER)), 0) FROM meta WHERE key = 'ltm_erasures')")
        return int(cycle), int(erased)

    def active_nodes(self, scope: str | None = None) -> tuple[list[KnowledgeNode], np.ndarray]:
        where, params = _in_scope(scope, first=False)
        rows = self.sql.query(f"SELECT {NODE_COLS}, embedding FROM ltm_nodes WHERE active = 1{where} ORDER BY id", params)
        if not rows:
            return [], np.zeros((0, self.dim), dtype=np.float32)
        vecs = np.frombuffer(b"".join(r[11] for r in rows), dtype=np.float32).reshape(len(rows), self.dim)
        return [_row_to_node(r) for r in rows], vecs

    def active_edges(self, scope: str | None = None) -> list[Edge]:
        where, params = _in_scope(scope, first=False)
        return [_row_to_edge(r) for r in self.sql.query(f"SELECT {EDGE_COLS} FROM ltm_edges WHERE active = 1{where}", params)]

    def node(self, nid: int) -> KnowledgeNode | None:
        rows = self.sql.query(f"SELECT {NODE_COLS} FROM ltm_nodes WHERE id = ?", (nid,))
        return _row_to_node(rows[0]) if rows else None

    def node_by_key(self, key: str, scope: str = SHARED_SCOPE) -> KnowledgeNode | None:
        rows = self.sql.query(f"SELECT {NODE_COLS} FROM ltm_nodes WHERE scope = ? AND key = ?", (scope, key))
        return _row_to_node(rows[0]) if rows else None

    def nodes(self, include_dropped: bool = False, scope: str | None = None) -> list[KnowledgeNode]:
        where, params = _in_scope(scope)
        if not include_dropped:
            where += (" AND" if where else " WHERE") + " active = 1"
        return [_row_to_node(r) for r in self.sql.query(f"SELECT {NODE_COLS} FROM ltm_nodes{where} ORDER BY id", params)]

    def edges(self, include_dropped: bool = False, scope: str | None = None) -> list[Edge]:
        where, params = _in_scope(scope)
        if not include_dropped:
            where += (" AND" if where else " WHERE") + " active = 1"
        return [_row_to_edge(r) for r in self.sql.query(f"SELECT {EDGE_COLS} FROM ltm_edges{where} ORDER BY src, dst",
                                                         params)]

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

    def node_by_key(self, key: str, scope: str = SHARED_SCOPE) -> KnowledgeNode | None:
        row = self._c.execute(f"SELECT {NODE_COLS} FROM ltm_nodes WHERE scope = ? AND key = ?", (scope, key)).fetchone()
        return _row_to_node(row) if row else None

    def insert_node(self, key: str, kind: NodeKind, text: str, facts: list[str], confidence: float, evidence: int,
                    now: float, cycle: int, vector: np.ndarray, scope: str = SHARED_SCOPE) -> int:
        cur = self._c.execute(
            "INSERT INTO ltm_nodes (scope, key, kind, text, facts, confidence, evidence, first_seen, last_seen, last_cycle, "
            "active, embedding) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?)",
            (scope, key, kind.value, text, json.dumps(facts), confidence, evidence, now, now, cycle,
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
                    cycle: int, scope: str = SHARED_SCOPE) -> None:
        self._c.execute("INSERT INTO ltm_edges (src, dst, type, label, confidence, evidence, first_seen, last_seen, "
                        "last_cycle, active, scope) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?)",
                        (src, dst, type.value, label, confidence, evidence, now, now, cycle, scope))

    def both_active(self, a: int, b: int) -> bool:
        return self._c.execute("SELECT COUNT(*) FROM ltm_nodes WHERE id IN (?, ?) AND active = 1", (a, b)).fetchone()[0] == 2

    def add_sources(self, nid: int, user_id: str, facts: Sequence[tuple[str, int]]) -> None:
        self._c.executemany("INSERT INTO ltm_sources (node, user_id, fact, evidence) VALUES (?, ?, ?, ?) "
                            "ON CONFLICT (node, user_id, fact) DO UPDATE SET evidence = evidence + excluded.evidence",
                            [(nid, user_id, f, int(n)) for f, n in facts])

    def add_edge_source(self, src: int, dst: int, type: EdgeType, user_id: str, evidence: int) -> None:
        self._c.execute("INSERT INTO ltm_edge_sources (src, dst, type, user_id, evidence) VALUES (?, ?, ?, ?, ?) "
                        "ON CONFLICT (src, dst, type, user_id) DO UPDATE SET evidence = evidence + excluded.evidence",
                        (src, dst, type.value, user_id, int(evidence)))

    def decay(self, factor: float, cycle: int, strong_evidence: int, drop_below: float,
              scope: str = SHARED_SCOPE) -> tuple[list[int], int]:
        c = self._c
        c.execute("UPDATE ltm_nodes SET confidence = confidence * ? WHERE scope = ? AND active = 1 AND last_cycle < ? "
                  "AND evidence < ?", (factor, scope, cycle, strong_evidence))
        c.execute("UPDATE ltm_edges SET confidence = confidence * ? WHERE scope = ? AND active = 1 AND last_cycle < ? "
                  "AND evidence < ?", (factor, scope, cycle, strong_evidence))
        dropped = [int(r[0]) for r in c.execute("SELECT id FROM ltm_nodes WHERE scope = ? AND active = 1 AND confidence < ?",
                                                (scope, drop_below))]
        c.execute("UPDATE ltm_nodes SET active = 0 WHERE scope = ? AND active = 1 AND confidence < ?", (scope, drop_below))
        n_edges = c.execute(
            "UPDATE ltm_edges SET active = 0 WHERE scope = ? AND active = 1 AND (confidence < ? OR src IN (SELECT id FROM "
            "ltm_nodes WHERE active = 0) OR dst IN (SELECT id FROM ltm_nodes WHERE active = 0))", (scope, drop_below)
        ).rowcount
        return dropped, int(n_edges)

    def erase_user(self, user_id: str, encode: Callable[[list[str]], np.ndarray] | None = None) -> dict[str, int]:
        """Remove what the LTM holds of ``user_id`` (inside the store's ``delete_user`` transaction).

        The user's partition (scope = the user id) goes whole. In the shared graph, nodes and edges
        only the user supported go, and the others lose the user's evidence and the statements the
        user alone stated; ``encode`` re-embeds the nodes whose statements changed (without it they keep
        their vector). Returns ``ltm_nodes``, ``ltm_edges`` (rows deleted) and ``ltm_facts`` (statements
        removed from nodes other users keep).
        """
        c = self._c
        own = [int(r[0]) for r in c.execute("SELECT id FROM ltm_nodes WHERE scope = ?", (user_id,))]
        n_edges = c.execute("DELETE FROM ltm_edges WHERE scope = ?", (user_id,)).rowcount + self._forget_nodes(own)
        n_nodes = c.execute("DELETE FROM ltm_nodes WHERE scope = ?", (user_id,)).rowcount
        sources = c.execute("SELECT node, user_id, fact, evidence FROM ltm_sources WHERE node IN "
                            "(SELECT node FROM ltm_sources WHERE user_id = ?)", (user_id,)).fetchall()
        e_sources = c.execute("SELECT s.src, s.dst, s.type, s.user_id, s.evidence FROM ltm_edge_sources s JOIN "
                              "ltm_edge_sources m ON m.src = s.src AND m.dst = s.dst AND m.type = s.type WHERE m.user_id = ?",
                              (user_id,)).fetchall()
        node_rows = self._select("SELECT id, text, facts, evidence FROM ltm_nodes WHERE id IN ({})",
                                 sorted({int(r[0]) for r in sources}))
        nodes = {int(r[0]): (json.loads(r[2]), int(r[3])) for r in node_rows}
        texts = {int(r[0]): r[1] for r in node_rows}
        edges = {(int(r[0]), int(r[1]), str(r[2])): int(r[3]) for r in c.execute(
            "SELECT e.src, e.dst, e.type, e.evidence FROM ltm_edges e JOIN ltm_edge_sources m ON m.src = e.src AND "
            "m.dst = e.dst AND m.type = e.type WHERE m.user_id = ?", (user_id,))}
        plan = shared_erasure(user_id, sources, nodes, e_sources, edges)
        for src, dst, et in plan.edges:
            n_edges += c.execute("DELETE FROM ltm_edges WHERE src = ? AND dst = ? AND type = ?", (src, dst, et)).rowcount
            c.execute("DELETE FROM ltm_edge_sources WHERE src = ? AND dst = ? AND type = ?", (src, dst, et))
        for (src, dst, et), evidence in plan.edge_evidence.items():
            c.execute("UPDATE ltm_edges SET evidence = ? WHERE src = ? AND dst = ? AND type = ?", (evidence, src, dst, et))
        n_edges += self._forget_nodes(plan.nodes)
        n_nodes += self._delete("DELETE FROM ltm_nodes WHERE id IN ({})", plan.nodes)
        ids = list(plan.kept)
        vecs = np.asarray(encode([node_document(texts[i], plan.kept[i][0]) for i in ids]), dtype=np.float32) \
            if encode is not None and ids else None
        for row, nid in enumerate(ids):
            facts, evidence = plan.kept[nid]
            c.execute("UPDATE ltm_nodes SET facts = ?, evidence = ? WHERE id = ?", (json.dumps(facts), evidence, nid))
            if vecs is not None:
                c.execute("UPDATE ltm_nodes SET embedding = ? WHERE id = ?", (vecs[row].tobytes(), nid))
        n_sources = c.execute("DELETE FROM ltm_sources WHERE user_id = ?", (user_id,)).rowcount
        n_sources += c.execute("DELETE FROM ltm_edge_sources WHERE user_id = ?", (user_id,)).rowcount
        if n_nodes or n_edges or n_sources or plan.kept or plan.edge_evidence:
            # Every process's in-memory views of the graph reload (``KnowledgeGraph`` watches the generation).
            c.execute("INSERT INTO meta (key, value) VALUES ('ltm_erasures', '1') ON CONFLICT (key) DO UPDATE "
                      "SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)")
        return {"ltm_nodes": n_nodes, "ltm_edges": n_edges, "ltm_facts": plan.facts_removed}

    def _chunks(self, sql: str, ids: Sequence[int]) -> list[sqlite3.Cursor]:
        """``sql`` run over ``ids`` in chunks SQLite accepts, each ``{0}`` (``{}``) filled with one placeholder per id."""
        slots = sql.count("{")
        out = []
        for at in range(0, len(ids), 400):
            chunk = [int(i) for i in ids[at:at + 400]]
            out.append(self._c.execute(sql.format(", ".join("?" * len(chunk))), chunk * slots))
        return out

    def _select(self, sql: str, ids: Sequence[int]) -> list[tuple]:
        return [row for cur in self._chunks(sql, ids) for row in cur.fetchall()]

    def _delete(self, sql: str, ids: Sequence[int]) -> int:
        return sum(cur.rowcount for cur in self._chunks(sql, ids))

    def _forget_nodes(self, ids: Sequence[int]) -> int:
        """Delete the edges touching these nodes and the nodes' recorded sources; returns edges deleted."""
        n = self._delete("DELETE FROM ltm_edges WHERE src IN ({0}) OR dst IN ({0})", ids)
        self._delete("DELETE FROM ltm_edge_sources WHERE src IN ({0}) OR dst IN ({0})", ids)
        self._delete("DELETE FROM ltm_sources WHERE node IN ({})", ids)
        return n
