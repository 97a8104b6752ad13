"""Fact keys in the tables, the same statements for both backends.

An offline cycle may write short facts about a user's memories (``ConsolidationSpec.fact_keys``). Each fact
cites the items it keys (``item_facts``, ``item_fact_sources``), and an item's ``keys`` column holds the merged
text of the facts that cite it, oldest first (``rows.merged_keys``). The item's vector and its BM25 terms come
from its text followed by its keys (``MemoryItem.index_text``); a prompt shows the text alone.

A fact is derived from every item it cites. So deleting an item, or giving it a new text, deletes each fact that
cites it, and every other item those facts keyed is keyed again without them: new keys and a new vector, in the
same transaction (``FactKeys.forget``).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from lightmem.errors import InvalidInputError
from lightmem.stores.rows import merged_keys
from lightmem.types import keyed_text

Encode = Callable[[list[str]], np.ndarray]

# Appended to each backend's schema (``{id}``: its auto-increment key type).
TABLES = """
CREATE TABLE IF NOT EXISTS item_facts (
  fid {id}, user_id TEXT NOT NULL, text TEXT NOT NULL, cycle INTEGER NOT NULL, at {real} NOT NULL
);
CREATE INDEX IF NOT EXISTS item_facts_by_user ON item_facts (user_id);
CREATE TABLE IF NOT EXISTS item_fact_sources (
  fid BIGINT NOT NULL, user_id TEXT NOT NULL, item_id TEXT NOT NULL, PRIMARY KEY (fid, item_id)
);
CREATE INDEX IF NOT EXISTS item_fact_sources_by_item ON item_fact_sources (user_id, item_id);
"""


class FactKeys:
    """The fact-key statements on one open transaction.

    Args:
        cur: A cursor or connection whose ``execute`` returns something with ``fetchall``.
        mark: The driver's parameter mark (``?`` for sqlite3, ``%s`` for psycopg).
        vector: A vector as the ``embedding`` column takes it.
        deferred: What ``embedding`` holds for an item whose vector is to be written later (the embedded
            store's background indexer picks such items up); None: the backend cannot wait for one.
    """

    def __init__(self, cur: Any, mark: str, vector: Callable[[np.ndarray], Any], deferred: Any = None) -> None:
        self.cur, self.mark, self.vector, self.deferred = cur, mark, vector, deferred

    def _q(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        return self.cur.execute(sql.replace("?", self.mark), tuple(params)).fetchall()

    def keys_of(self, user_id: str, item_id: str) -> str:
        """The item's keys as the facts citing it make them."""
        rows = self._q("SELECT f.text FROM item_facts f JOIN item_fact_sources s ON s.fid = f.fid "
                       "WHERE s.user_id = ? AND s.item_id = ? ORDER BY f.fid", (user_id, item_id))
        return merged_keys([r[0] for r in rows])

    def add(self, user_id: str, text: str, item_ids: Sequence[str], cycle: int, now: float) -> int:
        """Insert a fact citing ``item_ids``; returns its id."""
        (fid,), = self._q("INSERT INTO item_facts (user_id, text, cycle, at) VALUES (?, ?, ?, ?) RETURNING fid",
                          (user_id, text.strip(), cycle, now))
        for item_id in dict.fromkeys(item_ids):
            self._q("INSERT INTO item_fact_sources (fid, user_id, item_id) VALUES (?, ?, ?) RETURNING fid",
                    (fid, user_id, item_id))
        return int(fid)

    def drop_citing(self, user_id: str, item_ids: Sequence[str]) -> tuple[int, list[str]]:
        """Delete every fact citing one of ``item_ids``. Returns the number deleted and the other items they
        keyed (to ``rekey``)."""
        fids: set[int] = set()
        for item_id in item_ids:
            fids.update(int(r[0]) for r in self._q(
                "SELECT fid FROM item_fact_sources WHERE user_id = ? AND item_id = ?", (user_id, item_id)))
        if not fids:
            return 0, []
        gone, others = set(item_ids), set()
        for fid in sorted(fids):
            others.update(r[0] for r in self._q("SELECT item_id FROM item_fact_sources WHERE fid = ?", (fid,)))
            self._q("DELETE FROM item_fact_sources WHERE fid = ? RETURNING fid", (fid,))
            self._q("DELETE FROM item_facts WHERE fid = ? RETURNING fid", (fid,))
        return len(fids), sorted(others - gone)

    def forget(self, user_id: str, item_id: str, encode: Encode | None) -> tuple[int, list[int]]:
        """What deleting ``item_id``, or giving it a new text, does to fact keys: the facts citing it are deleted
        and the other items they keyed are keyed again (``rekey``). Returns the facts deleted and the row ids
        re-keyed."""
        n, others = self.drop_citing(user_id, [item_id])
        return n, self.rekey(user_id, others, encode)

    def rekey(self, user_id: str, item_ids: Sequence[str], encode: Encode | None) -> list[int]:
        """Set these items' keys from the facts citing them now, and their vectors from text and keys (with
        ``encode``; without it, the vector is left to be written later where the backend allows). Returns the
        row ids changed."""
        rows = [r for i in item_ids for r in self._q("SELECT rid, id, text FROM items WHERE user_id = ? AND id = ?",
                                                     (user_id, i))]
        if not rows:
            return []
        keys = [self.keys_of(user_id, r[1]) for r in rows]
        if encode is not None:
            vecs = np.asarray(encode([keyed_text(r[2], k) for r, k in zip(rows, keys)]), dtype=np.float32)
            values = [self.vector(v) for v in vecs]
        elif self.deferred is not None:
            values = [self.deferred] * len(rows)
        else:
            raise InvalidInputError(
                f"this change removes fact keys of {len(rows)} other memories, whose vectors must be computed again: "
                "pass encode (Memory.delete and Memory.update do)")
        for r, k, v in zip(rows, keys, values):
            self._q("UPDATE items SET keys = ?, embedding = ? WHERE rid = ? RETURNING rid", (k, v, r[0]))
        return [int(r[0]) for r in rows]

    def apply(self, user_id: str, facts: Sequence[tuple[str, Sequence[str]]],
              rekey: Mapping[str, tuple[str, str, str, np.ndarray]], cycle: int,
              now: float) -> tuple[int, list[int], int]:
        """A cycle's fact keys (``OfflineChanges.facts`` and ``.rekey``), inside its transaction.

        The cycle planned them without the store's lock. A fact is written only if every item it cites is still
        active with the text and keys the cycle read: a fact is derived from each of them, so one deleted,
        archived or rewritten meanwhile takes the fact with it. An item is keyed only if the facts written make
        exactly the keys its planned vector was computed from (else it keeps its keys and vector, and the facts
        citing it are not written either). Returns the facts written, the row ids keyed and the items skipped.
        """
        ok: dict[str, int] = {}
        for item_id, (text, old, _, _) in rekey.items():
            row = self._q("SELECT rid, text, keys FROM items WHERE user_id = ? AND id = ? AND archived = ?",
                          (user_id, item_id, False))
            if row and row[0][1] == text and (row[0][2] or "") == old:
                ok[item_id] = int(row[0][0])
        kept = [(t, list(dict.fromkeys(ids))) for t, ids in facts if t.strip() and ids]
        while True:  # drop the facts citing an item that cannot be keyed, until every kept item's keys come out
            kept = [(t, ids) for t, ids in kept if all(i in ok for i in ids)]
            made = {i: merged_keys([rekey[i][1], *(t for t, ids in kept if i in ids)]) for i in ok}
            bad = [i for i in ok if made[i] != rekey[i][2]]
            if not bad:
                break
            for i in bad:
                del ok[i]
        for text, ids in kept:
            self.add(user_id, text, ids, cycle, now)
        for item_id, rid in ok.items():
            self._q("UPDATE items SET keys = ?, embedding = ? WHERE rid = ? RETURNING rid",
                    (rekey[item_id][2], self.vector(rekey[item_id][3]), rid))
        return len(kept), list(ok.values()), len(rekey) - len(ok)

    def drop_user(self, user_id: str) -> int:
        """Delete every fact of the user; returns how many."""
        n = len(self._q("DELETE FROM item_facts WHERE user_id = ? RETURNING fid", (user_id,)))
        self._q("DELETE FROM item_fact_sources WHERE user_id = ? RETURNING fid", (user_id,))
        return n

    def count(self, user_id: str) -> int:
        (n,), = self._q("SELECT COUNT(*) FROM item_facts WHERE user_id = ?", (user_id,))
        return int(n)
