"""The PostgreSQL store's capacity and offline-consolidation statements (``eviction.py`` and
``offline.py`` of the embedded store, same rules): which items a cycle takes, how its MTM changes
are written inside ``commit_offline``'s transaction, and which items capacity archives.
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np

from lightmem.stores.base import OfflineChanges
from lightmem.stores.keys import FactKeys
from lightmem.stores.rows import CANDIDATE_COLS, least_retained, new_candidates, row_to_item, to_archive
from lightmem.types import MemoryItem


def log(cur: Any, user_id: str, item_id: str, event: str, old: str | None, new: str | None, at: float) -> None:
    cur.execute("INSERT INTO history (item_id, user_id, event, old_text, new_text, at) VALUES (%s, %s, %s, %s, %s, %s)",
                (item_id, user_id, event, old, new, at))


def forget_history_texts(cur: Any, user_id: str, item_id: str) -> None:
    """Blank the texts of an item's history events; the events themselves stay."""
    cur.execute("UPDATE history SET old_text = NULL, new_text = NULL WHERE user_id = %s AND item_id = %s", (user_id, item_id))


def drop_uncited_turns(cur: Any, user_id: str, turn_ids: list[str]) -> int:
    """Delete those of ``turn_ids`` that no item of the user (archived ones too) cites and the write
    path does not still buffer. Returns the number of turns deleted."""
    ids = sorted(set(turn_ids))
    if not ids:
        return 0
    return cur.execute(
        "DELETE FROM turns t WHERE t.user_id = %(u)s AND t.turn_id = ANY(%(ids)s) "
        "AND NOT EXISTS (SELECT 1 FROM items i WHERE i.provenance::jsonb @> jsonb_build_array(t.turn_id) "
        "                AND i.user_id = %(u)s) "  # the GIN index items_cites
        "AND NOT EXISTS (SELECT 1 FROM pending q WHERE q.user_id = %(u)s AND q.turn_id = t.turn_id)",
        {"u": user_id, "ids": ids}).rowcount


def insert_item(cur: Any, item: MemoryItem, vector: np.ndarray | None, tags: list[str]) -> None:
    """Insert one item row (nothing is read back: inserts can go in a pipeline); ``vector`` None leaves its
    embedding NULL for the background indexer."""
    cur.execute(
        "INSERT INTO items (id, user_id, text, provenance, created_at, event_time, last_access, access_count, utility, "
        "topic, entities, tags, kind, valid_from, valid_to, superseded_by, archived, n_tokens, metadata, embedding, keys, "
        "updated_at) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (item.id, item.user_id, item.text, json.dumps(item.provenance), item.created_at, item.event_time,
         item.last_access, item.access_count, item.utility, item.topic, json.dumps(item.entities), tags,
         item.kind.value, item.valid_from, item.valid_to, item.superseded_by, item.archived, item.n_tokens,
         json.dumps(item.metadata), None if vector is None else np.asarray(vector, dtype=np.float32), item.keys,
         item.updated_at or item.created_at),
    )


def evict(cur: Any, user_id: str, n_active: int, capacity: int, now: float, half_life_days: float) -> list[int]:
    """Archive the user's least retained active items beyond ``capacity`` (``rows.to_archive``) inside the caller's
    transaction (recency, access count, utility), ``n_active`` being the user's active items as the
    caller counted them under the user's write lock. Returns their row ids (as ``eviction.evict``)."""
    excess = to_archive(n_active, capacity)
    if excess <= 0:
        return []
    rows = cur.execute("SELECT rid, id, last_access, access_count, utility, text FROM items "
                       "WHERE user_id = %s AND NOT archived ORDER BY rid", (user_id,)).fetchall()
    victims = least_retained(rows, excess, now, half_life_days)
    for rid, iid, *_, text in victims:
        cur.execute("UPDATE items SET archived = TRUE WHERE user_id = %s AND rid = %s", (user_id, rid))
        log(cur, user_id, iid, "ARCHIVE", text, text, now)
    return [int(v[0]) for v in victims]


def candidates(conn: Any, user_id: str, limit: int, reactivation: int, under_pressure: bool,
               half_life_days: float) -> list[tuple[int, MemoryItem, str]]:
    """Algorithm 3, step 1 (as ``offline.candidates``): (rid, item, reason) of at most ``limit`` active items."""
    base = (f"SELECT {CANDIDATE_COLS} FROM items i LEFT JOIN consolidated c ON c.user_id = i.user_id AND c.item_id = i.id "
            "WHERE i.user_id = %s AND NOT i.archived AND i.embedding IS NOT NULL")  # an item waiting for its vector waits
    rows = conn.execute(base + " AND c.item_id IS NULL ORDER BY i.rid", (user_id,)).fetchall()
    out = new_candidates([(int(r[0]), row_to_item(r)) for r in rows], limit, under_pressure, half_life_days)
    if len(out) < limit:
        rows = conn.execute(base + " AND i.access_count - c.access_seen >= %s ORDER BY i.rid LIMIT %s",
                            (user_id, reactivation, limit - len(out))).fetchall()
        out += [(int(r[0]), row_to_item(r), "reactivated") for r in rows]
    return out


