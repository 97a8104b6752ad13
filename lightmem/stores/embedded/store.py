"""The embedded store: per-user memory over SQLite (truth) + FAISS + BM25 (rebuildable views).

Isolation is structural: every user has a separate partition (its own vector and lexical
index, loaded lazily from SQLite rows of that user only), and every SQL statement is
scoped by ``user_id``. No filter can name a user; the partition is chosen by the caller's
``user_id`` argument and nothing else.

Freshness across processes: whoever takes the store's lock first (``SQLiteStore.lock``) first
replays the commits other processes made since its last call (``refresh``), so a search
never misses another process's turns and never returns an item it deleted.

The jobs around it live beside it in ``lightmem.stores.embedded``: ``tables`` (SQL and schema),
``graph`` (the LTM graph's tables), ``eviction`` (capacity), ``offline`` (consolidation candidates
and the cycle's MTM changes), ``snapshot`` (a large user's view stored whole, so that it loads fast
after a restart); the per-user views are ``lightmem.stores.views``, the buffered access counts
``lightmem.stores.access`` and the row rules ``lightmem.stores.rows``, shared with PostgreSQL.
"""
from __future__ import annotations

import json
import logging
import sqlite3
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from lightmem import metadata_filter
from lightmem.errors import InvalidInputError, ItemNotFoundError, StoreError
from lightmem.stores.access import AccessBuffer
from lightmem.stores.base import DEFAULT_CAPACITY, DEFAULT_RETENTION_HALF_LIFE_DAYS, GraphUpdate, OfflineChanges, OfflineCommit
from lightmem.stores.embedded import offline, openlock
from lightmem.stores.embedded import snapshot as view_snapshot
from lightmem.stores.embedded.eviction import evict
from lightmem.stores.embedded.graph import SQLiteGraph, SQLiteGraphTransaction
from lightmem.stores.embedded.snapshot import SNAPSHOT_MIN_ITEMS
from lightmem.stores.embedded.tables import DB_NAME, SQLiteTables, database_path, in_place_pad
from lightmem.stores.rows import check_update, forgets_old_text, index_text_sql, rewrites_text, row_to_item
from lightmem.stores.views.cache import DEFAULT_CACHE_MB, ViewCache, ceiling_bytes
from lightmem.stores.views.lexical import BM25_B, BM25_K1, LexicalIndex
from lightmem.stores.views.partition import Partition, SyncingLock, fill, no_gc_pauses
from lightmem.stores.views.vector import VectorIndex
from lightmem.types import Filters, HistoryEvent, MemoryItem, Turn

__all__ = ["DB_NAME", "SQLiteStore", "OfflineChanges", "database_path"]

log = logging.getLogger(__name__)

_REPLAY_MIN = 256  # changes since a snapshot always replayed rather than rebuilt (and rewritten)


