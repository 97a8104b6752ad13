"""Capacity: beyond B active items per user, the least retained are archived (kept on disk)."""
from __future__ import annotations

import sqlite3

from lightmem.stores.embedded.tables import SQLiteTables
from lightmem.stores.rows import least_retained, to_archive


def evict(c: sqlite3.Connection, user_id: str, n_active: int, capacity: int, now: float,
          half_life_days: float) -> list[int]:
    """Archive the user's least retained items beyond ``capacity`` (``rows.to_archive``: down to 1% under it) inside
    the caller's transaction (recency, access count, utility). Returns their row ids."""
    excess = to_archive(n_active, capacity)
    if excess <= 0:
        return []
    rows = c.execute(
        "SELECT rid, id, last_access, access_count, utility, text FROM items WHERE user_id = ? AND archived = 0",
        (user_id,),
    ).fetchall()
    victims = least_retained(rows, excess, now, half_life_days)
    for rid, iid, *_, text in victims:
        c.execute("UPDATE items SET archived = 1 WHERE rid = ?", (rid,))
        SQLiteTables.log(c, user_id, iid, "ARCHIVE", text, text, now)
    return [int(v[0]) for v in victims]
