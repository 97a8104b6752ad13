"""The server store: per-user memory in PostgreSQL + pgvector, shared by processes and hosts.

Truth and search both live in the database: dense search is a pgvector query (HNSW, cosine) and
every other read is SQL, so each call sees every process's commits. Lexical search is the
embedded store's BM25, kept fresh from the database per user (``postgres.lexical``), so both backends
score and fuse alike.

Isolation: every statement on user data is scoped by ``user_id = %s`` with the caller's id, and
row ids are never reused. Transactions: each write is one transaction (a failure rolls it all
back); writes to one user are serialized by an advisory lock, consolidation cycles by another.
``lock`` gives several reads one snapshot (a read-only REPEATABLE READ transaction), as the
embedded store's lock gives one view of its indexes.

Connections come from a pool (``postgres.conn``): threads of one process read and write at once, each
snapshot or transaction on a connection of its own; a server restart or a dropped connection is
retried on a fresh one, and a write is never applied twice.
"""
from __future__ import annotations

import json
import logging
import re
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import numpy as np

from lightmem import metadata_filter
from lightmem.errors import InvalidInputError, ItemNotFoundError
from lightmem.stores.access import AccessBuffer
from lightmem.stores.base import DEFAULT_CAPACITY, DEFAULT_RETENTION_HALF_LIFE_DAYS, GraphUpdate, OfflineChanges, OfflineCommit
from lightmem.stores.postgres import offline as pg_offline
from lightmem.stores.postgres import schema as pg_schema
from lightmem.stores.postgres.conn import DEFAULT_POOL_SIZE, DEFAULT_STATEMENT_TIMEOUT_MS, Connections, RetryPolicy, pipelined
from lightmem.stores.postgres.graph import PostgresGraph, PostgresGraphTransaction, as_array
from lightmem.stores.postgres.lexical import LexicalView, sync
from lightmem.stores.postgres.queue import ConsolidationQueue, EmbedQueue
from lightmem.stores.rows import ITEM_COLS, check_update, forgets_old_text, index_text_sql, rewrites_text, row_to_item
from lightmem.stores.views.cache import DEFAULT_CACHE_MB, ViewCache, ceiling_bytes
from lightmem.stores.views.lexical import BM25_B, BM25_K1
from lightmem.stores.views.partition import filter_mask, tags_of
from lightmem.types import Filters, HistoryEvent, MemoryItem, Turn

log = logging.getLogger(__name__)
_KEEP_CHANGES = 10_000  # per user: older change-log rows are pruned on close (readers behind them reload)
_EXACT = "(embedding <=> %(q)s) + 0"  # "+ 0" hides the distance from the HNSW index: an exact scan
_EXACT_UP_TO = 2_000  # users with at most this many active items: exact dense search (no HNSW walk)
_USER_LOCK = "pg_advisory_xact_lock(%s, hashtext(%s))"  # (USER_LOCK_CLASS, user id): one writer per user


def _tags(item: MemoryItem) -> list[str]:
    return sorted(tags_of(item.topic, item.entities))


def _row_to_turn(r: Sequence[Any]) -> Turn:
    return Turn(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6]))


class _Depth(threading.local):
    n = 0


class SnapshotLock:
    """The store's re-entrant lock. Its outermost holder (per thread) reads one snapshot of the database
    (a read-only REPEATABLE READ transaction on a connection of its own), so several reads agree; writes
    inside it are refused. It holds the store's in-process mutex (the BM25 views) throughout, taken before
    the snapshot begins: no view runs ahead of the snapshot reading it, and threads waiting for the lock
    hold no connection."""

    def __init__(self, store: "PostgresStore") -> None:
        self._store = store
        self._depth = _Depth()

    @property
    def active(self) -> bool:
        """Whether this thread holds a read snapshot (its writes must wait until it closes)."""
        return self._store._db.in_snapshot

    def __enter__(self) -> "SnapshotLock":
        s = self._store
        s._mutex.acquire()
        # Inside one of this thread's write transactions (a graph update reading) the reads
        # already share that transaction: no snapshot of its own.
        if self._depth.n == 0 and s._db.bound() is None:
            try:
                s._db.begin_snapshot()
            except BaseException:
                s._mutex.release()
                raise
        self._depth.n += 1
        return self

    def __exit__(self, *exc: object) -> None:
        s = self._store
        self._depth.n -= 1
        try:
            if self._depth.n == 0 and s._db.in_snapshot:
                s._db.end_snapshot()
        finally:
            s._mutex.release()