def apply(cur: Any, user_id: str, changes: OfflineChanges, cycle: int, now: float,
          tags_of_item: Any) -> dict[str, int]:
    """Write a cycle's MTM changes inside ``commit_offline``'s transaction; returns their counts.

    Items deleted or archived since the cycle read them are skipped, and so is a cluster with
    such a member: the cycle never resurrects what the user removed.
    """
    counts = {"superseded": 0, "merged": 0, "abstracts": 0, "archived": 0, "marked": 0, "facts": 0, "keyed": 0,
              "skipped": 0}

    def live(item_id: str) -> tuple | None:
        return cur.execute("SELECT rid, text, provenance, event_time FROM items WHERE user_id = %s AND id = %s "
                           "AND NOT archived", (user_id, item_id)).fetchone()

    for item_id, turns in changes.provenance.items():
        row = live(item_id)
        if row is None:
            continue
        prov = list(dict.fromkeys([*json.loads(row[2]), *turns]))
        cur.execute("UPDATE items SET provenance = %s WHERE user_id = %s AND rid = %s", (json.dumps(prov), user_id, row[0]))
    for target, by, decision in changes.supersede:
        row, newer = live(target), live(by)
        if row is None or newer is None:
            counts["skipped"] += 1
            continue
        if decision == "update":  # the newer entry ends the older fact's validity
            cur.execute("UPDATE items SET superseded_by = %s, valid_to = COALESCE(valid_to, %s) WHERE user_id = %s "
                        "AND rid = %s", (by, newer[3], user_id, row[0]))
        else:  # merge: still true, now represented (with its provenance) by the newer entry
            cur.execute("UPDATE items SET superseded_by = %s WHERE user_id = %s AND rid = %s", (by, user_id, row[0]))
        log(cur, user_id, target, decision.upper(), row[1], f"superseded by {by}", now)
        counts["merged" if decision == "merge" else "superseded"] += 1
    for item, vec, members in changes.abstracts:
        rows = [live(m) for m in members]
        if any(r is None for r in rows):
            counts["skipped"] += 1
            continue
        insert_item(cur, item, vec, tags_of_item(item))
        log(cur, user_id, item.id, "ADD", None, item.text, now)
        for m, r in zip(members, rows):
            cur.execute("UPDATE items SET archived = TRUE WHERE user_id = %s AND rid = %s", (user_id, r[0]))
            log(cur, user_id, m, "CONSOLIDATE", r[1], f"abstracted into {item.id}", now)
        _mark(cur, user_id, item.id, cycle, 0, now)
        counts["abstracts"] += 1
        counts["archived"] += len(members)
    for item_id, access in changes.marks:
        if cur.execute("SELECT 1 FROM items WHERE user_id = %s AND id = %s", (user_id, item_id)).fetchone():
            _mark(cur, user_id, item_id, cycle, access, now)
            counts["marked"] += 1
    if changes.rekey:
        written, keyed, skipped = facts(cur).apply(user_id, changes.facts, changes.rekey, cycle, now)
        counts["facts"], counts["keyed"] = written, len(keyed)
        counts["skipped"] += skipped
    return counts


def facts(cur: Any) -> FactKeys:
    """The fact-key statements (``stores.keys``) on this transaction (no vector can be left for later here)."""
    return FactKeys(cur, "%s", lambda v: np.asarray(v, dtype=np.float32))


def _mark(cur: Any, user_id: str, item_id: str, cycle: int, access: int, now: float) -> None:
    cur.execute("INSERT INTO consolidated (user_id, item_id, cycle, access_seen, at) VALUES (%s, %s, %s, %s, %s) "
                "ON CONFLICT (user_id, item_id) DO UPDATE SET cycle = EXCLUDED.cycle, access_seen = EXCLUDED.access_seen, "
                "at = EXCLUDED.at", (user_id, item_id, cycle, access, now))


def state(conn: Any, user_id: str) -> dict[str, int]:
    """Consolidated and not-yet-consolidated active items of a user."""
    (done,), = conn.execute(
        "SELECT COUNT(*) FROM consolidated c JOIN items i ON i.user_id = c.user_id AND i.id = c.item_id "
        "WHERE c.user_id = %s AND NOT i.archived", (user_id,)).fetchall()
    (active,), = conn.execute("SELECT COUNT(*) FROM items WHERE user_id = %s AND NOT archived", (user_id,)).fetchall()
    return {"consolidated": int(done), "unconsolidated": int(active - done)}
