"""The PostgreSQL store's lexical search: the same in-process BM25 as the embedded store, kept fresh
from the database.

Why not PostgreSQL full text: ``ts_rank`` has no IDF and another tokenizer, so hybrid fusion
(whose weights were tuned on BM25 scores) would rank differently on the two backends. This view
scores exactly as ``SQLiteStore`` does. Each user's view holds the texts (with their fact keys) and filter metadata of the
user's active items; before each use it reads the user's version (one indexed row) and replays
the rows changed since (``item_changes``), whoever committed them.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lightmem.stores.rows import index_text_sql
from lightmem.stores.views.lexical import LexicalIndex
from lightmem.stores.views.partition import IndexMeta, MetaCounts, meta_nbytes, no_gc_pauses, row_meta

_COLS = f"rid, {index_text_sql()}, event_time, kind, topic, entities, (superseded_by IS NULL AND valid_to IS NULL)"
# The user's version, and each row changed since a version with the columns of _COLS (NULLs when it is no
# longer active).
_CHANGED = f"""
SELECT v.version, v.pruned_through, c.rid,
       i.rid, {index_text_sql("i")}, i.event_time, i.kind, i.topic, i.entities, (i.superseded_by IS NULL AND i.valid_to IS NULL)
FROM item_versions v
LEFT JOIN (SELECT DISTINCT rid FROM item_changes WHERE user_id = %(user)s AND version > %(since)s) c ON true
LEFT JOIN items i ON i.rid = c.rid AND i.user_id = %(user)s AND NOT i.archived
WHERE v.user_id = %(user)s"""


@dataclass
class LexicalView(MetaCounts):
    """One user's BM25 index and filter metadata, as of ``version`` of the user's items."""

    lexical: LexicalIndex
    version: int = 0
    meta: dict[int, IndexMeta] = field(default_factory=dict)
    n_not_current: int = 0
    n_tagged: int = 0

    def add(self, rows: Sequence[tuple]) -> None:
        self.lexical.add_many([(int(r[0]), r[1]) for r in rows])
        for rid, _, event_time, kind, topic, ents, current in rows:
            self.set_meta(int(rid), row_meta(event_time, kind, topic, ents, current))

    def remove(self, rids: Sequence[int]) -> None:
        self.lexical.remove(rids)
        self.forget_meta(rids)

    def nbytes(self) -> int:
        """Estimated bytes of this view (``views.cache.ViewCache`` keeps the sum under a ceiling)."""
        return self.lexical.nbytes() + meta_nbytes(len(self.meta), self.n_tagged)


def sync(conn: Any, user_id: str, view: LexicalView | None, k1: float, b: float) -> LexicalView:
    """The user's view brought up to date (a new one when there was none or the log was pruned past it)."""
    if view is not None:  # one round trip: the user's version and the rows changed since the view's
        rows = conn.execute(_CHANGED, {"user": user_id, "since": view.version}).fetchall()
        version, pruned = (int(rows[0][0]), int(rows[0][1])) if rows else (0, 0)
        if pruned <= view.version:
            changed = {int(r[2]) for r in rows if r[2] is not None}
            view.remove([r for r in changed if r in view.meta])
            view.add(sorted((r[3:] for r in rows if r[3] is not None), key=lambda r: int(r[0])))  # those still active
            view.version = max(version, view.version)
            return view
    # A new view (none yet, or the log was pruned past it). The version is read first: changes committed
    # before the rows are read are replayed again later.
    row = conn.execute("SELECT version FROM item_versions WHERE user_id = %s", (user_id,)).fetchone()
    view = LexicalView(LexicalIndex(k1, b), int(row[0]) if row else 0)
    rows = conn.execute(f"SELECT {_COLS} FROM items WHERE user_id = %s AND NOT archived ORDER BY rid", (user_id,)).fetchall()
    with no_gc_pauses():
        view.add(rows)
    return view