class PostgresStore:
    """The server store (``MemoryStore``): PostgreSQL rows with pgvector embeddings.

    Items may be written before their vectors (``write(..., vectors=None)``: the embedding stays NULL, the
    item is found by its words at once), which the background indexer writes later (``set_vectors``,
    ``unembedded``), as on the embedded store.

    Args:
        uri: ``postgresql://user:password@host:port/database`` (libpq options such as
            ``?options=-csearch_path%3Dlightmem%2Cpublic`` pick a schema). pgvector must be installed
            (``CREATE EXTENSION vector``; done here when the role may).
        dim: Embedding dimension; must match the store's when it already exists.
        embedder: Name of the embedder that made the vectors; checked on open.
        capacity: Bound B on active items per user; the least retained are archived beyond it.
        index: ``flat`` (exact scan of the user's rows; the default) or ``hnsw`` (pgvector's HNSW index,
            made on open when missing, walked for users with more than 2,000 active items; every insert
            then costs an index entry, ~0.85 ms of the server's CPU).
        ef_search: HNSW search breadth (``hnsw.ef_search``).
        retention_half_life_days: Recency half-life used when choosing what to archive.
        bm25_k1: BM25 k1.
        bm25_b: BM25 b.
        cache_mb: Ceiling (MiB) of the per-user BM25 views held in memory; the least recently used
            users' views are dropped beyond it and rebuilt from the database on their next request
            (0 or None: no ceiling).
        pool_size: Most connections this store opens at once (threads beyond it wait for one).
        statement_timeout: Milliseconds a statement may run before the server cancels it (PostgreSQL's
            ``statement_timeout`` on each connection; 0: no limit). A canceled statement is a ``StoreError``.
        retries: Attempts after the first when a call fails on a transient error (a server restart,
            a dropped connection), with exponential backoff (``pg_conn.RetryPolicy``).
    """

    deferred_vectors = True  # write(..., vectors=None), set_vectors, unembedded: the background indexer's

    def __init__(
        self,
        uri: str,
        dim: int,
        embedder: str = "unknown",
        capacity: int = DEFAULT_CAPACITY,
        index: str = "flat",
        ef_search: int = 100,
        retention_half_life_days: float = DEFAULT_RETENTION_HALF_LIFE_DAYS,
        bm25_k1: float = BM25_K1,
        bm25_b: float = BM25_B,
        cache_mb: float | None = DEFAULT_CACHE_MB,
        pool_size: int = DEFAULT_POOL_SIZE,
        statement_timeout: int = DEFAULT_STATEMENT_TIMEOUT_MS,
        retries: int = RetryPolicy.retries,
    ) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        if index not in ("hnsw", "flat"):
            raise ValueError(f"index must be hnsw or flat, got {index!r}")
        if pool_size < 1 or statement_timeout < 0 or retries < 0:
            raise ValueError("pool_size must be >= 1, statement_timeout and retries >= 0")
        self.uri, self.location = uri, pg_schema.redact(uri)
        self.dim, self.embedder, self.capacity = dim, embedder, capacity
        self.index_kind = index
        self.half_life_days = retention_half_life_days
        self._bm25 = (bm25_k1, bm25_b)
        # Guards this process's BM25 views and access counts. Lock order: this mutex, then a connection
        # (no write transaction waits for it while holding its connection).
        self._mutex = threading.RLock()
        # Each connection's session: the same on every connection of the pool.
        settings = [f"SET hnsw.ef_search = {int(ef_search)}", f"SET statement_timeout = {int(statement_timeout)}"]
        with pg_schema.connect(uri) as conn:  # creates pgvector if missing; schema and identity checked once
            pg_schema.ensure_schema(conn, uri, dim, embedder)
            pg_schema.ensure_vector_index(conn, self.location, hnsw=index == "hnsw")
            if pg_schema.pgvector_version(conn) >= (0, 8):
                # Keep scanning the index until the user's filtered rows fill k (pgvector >= 0.8).
                settings.append("SET hnsw.iterative_scan = relaxed_order")
        self._db = Connections(uri, self.location, pool_size, settings, RetryPolicy(retries=retries))
        self._lock = SnapshotLock(self)
        self._views: ViewCache[LexicalView] = ViewCache(ceiling_bytes(cache_mb))
        self._access = AccessBuffer()
        self._graph = PostgresGraph(self._query, dim)
        self.embed_queue = EmbedQueue(self._db, uri)  # the shared embedding queue (postgres.queue)
        self.consolidation_queue = ConsolidationQueue(self._db)  # users due for a cycle, claimed by any process

    @property
    def lock(self) -> SnapshotLock:
        return self._lock

    @property
    def graph(self) -> PostgresGraph:
        """The LTM graph's tables (same database: a cycle commits graph and MTM together)."""
        return self._graph

    # -- plumbing ------------------------------------------------------------------------------
    def _query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[tuple]:
        return self._db.read(lambda conn: conn.execute(sql, params).fetchall())

    def _write(self, op: Callable[[Any, bool], Any], user_id: str | None, what: str, replay_safe: bool = False) -> Any:
        """``op(cursor, replay)`` as one atomic write (holding the user's write lock when ``user_id`` is
        given), retried on transient errors and applied once (``pg_conn.Connections.write``)."""
        if user_id is None:
            return self._db.write(op, "", what=what)
        return self._db.write(op, _USER_LOCK, (pg_schema.USER_LOCK_CLASS, user_id), what=what, replay_safe=replay_safe)

    def info(self) -> dict[str, str | None]:
        meta = dict(self._query("SELECT key, value FROM meta"))
        (version,), = self._query("SELECT MAX(version) FROM schema_version")
        return {"embedder": meta.get("embedder"), "dim": meta.get("dim"), "schema_version": str(version)}

    def users(self) -> list[str]:
        return [r[0] for r in self._query("SELECT user_id FROM turns UNION SELECT user_id FROM items ORDER BY 1")]

    def counts(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}

        def row(uid: str) -> dict[str, int]:
            return out.setdefault(uid, {"turns": 0, "items": 0, "archived": 0, "pending": 0, "unembedded": 0})

        for uid, n in self._query("SELECT user_id, COUNT(*) FROM turns GROUP BY user_id"):
            row(uid)["turns"] = int(n)
        for uid, arch, n in self._query("SELECT user_id, archived, COUNT(*) FROM items GROUP BY user_id, archived"):
            row(uid)["archived" if arch else "items"] = int(n)
        for uid, n in self._query("SELECT user_id, COUNT(*) FROM pending GROUP BY user_id"):
            row(uid)["pending"] = int(n)
        for uid, n in self._query("SELECT user_id, COUNT(*) FROM items WHERE embedding IS NULL GROUP BY user_id"):
            row(uid)["unembedded"] = int(n)
        return dict(sorted(out.items()))

    def refresh(self) -> None:
        """Bring the BM25 views of the users served so far up to date (reads need no refresh)."""
        with self._mutex:
            users = list(self._views)
        for uid in users:
            with self._mutex:
                if uid not in self._views:  # dropped by the ceiling while the others were brought up to date
                    continue
            self._view(uid)

    def _sync(self, conn: Any, user_id: str) -> LexicalView:
        """The user's view brought up to date on ``conn`` (call holding the mutex, taken before ``conn``)."""
        try:
            view = sync(conn, user_id, self._views.get(user_id), *self._bm25)
        except BaseException:
            self._views.pop(user_id)  # maybe half updated: rebuilt whole next time
            raise
        self._views.put(user_id, view)
        return view

    def _view(self, user_id: str) -> LexicalView:
        with self._mutex:
            if self._db.synced_in_snapshot(user_id):  # this snapshot's reads already brought it up to date
                view = self._views.peek(user_id)
                if view is not None:
                    return view
            view = self._db.read(lambda conn: self._sync(conn, user_id), "a lexical search")
            self._db.mark_synced(user_id)
            return view

    def drop_views(self) -> None:
        """Drop every user's in-memory BM25 view now (each is rebuilt from the database when next used)."""
        with self._mutex:
            self._views.clear()

    def pool_stats(self) -> dict[str, int]:
        """This process's connections to the database (``psycopg_pool``'s counters: size, available, waiting...)."""
        return self._db.pool_stats()

    def cache_stats(self) -> dict[str, int | float | None]:
        """The per-user BM25 views held in this process: count, estimated MiB, ceiling, hits, misses, evictions."""
        with self._mutex:
            return self._views.stats()

    # -- writes --------------------------------------------------------------------------------
    def write(self, user_id: str, turns: Sequence[Turn], items: Sequence[MemoryItem], vectors: np.ndarray | None,
              now: float, pending: Sequence[str] | None = None) -> list[MemoryItem]:
        """Persist turns and their items in one transaction (see ``MemoryStore.write``).

        Run again after a lost connection, it stores nothing twice: turns already stored are skipped
        (under the user's write lock), and so are their items; when an earlier attempt may have
        committed (``replay``), items already stored under their ids count as written by this call."""
        if vectors is None:  # stored without vectors: the background indexer writes them (set_vectors)
            vectors = [None] * len(items)
        else:
            if len(items) != len(vectors):
                raise InvalidInputError("items and vectors differ in length")
            vectors = np.asarray(vectors, dtype=np.float32)
            if len(items) and vectors.shape[1] != self.dim:
                raise InvalidInputError(f"vectors have dim {vectors.shape[1]}, the store expects {self.dim}")

        def op(cur: Any, replay: bool) -> tuple[list[MemoryItem], list[int]]:
            (seen, n_active), = cur.execute(  # under the user's write lock: nobody else adds meanwhile
                "SELECT ARRAY(SELECT turn_id FROM turns WHERE user_id = %(u)s AND turn_id = ANY(%(t)s)), "
                "(SELECT COUNT(*) FROM items WHERE user_id = %(u)s AND NOT archived)",
                {"u": user_id, "t": [t.turn_id for t in turns]}).fetchall()
            seen = set(seen)
            stored = set() if not replay else {r[0] for r in cur.execute(
                "SELECT id FROM items WHERE user_id = %s AND id = ANY(%s)", (user_id, [it.id for it in items])).fetchall()}
            new_turns = [t for t in turns if t.turn_id not in seen]
            written: list[MemoryItem] = []
            fresh: list[tuple[MemoryItem, np.ndarray]] = []
            for item, vec in zip(items, vectors):
                if item.user_id != user_id:
                    raise InvalidInputError("an item's user_id differs from the partition it is written to")
                if item.id in stored:  # this call's earlier attempt committed it
                    written.append(item)
                    continue
                if item.provenance and all(p in seen for p in item.provenance):
                    continue  # already ingested
                fresh.append((item, vec))
                written.append(item)
            with pipelined(cur.connection):  # the inserts go in one round trip; an error surfaces at its end
                if new_turns:
                    cur.executemany(
                        "INSERT INTO turns (user_id, turn_id, session_id, speaker, text, caption, timestamp, metadata, "
                        "created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                        [(user_id, t.turn_id, t.session_id, t.speaker, t.text, t.caption, t.timestamp,
                          json.dumps(t.metadata), now) for t in new_turns])
                for item, vec in fresh:
                    pg_offline.insert_item(cur, item, vec, _tags(item))
                    pg_offline.log(cur, user_id, item.id, "ADD", None, item.text, now)
                if pending is not None:
                    cur.execute("DELETE FROM pending WHERE user_id = %s", (user_id,))
                    cur.executemany("INSERT INTO pending (user_id, turn_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                                    [(user_id, t) for t in dict.fromkeys(pending)])
            n_active += sum(not it.archived for it, _ in fresh)
            return written, pg_offline.evict(cur, user_id, n_active, self.capacity, now, self.half_life_days)

        written, evicted = self._write(op, user_id, "a write", replay_safe=True)
        if evicted:
            log.info("user %s over capacity %d: archived %d items", user_id, self.capacity, len(evicted))
        return written

    def run_atomic(self, fn: Callable[[], Any]) -> Any:
        """``fn()``, whose store writes all join one transaction (this thread's): they commit together or none does
        (``Memory.batch(atomic=True)``). A transient fault rolls it back and runs ``fn`` again, as for one write."""
        return self._db.write(lambda cur, replay: fn(), "", what="a batch")

    @contextmanager
    def erasing_once(self) -> Iterator[Callable[[], None]]:
        """A deletion here has no erasure step after its commit to share (the dead row versions stay until
        ``lightmem compact``, whatever the batch): the block changes nothing."""
        yield lambda: None

    def set_vectors(self, user_id: str, items: Sequence[tuple[str, str]], vectors: np.ndarray,
                    keep: Sequence[str | None] | None = None) -> int:
        """Store the vectors of items written without one (``items``: item id, the text embedded, its
        ``index_text``), and their word keep-scores (``metadata["keep"]``, not on an item with fact keys). An item
        whose text or keys changed since, that has a vector by now, or that is gone is left as it is. Returns the
        number of items updated. (The row's former version, as every UPDATE leaves it, stays in the table file
        until ``lightmem compact``, as a deleted row's does.)"""
        vectors = np.asarray(vectors, dtype=np.float32).reshape(len(items), self.dim)

        codes = list(keep) if keep is not None else [None] * len(items)

        def op(cur: Any, _: bool) -> int:  # one statement for the batch (a round trip per item cost the queue's rate)
            return len(cur.execute(
                "UPDATE items i SET embedding = d.vec, metadata = CASE WHEN d.keep IS NOT NULL AND i.keys = '' THEN "
                "jsonb_set(i.metadata::jsonb, '{keep}', to_jsonb(d.keep))::text ELSE i.metadata END "
                "FROM unnest(%s::text[], %s::text[], %s::vector[], %s::text[]) AS d(id, txt, vec, keep) "
                f"WHERE i.user_id = %s AND i.id = d.id AND i.embedding IS NULL AND {index_text_sql('i')} = d.txt "
                "RETURNING i.rid",
                ([i for i, _ in items], [t for _, t in items], list(vectors), codes, user_id)).fetchall())

        return self._write(op, user_id, "the indexer's vectors")

    def unembedded(self, limit: int | None = None) -> list[tuple[str, str, str]]:
        """(user id, item id, index text) of items still waiting for their vector, oldest first, ``limit`` at most."""
        sql = f"SELECT user_id, id, {index_text_sql()} FROM items WHERE embedding IS NULL ORDER BY rid"
        if limit is not None:
            return [tuple(r) for r in self._query(sql + " LIMIT %s", (int(limit),))]
        return [tuple(r) for r in self._query(sql)]

    def unembedded_count(self) -> int:
        """Items of every user waiting for their vector."""
        (n,), = self._query("SELECT COUNT(*) FROM items WHERE embedding IS NULL")
        return int(n)

    def known_turns(self, user_id: str, turn_ids: Sequence[str]) -> set[str]:
        return {r[0] for r in self._query("SELECT turn_id FROM turns WHERE user_id = %s AND turn_id = ANY(%s)",
                                          (user_id, list(turn_ids)))}

    def turns(self, user_id: str, turn_ids: Sequence[str] | None = None) -> list[Turn]:
        only = "" if turn_ids is None else " AND turn_id = ANY(%s)"
        rows = self._query("SELECT turn_id, speaker, text, timestamp, session_id, caption, metadata FROM turns "
                           f"WHERE user_id = %s{only} ORDER BY pk",
                           (user_id,) if turn_ids is None else (user_id, list(turn_ids)))
        return [_row_to_turn(r) for r in rows]

    def pending_turns(self, user_id: str) -> list[Turn]:
        rows = self._query(
            "SELECT t.turn_id, t.speaker, t.text, t.timestamp, t.session_id, t.caption, t.metadata FROM turns t "
            "JOIN pending p ON p.user_id = t.user_id AND p.turn_id = t.turn_id WHERE t.user_id = %s ORDER BY t.pk",
            (user_id,))
        return [_row_to_turn(r) for r in rows]

    def speakers(self, user_id: str) -> list[str]:
        return [r[0] for r in self._query("SELECT DISTINCT speaker FROM turns WHERE user_id = %s ORDER BY 1", (user_id,))]

    def update(self, user_id: str, item_id: str, now: float, *, vector: np.ndarray | None = None,
               keep_history: bool = False, encode: Callable[[list[str]], np.ndarray] | None = None,
               **fields) -> MemoryItem:
        """Change an item's fields (text needs ``vector``); a new text without ``keep_history``
        leaves no earlier text of the item in its history (the events stay). A new text deletes the fact
        keys citing the item; ``encode`` re-embeds the other items they keyed (needed when there are any)."""
        check_update(fields, vector is not None)

        def op(cur: Any, _: bool) -> MemoryItem:
            old = self._get(cur, user_id, item_id, include_archived=True)
            rewrite = rewrites_text(old.text, fields)
            new = replace(old, **fields, **({"keys": ""} if rewrite else {}), updated_at=now)
            sets: dict[str, Any] = dict(fields)
            if rewrite:
                pg_offline.facts(cur).forget(user_id, item_id, encode)
                sets["keys"] = ""
            for k in ("entities", "metadata", "provenance"):
                if k in sets:
                    sets[k] = json.dumps(sets[k])
            if "topic" in fields or "entities" in fields:
                sets["tags"] = _tags(new)
            if vector is not None:
                sets["embedding"] = np.asarray(vector, dtype=np.float32)
            sets["updated_at"] = now
            cols = ", ".join(f"{k} = %s" for k in sets)
            cur.execute(f"UPDATE items SET {cols} WHERE user_id = %s AND id = %s", [*sets.values(), user_id, item_id])
            if forgets_old_text(old.text, fields, keep_history):
                pg_offline.forget_history_texts(cur, user_id, item_id)
                pg_offline.log(cur, user_id, item_id, "UPDATE", None, None, now)
            else:
                pg_offline.log(cur, user_id, item_id, "UPDATE", old.text, new.text, now)
            return new

        return self._write(op, user_id, "an update")

    def set_archived(self, user_id: str, item_id: str, archived: bool, now: float) -> MemoryItem:
        """Archive (hide from search, keep) or restore an item."""
        def op(cur: Any, _: bool) -> MemoryItem:
            item = self._get(cur, user_id, item_id, include_archived=True)
            if item.archived == archived:
                return item
            cur.execute("UPDATE items SET archived = %s, updated_at = %s WHERE user_id = %s AND id = %s",
                        (archived, now, user_id, item_id))
            pg_offline.log(cur, user_id, item_id, "ARCHIVE" if archived else "RESTORE", item.text, item.text, now)
            return replace(item, archived=archived, updated_at=now)

        return self._write(op, user_id, "an archive" if archived else "a restore")

    def delete(self, user_id: str, item_id: str, now: float,
               encode: Callable[[list[str]], np.ndarray] | None = None) -> dict[str, int]:
        """Erase one item: its row, the texts of its history (a ``DELETE`` event stays), the turns it
        came from that no other item cites, and the fact keys citing it (``encode`` re-embeds the other items
        they keyed; needed when there are any). Returns the counts. (The dead row version stays readable in the
        table file, and the text in the WAL, after a plain VACUUM too: ``postgres.maintenance.compact``,
        ``lightmem compact``, clears them.)"""
        def op(cur: Any, _: bool) -> tuple[int, int, int]:
            facts, _ = pg_offline.facts(cur).forget(user_id, item_id, encode)
            row = cur.execute("DELETE FROM items WHERE user_id = %s AND id = %s RETURNING rid, provenance",
                              (user_id, item_id)).fetchone()
            if row is None:
                raise ItemNotFoundError(f"user {user_id!r} has no item {item_id!r}")
            cur.execute("DELETE FROM consolidated WHERE user_id = %s AND item_id = %s", (user_id, item_id))
            pg_offline.forget_history_texts(cur, user_id, item_id)
            pg_offline.log(cur, user_id, item_id, "DELETE", None, None, now)
            return int(row[0]), pg_offline.drop_uncited_turns(cur, user_id, json.loads(row[1])), facts

        rid, turns, facts = self._write(op, user_id, "a deletion")
        with self._mutex:
            self._access.forget(user_id, rid)
        return {"items": 1, "turns": turns, "facts": facts}

    def delete_user(self, user_id: str, encode: Callable[[list[str]], np.ndarray] | None = None) -> dict[str, int]:
        """Erase a user's turns, items, history, pending and consolidation marks, its consolidation job, its change
        log, and what the LTM graph holds of the user (``PostgresGraphTransaction.erase_user``), in one transaction."""
        def op(cur: Any, _: bool) -> dict[str, int]:
            # The graph is shared by every user's cycles: the cycle lock first, then the user's, as a cycle takes them.
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (pg_schema.CYCLE_LOCK,))
            cur.execute(f"SELECT {_USER_LOCK}", (pg_schema.USER_LOCK_CLASS, user_id))
            counts = {table: cur.execute(f"DELETE FROM {table} WHERE user_id = %s", (user_id,)).rowcount
                      for table in ("items", "turns", "history", "pending", "consolidated")}
            cur.execute("DELETE FROM consolidation_jobs WHERE user_id = %s", (user_id,))  # no cycle left to run
            counts["facts"] = pg_offline.facts(cur).drop_user(user_id)
            cur.execute("DELETE FROM item_changes WHERE user_id = %s", (user_id,))
            # Every process's BM25 view of the user is now behind the pruned log: each reloads (empty).
            cur.execute("UPDATE item_versions SET version = version + 1, pruned_through = version + 1 WHERE user_id = %s",
                        (user_id,))
            counts.update(PostgresGraphTransaction(cur).erase_user(user_id, encode))
            return counts

        counts = self._write(op, None, "a user's deletion")
        with self._mutex:
            self._views.pop(user_id)
            self._access.forget(user_id)
        return counts

    # -- reads ---------------------------------------------------------------------------------
    def history(self, user_id: str, item_id: str) -> list[HistoryEvent]:
        rows = self._query("SELECT item_id, event, old_text, new_text, at FROM history WHERE user_id = %s AND item_id = %s "
                           "ORDER BY pk", (user_id, item_id))
        return [HistoryEvent(*r) for r in rows]

    @staticmethod
    def _get(cur: Any, user_id: str, item_id: str, include_archived: bool) -> MemoryItem:
        where = "" if include_archived else " AND NOT archived"
        row = cur.execute(f"SELECT {ITEM_COLS} FROM items WHERE user_id = %s AND id = %s{where}", (user_id, item_id)).fetchone()
        if row is None:
            raise ItemNotFoundError(f"user {user_id!r} has no item {item_id!r}")
        return row_to_item(row)

    def get(self, user_id: str, item_id: str, include_archived: bool = False) -> MemoryItem:
        return self._db.read(lambda conn: self._get(conn, user_id, item_id, include_archived))

    def list(self, user_id: str, include_archived: bool = False, limit: int | None = None, offset: int = 0,
             metadata: tuple | None = None, *, text: str | None = None, time_from: float | None = None,
             time_to: float | None = None, kind: str | None = None, newest_first: bool = False) -> list[MemoryItem]:
        where, params = ("" if include_archived else " AND NOT archived"), []
        if metadata:
            sql, params = metadata_filter.postgres_where(metadata)
            where += f" AND {sql}"
        for clause, value in (("strpos(lower(text), lower(%s)) > 0", text), ("event_time >= %s", time_from),
                              ("event_time <= %s", time_to), ("kind = %s", kind)):
            if value is not None:
                where += f" AND {clause}"
                params = [*params, value]
        order = "rid DESC" if newest_first else "rid"
        rows = self._query(f"SELECT {ITEM_COLS} FROM items WHERE user_id = %s{where} ORDER BY {order} LIMIT %s OFFSET %s",
                           (user_id, *params, limit, offset))
        return [row_to_item(r) for r in rows]

    def metadata_rows(self, user_id: str, filters: Filters) -> set[int] | None:
        """The user's rows whose metadata passes ``filters.metadata`` (None without one)."""
        if not filters.metadata:
            return None
        sql, params = metadata_filter.postgres_where(filters.metadata)
        return {int(r[0]) for r in self._query(f"SELECT rid FROM items WHERE user_id = %s AND {sql}", (user_id, *params))}

    def fetch(self, user_id: str, rids: Sequence[int]) -> dict[int, MemoryItem]:
        """Items of this user by row id; rows of anyone else are never returned."""
        rows = self._query(f"SELECT {ITEM_COLS} FROM items WHERE user_id = %s AND rid = ANY(%s)",
                           (user_id, [int(r) for r in rids]))
        return {int(r[0]): row_to_item(r) for r in rows}

    def search_dense(self, user_id: str, qvec: np.ndarray, k: int, filters: Filters,
                     rids: set[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        if k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        if rids is not None and filters.metadata:  # the rows already listed: not the metadata read again
            where, params = _filter_sql(user_id, replace(filters, metadata=None))
            where, params = f"{where} AND rid = ANY(%(rids)s)", {**params, "rids": sorted(rids)}
        else:
            where, params = _filter_sql(user_id, filters)
        params = {**params, "q": np.asarray(qvec, dtype=np.float32).ravel(), "k": int(k)}
        sql = f"SELECT rid, 1 - (embedding <=> %(q)s) FROM items WHERE {where} ORDER BY {{}} LIMIT %(k)s"

        # A user with few items is scanned exactly: cheaper than an index walk that filters out everyone
        # else's rows, and never short of k.
        use_index = self.index_kind == "hnsw" and len(self._view(user_id).meta) > _EXACT_UP_TO

        def run(conn: Any) -> list[tuple]:
            rows = conn.execute(sql.format("embedding <=> %(q)s" if use_index else _EXACT), params).fetchall()
            if len(rows) < k and use_index:
                # The index scan filters after it searched (pgvector < 0.8 stops at ef_search
                # candidates): short of k, the user's own rows are scanned exactly.
                rows = conn.execute(sql.format(_EXACT), params).fetchall()
            return rows

        rows = self._db.read(run, "a dense search")
        rows.sort(key=lambda r: -r[1])  # an iterative index scan may return near-ties out of order
        return (np.asarray([r[0] for r in rows], dtype=np.int64), np.asarray([r[1] for r in rows], dtype=np.float32))

    def search_lexical(
        self, user_id: str, query: str, k: int, filters: Filters, rids: set[int] | None = None
    ) -> tuple[np.ndarray, np.ndarray, Callable[[Sequence[int]], np.ndarray]]:
        """Top-``k`` BM25 ids and scores (the embedded store's BM25), and this query's BM25 of any ids."""
        with self._mutex:
            view = self._view(user_id)
            rids = self.metadata_rows(user_id, filters) if rids is None else rids
            hits = view.lexical.top(query, k, lambda ids: filter_mask(view.meta, ids, filters, view.n_not_current == 0,
                                                                        rids))
            lex = view.lexical
            return hits.ids, hits.scores, lambda rids: lex.lookup(hits.row_scores, rids)

    def cosine(self, user_id: str, qvec: np.ndarray, rids: Sequence[int]) -> np.ndarray:
        """Cosine of the query to each row (0 for a row no longer active)."""
        found = dict(self._query("SELECT rid, 1 - (embedding <=> %s) FROM items WHERE user_id = %s AND rid = ANY(%s) "
                                 "AND NOT archived AND embedding IS NOT NULL", (np.asarray(qvec, dtype=np.float32).ravel(), user_id,
                                                      [int(r) for r in rids])))
        return np.asarray([found.get(int(r), 0.0) for r in rids], dtype=np.float32)

    def signals(self, user_id: str, rids: Sequence[int]) -> tuple[np.ndarray, list[frozenset[str]]]:
        """Event times and tags of the rows (0 and none for a row no longer active), from the user's view."""
        with self._mutex:
            meta = self._view(user_id).meta
            got = [meta.get(int(r)) for r in rids]
            return (np.asarray([0.0 if m is None else m.event_time for m in got], dtype=np.float64),
                    [frozenset() if m is None else m.tags for m in got])

    def size(self, user_id: str) -> int:
        (n,), = self._query("SELECT COUNT(*) FROM items WHERE user_id = %s AND NOT archived", (user_id,))
        return int(n)

    # -- offline consolidation -------------------------------------------------------------------
    def indexed(self, user_id: str, rids: Sequence[int]) -> set[int]:
        return {int(r[0]) for r in self._query("SELECT rid FROM items WHERE user_id = %s AND rid = ANY(%s) AND NOT archived "
                                               "AND embedding IS NOT NULL",
                                               (user_id, [int(r) for r in rids]))}

    def vectors(self, user_id: str, rids: Sequence[int]) -> np.ndarray:
        found = dict(self._query("SELECT rid, embedding FROM items WHERE user_id = %s AND rid = ANY(%s) AND NOT archived",
                                 (user_id, [int(r) for r in rids])))
        missing = [int(r) for r in rids if int(r) not in found]
        if missing:
            raise ItemNotFoundError(f"user {user_id!r} has no active items with row ids {missing}")
        if not rids:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([as_array(found[int(r)]) for r in rids])

    def consolidation_candidates(self, user_id: str, limit: int, reactivation: int = 2,
                                 pressure: float = 0.9) -> list[tuple[int, MemoryItem, str]]:
        """Algorithm 3, step 1 (see ``MemoryStore.consolidation_candidates``)."""
        self.flush()  # access counts must include the buffered ones
        under_pressure = self.size(user_id) >= pressure * self.capacity
        return self._db.read(lambda conn: pg_offline.candidates(conn, user_id, limit, reactivation, under_pressure,
                                                                self.half_life_days), "a consolidation read")

    def consolidation_state(self, user_id: str) -> dict[str, int]:
        return self._db.read(lambda conn: pg_offline.state(conn, user_id), "a consolidation read")

    def commit_offline(self, user_id: str, changes: OfflineChanges, now: float, graph: GraphUpdate | None = None,
                       stats: Mapping[str, Any] | None = None,
                       before_commit: Callable[[], None] | None = None) -> OfflineCommit:
        """Commit one consolidation cycle in one transaction: a new cycle row, ``graph``'s update,
        the MTM ``changes``, ``before_commit`` (raise there to roll everything back) and the stats."""
        def op(cur: Any, _: bool) -> OfflineCommit:
            # Cycles commit one at a time (the graph is shared by every user), then the user's write lock.
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (pg_schema.CYCLE_LOCK,))
            cur.execute(f"SELECT {_USER_LOCK}", (pg_schema.USER_LOCK_CLASS, user_id))
            cycle = PostgresGraph.new_cycle(cur, now)
            live = graph
            if graph is not None and changes.marks and cur.execute(
                    "SELECT 1 FROM items WHERE user_id = %s AND id = ANY(%s) LIMIT 1",
                    (user_id, [m[0] for m in changes.marks])).fetchone() is None:
                live = None  # every item of the batch was deleted meanwhile (the user, erased): it teaches nothing
            graph_counts = dict(live.apply(PostgresGraphTransaction(cur), cycle, now)) if live is not None else {}
            mtm = pg_offline.apply(cur, user_id, changes, cycle, now, _tags)
            if before_commit is not None:
                before_commit()
            PostgresGraph.finish_cycle(cur, cycle, {**(stats or {}), **graph_counts, **{f"mtm_{k}": v for k, v in mtm.items()}})
            return OfflineCommit(cycle, graph_counts, mtm)

        return self._write(op, None, "a consolidation cycle's commit")

    # -- access statistics (buffered: the read path does not wait on a commit) -------------------
    def touch(self, user_id: str, rids: Sequence[int], at: float) -> None:
        with self._mutex:
            full = self._access.touch(user_id, rids, at)
        if full and not self._lock.active:
            self.flush()

    def flush(self) -> None:
        """Write buffered access statistics (kept buffered while this thread holds a read snapshot)."""
        if self._lock.active:
            return
        with self._mutex:  # drained under the mutex, written after it (searches need not wait for the commit)
            if not self._access:
                return
            rows = self._access.drain()
        self._write(lambda cur, _: cur.executemany(
            "UPDATE items SET access_count = access_count + %s, last_access = GREATEST(last_access, %s) "
            "WHERE user_id = %s AND rid = %s", rows), None, "writing access statistics")

    def close(self) -> None:
        if self._db.closed:
            return
        try:
            self.flush()

            def prune(cur: Any, _: bool) -> None:  # keep the change log short; readers behind it reload
                cur.execute("UPDATE item_versions SET pruned_through = version - %s WHERE version - %s > pruned_through",
                            (_KEEP_CHANGES, _KEEP_CHANGES))
                cur.execute("DELETE FROM item_changes c USING item_versions v WHERE c.user_id = v.user_id "
                            "AND c.version <= v.pruned_through")

            self._write(prune, None, "pruning the change log")
        finally:
            self.embed_queue.close()
            self._db.close()

    @staticmethod
    def new_id() -> str:
        return uuid.uuid4().hex[:16]


def _filter_sql(user_id: str, f: Filters) -> tuple[str, dict[str, Any]]:
    """The WHERE clause of a dense search: the user's active rows passing ``f``."""
    where, params = ["user_id = %(user)s", "NOT archived", "embedding IS NOT NULL"], {"user": user_id}
    if not f.include_superseded:
        where.append("superseded_by IS NULL AND valid_to IS NULL")
    if f.time_from is not None:
        where.append("event_time >= %(lo)s")
        params["lo"] = f.time_from
    if f.time_to is not None:
        where.append("event_time <= %(hi)s")
        params["hi"] = f.time_to
    if f.kinds:
        where.append("kind = ANY(%(kinds)s)")
        params["kinds"] = [getattr(k, "value", k) for k in f.kinds]
    if f.tags:
        where.append("tags && %(tags)s::text[]")
        params["tags"] = [t.lower() for t in f.tags]
    if f.metadata:
        sql, values = metadata_filter.postgres_where(f.metadata)
        names = iter(f"m{i}" for i in range(len(values)))
        where.append(re.sub(r"%s", lambda _: f"%({next(names)})s", sql))
        params.update({f"m{i}": v for i, v in enumerate(values)})
    return " AND ".join(where), params
