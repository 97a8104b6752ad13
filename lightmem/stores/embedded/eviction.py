"""Capacity: beyond B active items per user, the least retained are archived (kept on disk)."""
from __future__ import annotations

import sqlite3

import numpy as np

from lightmem.retrieval.scoring import retention_score
from lightmem.stores.embedded.tables import SQLiteTables


def evict(c: sqlite3.Connection, user_id: str, n_active: int, capacity: int, now: float,
          half_life_days: float) -> list[int]:
    """Archive the user's ``n_active - capacity`` least retained items inside the caller's
    transaction (recency, access count, utility). Returns their row ids."""
    excess = n_active - capacity
    if excess <= 0:
        return []
    rows = c.execute(
        "SELECT rid, id, last_access, access_count, utility, text FROM items WHERE user_id = ? AND archived = 0",
        (user_id,),
    ).fetchall()
    scores = retention_score(
        np.asarray([r[2] for r in rows]), np.asarray([r[3] for r in rows]), np.asarray([r[4] for r in rows]),
        now=now, half_life_days=half_life_days,
    )
    victims = [rows[i] for i in np.argsort(scores, kind="stable")[:excess]]
    for rid, iid, *_, text in victims:
        c.execute("UPDATE items SET archived = 1 WHERE rid = ?", (rid,))
        SQLiteTables.log(c, user_id, iid, "ARCHIVE", text, text, now)
    return [int(v[0]) for v in victims]