class SQLiteStore:
    """The embedded store (``MemoryStore``): SQLite, with FAISS and BM25 mirrors of each user's items.

    Args:
        path: A folder (the database is ``<folder>/lightmem.sqlite``) or a ``.sqlite`` file.
        dim: Embedding dimension; must match the store's when it already exists.
        embedder: Name of the embedder that made the vectors; checked on reopen.
        capacity: Bound B on active items per user; the least retained are archived beyond it.
        index: Vector index kind, ``flat`` or ``hnsw``.
        faiss_device: ``cpu`` or ``cuda``.
        synchronous: SQLite durability (``FULL`` or ``NORMAL``).
        retention_half_life_days: Recency half-life used when choosing what to archive.
        bm25_k1: BM25 k1.
        bm25_b: BM25 b.
        keep_changes: Item changes the cross-process change log keeps when the store closes; a
            process that had not read the dropped ones rebuilds its indexes from the tables.
        cache_mb: Ceiling (MiB) of the per-user views held in memory; the least recently used
            users' views are dropped beyond it and rebuilt from the tables on their next request
            (0 or None: no ceiling).
        snapshot_min_items: Users with at least this many active items get a view snapshot in the
            database (``view_snapshot``): their view then loads ~10x faster after a restart or an
            eviction, for ~1.7 KB of disk per item (384-d). 0 or None: never.
    """

    def __init__(
        self,
        path: str | Path,
        dim: int,
        embedder: str = "unknown",
        capacity: int = DEFAULT_CAPACITY,
        index: str = "flat",
        faiss_device: str = "cpu",
        synchronous: str = "FULL",
        retention_half_life_days: float = DEFAULT_RETENTION_HALF_LIFE_DAYS,
        bm25_k1: float = BM25_K1,
        bm25_b: float = BM25_B,
        keep_changes: int = 100_000,
        cache_mb: float | None = DEFAULT_CACHE_MB,
        snapshot_min_items: int | None = SNAPSHOT_MIN_ITEMS,
    ) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        db = database_path(path)
        # Held until close(): `lightmem restore` refuses meanwhile, and this waits for one in progress (openlock).
        self._open_lock = openlock.hold_shared(db, str(path))
        try:
            self.sql = SQLiteTables(db, synchronous=synchronous)
        except BaseException:
            self._open_lock.release()
            raise
        self.path = db
        self.dim, self.embedder = dim, embedder
        self.capacity = capacity
        self.index_kind, self.faiss_device = index, faiss_device
        self.half_life_days = retention_half_life_days
        self._bm25_params = (bm25_k1, bm25_b)
        self._keep_changes = keep_changes
        self._snapshot_min = snapshot_min_items or 0
        self._parts: ViewCache[Partition] = ViewCache(ceiling_bytes(cache_mb))
        self._access = AccessBuffer()
        # Partitions load lazily from the tables, so the change log starts from now.
        self._seen_version, self._seen_change = self.sql.data_version(), self.sql.last_change()
        self._lock = SyncingLock(self.sql.lock, self.refresh)
        self._graph = SQLiteGraph(self.sql, dim)
        self._check_identity()

    def _check_identity(self) -> None:
        dim, emb = self.sql.get_meta("dim"), self.sql.get_meta("embedder")
        if dim is None:
            self.sql.set_meta("dim", str(self.dim))
            self.sql.set_meta("embedder", self.embedder)
        elif int(dim) != self.dim or (emb != self.embedder and "unknown" not in (emb, self.embedder)):
            raise StoreError(
                f"{self.path} was built with embedder {emb!r} (dim {dim}); this Memory uses {self.embedder!r} "
                f"(dim {self.dim}). Open it with the same encoder, or use a new store folder."
            )

    @property
    def lock(self) -> SyncingLock:
        """The store's re-entrant lock: hold it for several index reads that must agree."""
        return self._lock

    @property
    def graph(self) -> SQLiteGraph:
        """The LTM graph's tables (same database: a cycle commits graph and MTM together)."""
        return self._graph

    def info(self) -> dict[str, str | None]:
        """``embedder``, ``dim`` and ``schema_version`` as recorded in the database."""
        return {k: self.sql.get_meta(k) for k in ("embedder", "dim", "schema_version")}

    def users(self) -> list[str]:
        return self.sql.users()

    def counts(self) -> dict[str, dict[str, int]]:
        """Per user: turns, active items, archived items, turns pending in the sensory stage's buffers."""
        return self.sql.counts()

    # -- other processes' commits -------------------------------------------------------------
    def refresh(self) -> None:
        """Replay the item changes other processes committed since the last call (a PRAGMA when none).

        Every read and write calls it through ``lock``; call it directly only to measure it.
        """
        version = self.sql.data_version()
        if version == self._seen_version or self.sql.connection.in_transaction:
            return
        self._seen_version = version
        pruned, changes = self.sql.changes_since(self._seen_change)
        if pruned > self._seen_change:  # changes we never read were pruned: rebuild lazily from the tables
            self._parts.clear()
        else:
            by_user: dict[str, set[int]] = {}
            for _, uid, rid in changes:
                by_user.setdefault(uid, set()).add(rid)
            for uid, rids in by_user.items():
                if uid in self._parts:
                    self._reload(uid, sorted(rids))
        if changes:
            self._seen_change = changes[-1][0]

    def _reload(self, user_id: str, rids: Sequence[int]) -> None:
        self._replay(self._parts.peek(user_id), user_id, rids)
        self._parts.resize(user_id)

    def _replay(self, part: Partition, user_id: str, rids: Sequence[int]) -> None:
        """Re-read these rows into the user's partition: gone or archived ones leave it."""
        part.remove([r for r in rids if r in part.vectors])
        rows = self.sql.active_vectors(user_id, rids)
        if rows:
            fill(part, rows, self.dim)

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        """``sql.transaction()`` for this process's index-changing writes: their change-log rows are
        marked seen (they are applied here directly), unless another process's commit came in
        between; then the next refresh replays both (replay is idempotent)."""
        with self.sql.transaction() as c:
            before = self.sql.last_change(c)
            yield c
            if before == self._seen_change:
                self._seen_change = self.sql.last_change(c)

    def run_atomic(self, fn: Callable[[], Any]) -> Any:
        """``fn()``, whose store writes all join one transaction: they commit together or none does
        (``Memory.batch(atomic=True)``). Erasure's log and page checks run once it has committed; when it rolls
        back, this process's views are rebuilt from the tables (the writes had changed them)."""
        with self._lock:
            try:
                with self._transaction():
                    return fn()
            except BaseException:
                self._parts.clear()
                raise

    def erasing_once(self) -> AbstractContextManager[Callable[[], None]]:
        """The erasure steps of the deletions and redacting updates made inside (this thread's) wait for its end:
        one log checkpoint and one read of the file's pages for all of their texts (``SQLiteTables.erasing_once``).
        A batch of N deletions then costs N row deletions and one erasure, not N erasures that each read the
        whole file. An atomic batch needs no block: its one transaction does the same at its commit."""
        return self.sql.erasing_once()

    # -- partitions ------------------------------------------------------------------------
    def _part(self, user_id: str) -> Partition:
        with self._lock:
            part = self._parts.get(user_id)
            if part is None:
                part = self._load(user_id)
                self._parts.put(user_id, part)
            return part

    def drop_views(self) -> None:
        """Drop every user's in-memory views now (each is rebuilt from the tables when next used)."""
        with self.sql.lock:
            self._parts.clear()

    def cache_stats(self) -> dict[str, int | float | None]:
        """The per-user views held in this process: count, estimated MiB, ceiling, hits, misses, evictions."""
        with self.sql.lock:
            return self._parts.stats()

    def _load(self, user_id: str) -> Partition:
        """The user's view: from its snapshot and the changes since, else from the tables."""
        seq = self.sql.last_change()  # the view read afterwards reflects at least this change
        with no_gc_pauses():
            part = self._from_snapshot(user_id, seq) if self._snapshot_min else None
            if part is not None:
                return part
            rows = self.sql.active_vectors(user_id)
            part = Partition(VectorIndex(self.dim, self.index_kind, self.faiss_device), LexicalIndex(*self._bm25_params))
            if rows:
                fill(part, rows, self.dim)
        if self._snapshot_min and len(rows) >= self._snapshot_min and not part.unembedded:
            self._snapshot(user_id, seq, part)
        return part

    def _from_snapshot(self, user_id: str, seq: int) -> Partition | None:
        """The snapshot with the user's item changes since it replayed; None when there is none,
        it does not parse, or the changes since are pruned from the log or many (then a rebuild
        from the tables is as fast and writes a fresh one)."""
        snap = self.sql.view_snapshot(user_id)
        if snap is None:
            return None
        snap_seq, n, blob = snap
        pruned, rids = self.sql.user_changes_since(user_id, snap_seq)
        if pruned > snap_seq or len(rids) > max(_REPLAY_MIN, n // 4):
            return None
        try:
            part = view_snapshot.load(blob, self.dim, self.index_kind, self.faiss_device)
        except view_snapshot.SnapshotError as exc:
            log.warning("user %s: ignoring the view snapshot (rebuilding from the tables): %s", user_id, exc)
            return None
        if rids:
            held = [r for r in rids if r in part.vectors]
            self._replay(part, user_id, rids)
            left = [r for r in held if r not in part.vectors]
            # A snapshot holding an item deleted since outlived the deletion (one written before writes checked
            # for erasures): rewritten, so that the item's vector and terms leave the file.
            if (len(rids) >= max(_REPLAY_MIN, n // 20) or (left and self.sql.any_deleted(left))) and not part.unembedded:
                self._snapshot(user_id, seq, part)
        return part

    def _snapshot(self, user_id: str, seq: int, part: Partition) -> None:
        """Store ``part``, which reflects every change through ``seq``, as the user's snapshot; not when an
        item was erased after ``seq`` (the view may hold it: ``put_view_snapshot`` checks again as it writes)."""
        try:
            if self.sql.erased_through() > seq:
                log.debug("user %s: view snapshot not written (an item was erased while it was built)", user_id)
                return
            written = self.sql.put_view_snapshot(user_id, seq, len(part.vectors), view_snapshot.dump(part))
        except (StoreError, sqlite3.Error, ValueError, KeyError, MemoryError) as exc:
            # A cache: a failed write (a full disk, a blob over SQLite's limit) costs a rebuild later, not this read.
            log.warning("user %s: could not write the view snapshot: %s: %s", user_id, type(exc).__name__, exc)
            return
        if not written:
            log.debug("user %s: view snapshot not written (the database is busy or read-only)", user_id)

    # -- writes ----------------------------------------------------------------------------
    # Items may be written before their vectors (``write(..., vectors=None)``, then ``set_vectors``).
    deferred_vectors = True

    def write(self, user_id: str, turns: Sequence[Turn], items: Sequence[MemoryItem], vectors: np.ndarray | None,
              now: float, pending: Sequence[str] | None = None) -> list[MemoryItem]:
        """Persist turns and their items in one transaction, then index the items.

        Turns whose id the user already has are skipped with their items, so re-running an
        interrupted ingest resumes it instead of duplicating memory. ``pending`` (when given)
        replaces, in the same transaction, the ids of the user's turns still buffered by the
        write path. ``vectors`` None: the items are stored and indexed for BM25 now, and get their
        vectors later (``set_vectors``; ``unembedded`` lists those still waiting, across restarts).
        """
        if vectors is None:
            rows: Sequence[np.ndarray | None] = [None] * len(items)
        else:
            if len(items) != len(vectors):
                raise InvalidInputError("items and vectors differ in length")
            vectors = np.asarray(vectors, dtype=np.float32)
            if len(items) and vectors.shape[1] != self.dim:
                raise InvalidInputError(f"vectors have dim {vectors.shape[1]}, the store expects {self.dim}")
            rows = list(vectors)
        with self._lock:
            part = self._part(user_id)
            with self._transaction() as c:
                self._access.write(c)
                seen = self.sql.existing_turn_ids(c, user_id, [t.turn_id for t in turns])
                for t in turns:
                    if t.turn_id not in seen:
                        self.sql.insert_turn(c, user_id, t, now)
                written: list[tuple[int, MemoryItem, np.ndarray | None]] = []
                for item, vec in zip(items, rows):
                    if item.user_id != user_id:
                        raise InvalidInputError("an item's user_id differs from the partition it is written to")
                    if item.provenance and all(p in seen for p in item.provenance):
                        continue  # already ingested
                    rid = self.sql.insert_item(c, item, vec, self.dim)
                    self.sql.log(c, user_id, item.id, "ADD", None, item.text, now)
                    written.append((rid, item, vec))
                if pending is not None:
                    self.sql.set_pending(c, user_id, pending)
                evicted = evict(c, user_id, len(part.vectors) + len(written), self.capacity, now, self.half_life_days)
            try:
                for rid, item, vec in written:
                    part.add(rid, item, vec)
                part.remove(evicted)
                self._parts.resize(user_id)
            except BaseException:
                # SQLite has the batch; drop the in-memory view so it is rebuilt from it.
                self._parts.pop(user_id)
                raise
            if evicted:
                log.info("user %s over capacity %d: archived %d items", user_id, self.capacity, len(evicted))
            return [item for _, item, _ in written]

    def set_vectors(self, user_id: str, items: Sequence[tuple[str, str]], vectors: np.ndarray,
                    keep: Sequence[str | None] | None = None) -> int:
        """Store the vectors of items written without one: ``items`` are (item id, the text embedded: its
        ``index_text``).

        An item whose text or keys changed since, that has a vector by now, or that is gone is left as it is.
        ``keep`` (optional): each item's word keep-scores, set as its ``metadata["keep"]`` (not on an item with
        fact keys: those scores were of its text and keys, and it keeps the ones of its text). Returns the
        number of items updated.
        """
        vectors = np.asarray(vectors, dtype=np.float32).reshape(len(items), self.dim)
        with self._lock:
            with self._transaction() as c:
                done: list[tuple[int, np.ndarray]] = []
                for j, (item_id, text) in enumerate(items):
                    row = c.execute("SELECT rid, embedding, metadata, keys, pad FROM items WHERE user_id = ? AND id = ? "
                                    f"AND length(embedding) = 0 AND {index_text_sql()} = ?",
                                    (user_id, item_id, text)).fetchone()
                    if row is None:
                        continue
                    rid, old_vec, old_meta, keys, pad = int(row[0]), row[1], row[2], row[3], row[4]
                    vec, meta = vectors[j].tobytes(), old_meta
                    if keep is not None and keep[j] is not None and keys == "":  # scores of the text alone
                        meta = json.dumps({**json.loads(old_meta), "keep": keep[j]})
                    # One UPDATE that keeps the record's size: the row is rewritten where it is (tables.in_place_pad).
                    c.execute("UPDATE items SET embedding = ?, metadata = ?, pad = ? WHERE rid = ?",
                              (vec, meta, in_place_pad(pad, (old_vec, old_meta), (vec, meta)), rid))
                    done.append((rid, vectors[j]))
            part = self._parts.peek(user_id)
            if part is not None and done:
                try:
                    part.set_vectors([r for r, _ in done], np.stack([v for _, v in done]))
                    self._parts.resize(user_id)
                except BaseException:
                    self._parts.pop(user_id)  # SQLite has the vectors: the view is rebuilt from it
                    raise
            return len(done)

    def unembedded(self, limit: int | None = None) -> list[tuple[str, str, str]]:
        """(user id, item id, index text) of items still waiting for their vector, oldest first, ``limit`` at
        most (none when the store is open read-only: nothing could be written back)."""
        if self.sql.read_only:
            return []
        sql = f"SELECT user_id, id, {index_text_sql()} FROM items WHERE length(embedding) = 0 ORDER BY rid"  # items_unembedded
        if limit is not None:
            return [tuple(r) for r in self.sql.query(sql + " LIMIT ?", (int(limit),))]
        return [tuple(r) for r in self.sql.query(sql)]

    def unembedded_count(self) -> int:
        """How many items ``unembedded`` would list with no limit (0 when the store is open read-only)."""
        return 0 if self.sql.read_only else self.sql.unembedded_count()

    def known_turns(self, user_id: str, turn_ids: Sequence[str]) -> set[str]:
        """Which of these turn ids the user already has (to skip work on a resumed ingest)."""
        with self.sql.lock:
            return self.sql.existing_turn_ids(self.sql.connection, user_id, list(turn_ids))

    def turns(self, user_id: str, turn_ids: Sequence[str] | None = None) -> list[Turn]:
        """The user's stored turns (only those of ``turn_ids`` when given), oldest first."""
        return self.sql.turns(user_id, turn_ids)

    def pending_turns(self, user_id: str) -> list[Turn]:
        """Turns stored but still in the sensory stage's buffers (no items yet), oldest first."""
        return self.sql.pending_turns(user_id)

    def speakers(self, user_id: str) -> list[str]:
        """The distinct speakers of a user's turns (names the consolidator must scrub)."""
        return self.sql.speakers(user_id)

    def update(self, user_id: str, item_id: str, now: float, *, vector: np.ndarray | None = None,
               keep_history: bool = False, encode: Callable[[list[str]], np.ndarray] | None = None,
               **fields) -> MemoryItem:
        """Change an item's fields (text needs ``vector``).

        A new text with ``keep_history=False`` leaves no earlier text of the item in its history
        (the events stay, their texts are blanked); with ``keep_history=True`` the old text is
        logged beside the new one. A new text deletes the fact keys citing the item; the other items
        they keyed are re-embedded with ``encode`` (without it, their vectors are left empty for the
        background indexer of the next ``Memory`` to open the store).
        """
        check_update(fields, vector is not None)
        with self._lock:
            old = self.get(user_id, item_id, include_archived=True)
            rewrite = rewrites_text(old.text, fields)
            new = replace(old, **fields, **({"keys": ""} if rewrite else {}), updated_at=now)
            rid = self.sql.rid_of(user_id, item_id)
            redact = forgets_old_text(old.text, fields, keep_history)
            old_events = self.sql.history(user_id, item_id) if redact else []
            rekeyed: list[int] = []
            with self._transaction() as c:
                if rewrite:
                    _, rekeyed = SQLiteTables.fact_keys(c).forget(user_id, item_id, encode)
                sets = {k: v for k, v in fields.items()}
                if rewrite:
                    sets["keys"] = ""
                for k in ("entities", "metadata", "provenance"):
                    if k in sets:
                        sets[k] = json.dumps(sets[k])
                if vector is not None:
                    sets["embedding"] = np.asarray(vector, dtype=np.float32).tobytes()
                sets["updated_at"] = now
                cols = ", ".join(f"{k} = ?" for k in sets)
                c.execute(f"UPDATE items SET {cols} WHERE user_id = ? AND id = ?", [*sets.values(), user_id, item_id])
                if redact:
                    self.sql.forget_history_texts(c, user_id, item_id)
                    self.sql.log(c, user_id, item_id, "UPDATE", None, None, now)
                else:
                    self.sql.log(c, user_id, item_id, "UPDATE", old.text, new.text, now)
            if redact:
                self.sql.erase_log()
                self.sql.scrub([old.text, *(t for e in old_events for t in (e.old_text, e.new_text))])
            part = self._part(user_id)
            if not new.archived and rid is not None:
                vec = vector if vector is not None else (
                    None if rid in part.unembedded else part.vectors.vecs[part.vectors.row_of(rid)].copy())
                part.remove([rid])
                part.add(rid, new, None if vec is None else np.asarray(vec, dtype=np.float32))
            if rekeyed:
                self._replay(part, user_id, rekeyed)
            self._parts.resize(user_id)
            return new

    def set_archived(self, user_id: str, item_id: str, archived: bool, now: float) -> MemoryItem:
        """Archive (hide from search, keep on disk) or restore an item."""
        with self._lock:
            item = self.get(user_id, item_id, include_archived=True)
            if item.archived == archived:
                return item
            rid = self.sql.rid_of(user_id, item_id)
            with self.sql.transaction() as c:
                c.execute("UPDATE items SET archived = ?, updated_at = ? WHERE rid = ?", (int(archived), now, rid))
                self.sql.log(c, user_id, item_id, "ARCHIVE" if archived else "RESTORE", item.text, item.text, now)
            self._parts.pop(user_id)  # reload lazily: restore needs the stored vector
            return replace(item, archived=archived, updated_at=now)

    def delete(self, user_id: str, item_id: str, now: float,
               encode: Callable[[list[str]], np.ndarray] | None = None) -> dict[str, int]:
        """Erase one item: its row, its vector and terms, the texts of its history (a ``DELETE``
        event stays), the turns it came from that no other item cites, and the fact keys citing it (the
        other items they keyed are re-embedded with ``encode``; without it, their vectors are left empty for
        the background indexer of the next ``Memory`` to open the store). Returns the counts."""
        with self._lock:
            rid = self.sql.rid_of(user_id, item_id)
            if rid is None:
                raise ItemNotFoundError(f"user {user_id!r} has no item {item_id!r}")
            with self._transaction() as c:
                row = c.execute("SELECT provenance FROM items WHERE rid = ?", (rid,)).fetchone()
                if row is None:  # another process deleted it since
                    raise ItemNotFoundError(f"user {user_id!r} has no item {item_id!r}")
                provenance = row[0]
                erased = self.sql.erased_texts(c, user_id, item_id)
                facts, rekeyed = SQLiteTables.fact_keys(c).forget(user_id, item_id, encode)
                c.execute("DELETE FROM items WHERE user_id = ? AND rid = ?", (user_id, rid))
                c.execute("DELETE FROM consolidated WHERE user_id = ? AND item_id = ?", (user_id, item_id))
                self.sql.forget_history_texts(c, user_id, item_id)
                self.sql.log(c, user_id, item_id, "DELETE", None, None, now)
                turns = self.sql.drop_uncited_turns(c, user_id, json.loads(provenance))
            self._access.forget(user_id, rid)
            part = self._parts.peek(user_id)
            if part is not None:
                part.remove([rid])
                if rekeyed:
                    self._replay(part, user_id, rekeyed)
                self._parts.resize(user_id)
            self.sql.erase_log()
            self.sql.scrub(erased)
            return {"items": 1, "turns": turns, "facts": facts}

    def delete_user(self, user_id: str, encode: Callable[[list[str]], np.ndarray] | None = None) -> dict[str, int]:
        """Erase a user's turns, items and history everywhere, and what the LTM graph holds of the user
        (``SQLiteGraphTransaction.erase_user``), in one transaction. Returns what was removed."""
        with self._lock:
            with self.sql.transaction() as c:
                counts = {
                    table: c.execute(f"DELETE FROM {table} WHERE user_id = ?", (user_id,)).rowcount
                    for table in ("items", "turns", "history", "pending", "consolidated")
                }
                counts["facts"] = SQLiteTables.fact_keys(c).drop_user(user_id)
                counts.update(SQLiteGraphTransaction(c).erase_user(user_id, encode))
            self._parts.pop(user_id)
            self._access.forget(user_id)
            self.sql.erase_log()
            if counts["items"] or counts["turns"]:  # too many texts to look for: the file is rebuilt
                self.sql.scrub((), always=True)
            return counts

    # -- reads -----------------------------------------------------------------------------
    def history(self, user_id: str, item_id: str) -> list[HistoryEvent]:
        return self.sql.history(user_id, item_id)

    def get(self, user_id: str, item_id: str, include_archived: bool = False) -> MemoryItem:
        rows = self.sql.item_rows(user_id, "id = ?" + ("" if include_archived else " AND archived = 0"), [item_id])
        if not rows:
            raise ItemNotFoundError(f"user {user_id!r} has no item {item_id!r}")
        return row_to_item(rows[0])

    def list(self, user_id: str, include_archived: bool = False, limit: int | None = None, offset: int = 0,
             metadata: tuple | None = None, *, text: str | None = None, time_from: float | None = None,
             time_to: float | None = None, kind: str | None = None, newest_first: bool = False) -> list[MemoryItem]:
        where, params = ([] if include_archived else ["archived = 0"]), []
        if metadata:
            sql, params = metadata_filter.sqlite_where(metadata)
            where.append(sql)
        for clause, value in (("instr(lower(text), lower(?)) > 0", text), ("event_time >= ?", time_from),
                              ("event_time <= ?", time_to), ("kind = ?", kind)):
            if value is not None:
                where.append(clause)
                params = [*params, value]
        order = f"rid{' DESC' if newest_first else ''} LIMIT ? OFFSET ?"
        if limit is None:  # every row from offset on: one read
            return [row_to_item(r) for r in self.sql.item_rows(user_id, " AND ".join(where), [*params, -1, offset], order)]
        # A page is cut by row ids first (read from the user's index, no sort of whole rows), then only its rows are
        # read: a page of a user's 10,000 items reads 50 rows, not all of them.
        sql = f"SELECT rid FROM items WHERE user_id = ?{''.join(f' AND {w}' for w in where)} ORDER BY {order}"
        rids = [r[0] for r in self.sql.query(sql, [user_id, *params, limit, offset])]
        found = self.sql.items_by_rid(user_id, rids)
        return [found[r] for r in rids if r in found]  # a row deleted in between is left out

    def fetch(self, user_id: str, rids: Sequence[int]) -> dict[int, MemoryItem]:
        """Items of this user by row id; rows of anyone else are never returned."""
        return self.sql.items_by_rid(user_id, rids)

    def search_dense(self, user_id: str, qvec: np.ndarray, k: int, filters: Filters,
                     rids: set[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            part = self._part(user_id)
            mask = part.allowed(part.vectors.ids, filters, self.metadata_rows(user_id, filters) if rids is None else rids)
            return part.vectors.search(qvec, k, mask)

    def search_lexical(
        self, user_id: str, query: str, k: int, filters: Filters, rids: set[int] | None = None
    ) -> tuple[np.ndarray, np.ndarray, Callable[[Sequence[int]], np.ndarray]]:
        """Top-``k`` BM25 ids and scores, and a lookup of this query's BM25 for any ids.

        The query is scored once; Stage 1 uses the lookup for dense-only candidates.
        """
        with self._lock:
            part = self._part(user_id)
            rids = self.metadata_rows(user_id, filters) if rids is None else rids
            hits = part.lexical.top(query, k, lambda ids: part.allowed(ids, filters, rids))
            lex = part.lexical
            return hits.ids, hits.scores, lambda rids: lex.lookup(hits.row_scores, rids)

    def cosine(self, user_id: str, qvec: np.ndarray, rids: Sequence[int]) -> np.ndarray:
        with self._lock:
            return self._part(user_id).vectors.cosine(qvec, rids)

    def metadata_rows(self, user_id: str, filters: Filters) -> set[int] | None:
        """The user's rows whose metadata passes ``filters.metadata`` (None without one)."""
        if not filters.metadata:
            return None
        where, params = metadata_filter.sqlite_where(filters.metadata)
        return {int(r[0]) for r in self.sql.query(f"SELECT rid FROM items WHERE user_id = ? AND {where}", [user_id, *params])}

    def signals(self, user_id: str, rids: Sequence[int]) -> tuple[np.ndarray, list[frozenset[str]]]:
        """Event times and tags of indexed items, from memory (no SQL on the read path)."""
        with self._lock:
            meta = self._part(user_id).meta
            ms = [meta[int(r)] for r in rids]
        return np.asarray([m.event_time for m in ms], dtype=np.float64), [m.tags for m in ms]

    def size(self, user_id: str) -> int:
        return len(self._part(user_id).vectors)

    # -- offline consolidation ----------------------------------------------------------------
    def indexed(self, user_id: str, rids: Sequence[int]) -> set[int]:
        """Which of these row ids the user's index holds (unarchived, not deleted)."""
        with self._lock:
            part = self._part(user_id)
            return {int(r) for r in rids if int(r) in part.vectors and int(r) not in part.unembedded}

    def vectors(self, user_id: str, rids: Sequence[int]) -> np.ndarray:
        """Stored vectors of indexed items (from the in-memory mirror)."""
        with self._lock:
            part = self._part(user_id)
            return part.vectors.vecs[[part.vectors.row_of(int(r)) for r in rids]].copy()

    def consolidation_candidates(self, user_id: str, limit: int, reactivation: int = 2,
                                 pressure: float = 0.9) -> list[tuple[int, MemoryItem, str]]:
        """Algorithm 3, step 1: (rid, item, reason) of at most ``limit`` unarchived items.

        Reasons: ``new`` (never consolidated), ``reactivated`` (retrieved at least
        ``reactivation`` times since it was), ``pressure`` (under capacity pressure, the
        least retained unconsolidated items come first: they are next to be archived).
        """
        self.flush()  # access counts must include the buffered ones
        under_pressure = self.size(user_id) >= pressure * self.capacity
        return offline.candidates(self.sql, user_id, limit, reactivation, under_pressure, self.half_life_days)

    def commit_offline(self, user_id: str, changes: OfflineChanges, now: float, graph: GraphUpdate | None = None,
                       stats: Mapping[str, Any] | None = None,
                       before_commit: Callable[[], None] | None = None) -> OfflineCommit:
        """Commit one consolidation cycle in one transaction: a new cycle row, ``graph``'s update,
        the MTM ``changes``, ``before_commit`` (raise there to roll everything back) and the
        cycle's stats; then bring the user's indexes in line, before readers get the lock back."""
        with self.sql.lock:
            with self.sql.transaction() as c:
                cycle = SQLiteGraph.new_cycle(c, now)
                marked = [m[0] for m in changes.marks]
                if graph is not None and marked and not c.execute(
                        f"SELECT 1 FROM items WHERE user_id = ? AND id IN ({', '.join('?' * len(marked))}) LIMIT 1",
                        (user_id, *marked)).fetchone():
                    graph = None  # every item of the batch was deleted meanwhile (the user, erased): it teaches nothing
                graph_counts = dict(graph.apply(SQLiteGraphTransaction(c), cycle, now)) if graph is not None else {}
                delta = offline.apply(self.sql, c, user_id, changes, cycle, now)
                if before_commit is not None:
                    before_commit()
                SQLiteGraph.finish_cycle(c, cycle, {**(stats or {}), **graph_counts,
                                                    **{f"mtm_{k}": v for k, v in delta.counts.items()}})
            part = self._parts.peek(user_id)
            if part is not None:  # else it loads lazily from the tables, which have the cycle
                offline.refresh(part, delta)
                self._parts.resize(user_id)
        return OfflineCommit(cycle, graph_counts, dict(delta.counts))

    def consolidation_state(self, user_id: str) -> dict[str, int]:
        """Consolidated and not-yet-consolidated active items of a user."""
        return offline.state(self.sql, user_id)

    # -- access statistics (buffered: the read path must not wait on fsync) -------------------
    def touch(self, user_id: str, rids: Sequence[int], at: float) -> None:
        with self._lock:
            if self._access.touch(user_id, rids, at):
                self.flush()

    def flush(self) -> None:
        """Write buffered access statistics (a read-only store drops them: it was opened saying so)."""
        with self._lock:
            if self._access and self.sql.read_only:
                self._access.drain()
            elif self._access:
                with self.sql.transaction() as c:
                    self._access.write(c)

    def close(self) -> None:
        """Write what is buffered and close; the database closes even when that write fails (a full disk)."""
        try:
            self.flush()
            self.sql.prune_changes(self._keep_changes)
        finally:
            try:
                self.sql.close()
            finally:
                self._open_lock.release()  # after the database closes (its last close checkpoints the log)

    @staticmethod
    def new_id() -> str:
        return uuid.uuid4().hex[:16]
