"""Access statistics, buffered: the read path counts retrievals in memory and never waits on fsync."""
from __future__ import annotations

import sqlite3
from collections.abc import Sequence

FLUSH_AT = 1024  # buffered (user, item) pairs before a touch writes them


class AccessBuffer:
    """Retrievals per (user, row id) since the last flush: (count, latest time)."""

    def __init__(self) -> None:
        self._touched: dict[str, dict[int, tuple[int, float]]] = {}

    def __bool__(self) -> bool:
        return bool(self._touched)

    def touch(self, user_id: str, rids: Sequence[int], at: float) -> bool:
        """Count one retrieval of each; True when the buffer is full and should be flushed."""
        buf = self._touched.setdefault(user_id, {})
        for r in rids:
            n, _ = buf.get(int(r), (0, at))
            buf[int(r)] = (n + 1, at)
        return sum(len(b) for b in self._touched.values()) >= FLUSH_AT

    def forget(self, user_id: str, rid: int | None = None) -> None:
        """Drop the buffered counts of a deleted item (or of every item of a deleted user)."""
        if rid is None:
            self._touched.pop(user_id, None)
        else:
            self._touched.get(user_id, {}).pop(rid, None)

    def drain(self) -> list[tuple[int, float, str, int]]:
        """(count, latest time, user id, row id) of every buffered item; empties the buffer."""
        rows = [(n, at, uid, rid) for uid, buf in self._touched.items() for rid, (n, at) in buf.items()]
        self._touched = {}
        return rows

    def write(self, c: sqlite3.Connection) -> None:
        """Add the counts to the items inside the caller's (SQLite) transaction and empty the buffer.
        A row id of another user matches nothing (every update is scoped by user)."""
        c.executemany(
            "UPDATE items SET access_count = access_count + ?, last_access = MAX(last_access, ?) "
            "WHERE user_id = ? AND rid = ?",
            self.drain(),
        )
