"""Offline consolidation over MTM: which items a cycle takes, and how its changes are written.

The store's ``commit_offline`` runs ``apply`` inside the cycle's transaction and ``refresh``
on the user's partition once the cycle committed.
"""
from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field

import numpy as np

from lightmem.stores.base import OfflineChanges
from lightmem.stores.embedded.tables import SQLiteTables
from lightmem.stores.rows import CANDIDATE_COLS, ITEM_COLS, new_candidates, row_to_item
from lightmem.stores.views.partition import Partition
from lightmem.types import MemoryItem


@dataclass
class OfflineDelta:
    """What a committed cycle changed in a user's MTM, for the partition (row ids)."""

    superseded: list[int] = field(default_factory=list)
    archived: list[int] = field(default_factory=list)
    added: list[tuple[int, MemoryItem, np.ndarray]] = field(default_factory=list)
    keyed: list[tuple[int, MemoryItem, np.ndarray]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: {"superseded": 0, "merged": 0, "abstracts": 0, "archived": 0,
                                                            "marked": 0, "facts": 0, "keyed": 0, "skipped": 0})


def candidates(sql: SQLiteTables, user_id: str, limit: int, reactivation: int, under_pressure: bool,
               half_life_days: float) -> list[tuple[int, MemoryItem, str]]:
    """Algorithm 3, step 1: (rid, item, reason) of at most ``limit`` unarchived items.

    Reasons: ``new`` (never consolidated), ``reactivated`` (retrieved at least
    ``reactivation`` times since it was), ``pressure`` (under capacity pressure, the
    least retained unconsolidated items come first: they are next to be archived).
    Access counts must be flushed first.
    """
    base = (f"SELECT {CANDIDATE_COLS} FROM items i LEFT JOIN consolidated c ON c.user_id = i.user_id AND c.item_id = i.id "
            "WHERE i.user_id = ? AND i.archived = 0 AND length(i.embedding) > 0")  # an item waiting for its vector waits
    rows = sql.query(base + " AND c.item_id IS NULL ORDER BY i.rid", (user_id,))
    out = new_candidates([(int(r[0]), row_to_item(r)) for r in rows], limit, under_pressure, half_life_days)
    if len(out) < limit:
        rows = sql.query(base + " AND i.access_count - c.access_seen >= ? ORDER BY i.rid LIMIT ?",
                         (user_id, reactivation, limit - len(out)))
        out += [(int(r[0]), row_to_item(r), "reactivated") for r in rows]
    return out


def apply(sql: SQLiteTables, c: sqlite3.Connection, user_id: str, changes: OfflineChanges, cycle: int,
          now: float) -> OfflineDelta:
    """Write a cycle's MTM changes inside ``commit_offline``'s transaction.

    Items deleted or archived since the cycle read them are skipped, and so is a cluster
    with such a member: the cycle never resurrects what the user removed.
    """
    d = OfflineDelta()

    def live(item_id: str) -> tuple[int, str, str] | None:
        return c.execute("SELECT rid, text, provenance FROM items WHERE user_id = ? AND id = ? AND archived = 0",
                         (user_id, item_id)).fetchone()

    for item_id, turns in changes.provenance.items():
        row = live(item_id)
        if row is None:
            continue
        prov = list(dict.fromkeys([*json.loads(row[2]), *turns]))
        c.execute("UPDATE items SET provenance = ? WHERE rid = ?", (json.dumps(prov), row[0]))
    for target, by, decision in changes.supersede:
        row, newer = live(target), live(by)
        if row is None or newer is None:
            d.counts["skipped"] += 1
            continue
        if decision == "update":  # the newer entry ends the older fact's validity
            (t_by,), = c.execute("SELECT event_time FROM items WHERE rid = ?", (newer[0],)).fetchall()
            c.execute("UPDATE items SET superseded_by = ?, valid_to = COALESCE(valid_to, ?) WHERE rid = ?", (by, t_by, row[0]))
        else:  # merge: still true, now represented (with its provenance) by the newer entry
            c.execute("UPDATE items SET superseded_by = ? WHERE rid = ?", (by, row[0]))
        sql.log(c, user_id, target, decision.upper(), row[1], f"superseded by {by}", now)
        d.superseded.append(int(row[0]))
        d.counts["merged" if decision == "merge" else "superseded"] += 1
    for item, vec, members in changes.abstracts:
        rows = [live(m) for m in members]
        if any(r is None for r in rows):
            d.counts["skipped"] += 1
            continue
        rid = sql.insert_item(c, item, vec)
        sql.log(c, user_id, item.id, "ADD", None, item.text, now)
        for m, r in zip(members, rows):
            c.execute("UPDATE items SET archived = 1 WHERE rid = ?", (r[0],))
            sql.log(c, user_id, m, "CONSOLIDATE", r[1], f"abstracted into {item.id}", now)
            d.archived.append(int(r[0]))
        c.execute("INSERT OR REPLACE INTO consolidated (user_id, item_id, cycle, access_seen, at) VALUES (?, ?, ?, 0, ?)",
                  (user_id, item.id, cycle, now))
        d.added.append((rid, item, np.asarray(vec, dtype=np.float32)))
        d.counts["abstracts"] += 1
        d.counts["archived"] += len(members)
    for item_id, access in changes.marks:
        if c.execute("SELECT 1 FROM items WHERE user_id = ? AND id = ?", (user_id, item_id)).fetchone():
            c.execute("INSERT OR REPLACE INTO consolidated (user_id, item_id, cycle, access_seen, at) VALUES (?, ?, ?, ?, ?)",
                      (user_id, item_id, cycle, access, now))
            d.counts["marked"] += 1
    if changes.rekey:
        written, keyed, skipped = SQLiteTables.fact_keys(c).apply(user_id, changes.facts, changes.rekey, cycle, now)
        d.counts["facts"], d.counts["keyed"] = written, len(keyed)
        d.counts["skipped"] += skipped
        for rid in keyed:
            row = c.execute(f"SELECT {ITEM_COLS}, embedding FROM items WHERE rid = ?", (rid,)).fetchone()
            d.keyed.append((rid, row_to_item(row[:-1]), np.frombuffer(row[-1], dtype=np.float32)))
    return d


def refresh(part: Partition, d: OfflineDelta) -> None:
    """Bring a user's partition in line with a committed cycle."""
    for rid in d.superseded:
        part.mark_not_current(rid)
    part.remove(d.archived)
    for rid, item, vec in d.added:
        part.add(rid, item, vec)
    for rid, item, vec in d.keyed:  # new keys: new BM25 terms and vector
        part.remove([rid])
        part.add(rid, item, vec)


def state(sql: SQLiteTables, user_id: str) -> dict[str, int]:
    """Consolidated and not-yet-consolidated active items of a user."""
    (done,), = sql.query(
        "SELECT COUNT(*) FROM consolidated c JOIN items i ON i.user_id = c.user_id AND i.id = c.item_id "
        "WHERE c.user_id = ? AND i.archived = 0", (user_id,))
    (active,), = sql.query("SELECT COUNT(*) FROM items WHERE user_id = ? AND archived = 0", (user_id,))
    return {"consolidated": int(done), "unconsolidated": int(active - done)}
