"""The PostgreSQL store's lexical search: the same in-process BM25 as the embedded store, kept fresh
from the database.

Why not PostgreSQL full text: ``ts_rank`` has no IDF and another tokenizer, so hybrid fusion
(whose weights were tuned on BM25 scores) would rank differently on the two backends. This view
scores exactly as ``MTMStore`` does. Each user's view holds the texts and filter metadata of the
user's active items; before each use it reads the user's version (one indexed row) and replays
the rows changed since (``item_changes``), whoever committed them.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lightmem.stores.lexical_index import LexicalIndex
from lightmem.stores.partition import IndexMeta, meta_nbytes, row_meta

_COLS = "rid, text, event_time, kind, topic, entities, (superseded_by IS NULL AND valid_to IS NULL)"


@dataclass
class LexicalView:
    """One user's BM25 index and filter metadata, as of ``version`` of the user's items."""

    lexical: LexicalIndex
    version: int = 0
    meta: dict[int, IndexMeta] = field(default_factory=dict)
    n_not_current: int = 0
    n_tagged: int = 0

    def add(self, rows: Sequence[tuple]) -> None:
        self.lexical.add_many([(int(r[0]), r[1]) for r in rows])
        for rid, _, event_time, kind, topic, ents, current in rows:
            meta = row_meta(event_time, kind, topic, ents, current)
            self.meta[int(rid)] = meta
            self.n_not_current += not current
            self.n_tagged += bool(meta.tags)

    def remove(self, rids: Sequence[int]) -> None:
        self.lexical.remove(rids)
        for r in rids:
            gone = self.meta.pop(int(r), None)
            if gone is not None:
                self.n_not_current -= not gone.current
                self.n_tagged -= bool(gone.tags)

    def nbytes(self) -> int:
        """Estimated bytes of this view (``view_cache.ViewCache`` keeps the sum under a ceiling)."""
        return self.lexical.nbytes() + meta_nbytes(len(self.meta), self.n_tagged)


def sync(conn: Any, user_id: str, view: LexicalView | None, k1: float, b: float) -> LexicalView:
    """The user's view brought up to date (a new one when there was none or the log was pruned past it)."""
    row = conn.execute("SELECT version, pruned_through FROM item_versions WHERE user_id = %s", (user_id,)).fetchone()
    version, pruned = (int(row[0]), int(row[1])) if row else (0, 0)
    if view is None or pruned > view.version:
        # The version is read first: changes committed before the rows are read are replayed again later.
        view = LexicalView(LexicalIndex(k1, b), version)
        view.add(conn.execute(f"SELECT {_COLS} FROM items WHERE user_id = %s AND NOT archived ORDER BY rid",
                              (user_id,)).fetchall())
        return view
    if version == view.version:
        return view
    changes = conn.execute("SELECT rid, version FROM item_changes WHERE user_id = %s AND version > %s",
                           (user_id, view.version)).fetchall()
    rids = sorted({int(r) for r, _ in changes})
    view.remove([r for r in rids if r in view.meta])
    view.add(conn.execute(f"SELECT {_COLS} FROM items WHERE user_id = %s AND rid = ANY(%s) AND NOT archived ORDER BY rid",
                          (user_id, rids)).fetchall())
    view.version = max([version, *(int(v) for _, v in changes)])
    return view
