"""SQLite as the source of truth of MTM: turns, items (with their vectors), history.

WAL mode, one transaction per write batch, and every statement scoped by ``user_id``.
Item row ids (``rid``) are AUTOINCREMENT, so a deleted item's id is never reused and a
stale index entry can never point at someone else's newer item.

Several processes may share one database. Triggers append every change that matters to
the search indexes (insert, delete, text / vector / archive / validity updates) to
``item_changes``, whoever made it; a process notices others' commits with ``PRAGMA
data_version`` (microseconds) and replays only the rows that changed.
"""
from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lightmem.errors import NotAStoreError, StoreError, StoreReadOnlyError
from lightmem.stores.embedded import faults as sqlite_faults
from lightmem.stores.embedded import residue
from lightmem.stores.keys import TABLES as _FACT_TABLES
from lightmem.stores.keys import FactKeys
from lightmem.stores.rows import ITEM_COLS, index_text_sql, row_to_item
from lightmem.types import HistoryEvent, MemoryItem, Turn

log = logging.getLogger(__name__)

SCHEMA_VERSION = "5"
# Older versions this code upgrades in place: every change is additive, except that schema 4 rebuilds
# ltm_nodes (a key became unique per scope), keeping every row (``_scope_ltm``). Schema 5 adds fact keys
# (``stores.keys``): an item's ``keys`` column and the fact tables; code older than it would delete an item
# without the facts citing it, so it may not open a schema-5 store.
MIGRATABLE = {"1", "2", "3", "4"}
_BUSY_TIMEOUT_S = 30.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS turns (
  pk INTEGER PRIMARY KEY AUTOINCREMENT,
  user_id TEXT NOT NULL, turn_id TEXT NOT NULL, session_id TEXT, speaker TEXT NOT NULL,
  text TEXT NOT NULL, caption TEXT, timestamp REAL NOT NULL, metadata TEXT NOT NULL,
  created_at REAL NOT NULL,
  UNIQUE (user_id, turn_id)
);
CREATE TABLE IF NOT EXISTS items (
  rid INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  user_id TEXT NOT NULL, text TEXT NOT NULL, provenance TEXT NOT NULL,
  created_at REAL NOT NULL, event_time REAL NOT NULL, last_access REAL NOT NULL,
  access_count INTEGER NOT NULL DEFAULT 0, utility REAL NOT NULL DEFAULT 1.0,
  topic TEXT, entities TEXT NOT NULL DEFAULT '[]', kind TEXT NOT NULL DEFAULT 'episodic',
  valid_from REAL, valid_to REAL, superseded_by TEXT,
  archived INTEGER NOT NULL DEFAULT 0, n_tokens INTEGER NOT NULL DEFAULT 0,
  metadata TEXT NOT NULL DEFAULT '{}', embedding BLOB NOT NULL, keys TEXT NOT NULL DEFAULT '',
  pad BLOB NOT NULL DEFAULT X'', updated_at REAL
);
CREATE INDEX IF NOT EXISTS items_by_user ON items (user_id, archived);
-- The background indexer's work list (items stored before their vector): a partial index, so that
-- finding them after a restart reads only them (an optional index, added within schema 4).
CREATE INDEX IF NOT EXISTS items_unembedded ON items (rid) WHERE length(embedding) = 0;
-- Who cites a turn (a deletion keeps the turns another item cites): a covering index, so that the check reads the
-- user's (user_id, provenance) pairs and not their rows with the vectors (14 -> 2 ms at 25,000 items; an optional
-- index, added within schema 5).
CREATE INDEX IF NOT EXISTS items_provenance ON items (user_id, provenance);
CREATE TABLE IF NOT EXISTS history (
  pk INTEGER PRIMARY KEY AUTOINCREMENT,
  item_id TEXT NOT NULL, user_id TEXT NOT NULL, event TEXT NOT NULL,
  old_text TEXT, new_text TEXT, at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS history_by_item ON history (user_id, item_id);
CREATE TABLE IF NOT EXISTS pending (
  user_id TEXT NOT NULL, turn_id TEXT NOT NULL, PRIMARY KEY (user_id, turn_id)
);
CREATE TABLE IF NOT EXISTS consolidated (
  user_id TEXT NOT NULL, item_id TEXT NOT NULL, cycle INTEGER NOT NULL, access_seen INTEGER NOT NULL,
  at REAL NOT NULL, PRIMARY KEY (user_id, item_id)
);
-- schema 2: the change log other processes refresh their indexes from
CREATE TABLE IF NOT EXISTS item_changes (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, user_id TEXT NOT NULL, rid INTEGER NOT NULL
);
CREATE TRIGGER IF NOT EXISTS items_changes_insert AFTER INSERT ON items
BEGIN INSERT INTO item_changes (user_id, rid) VALUES (NEW.user_id, NEW.rid); END;
CREATE TRIGGER IF NOT EXISTS items_changes_delete AFTER DELETE ON items
BEGIN INSERT INTO item_changes (user_id, rid) VALUES (OLD.user_id, OLD.rid); END;
CREATE TRIGGER IF NOT EXISTS items_changes_update
AFTER UPDATE OF text, embedding, archived, superseded_by, valid_to, event_time, kind, topic, entities, keys ON items
BEGIN INSERT INTO item_changes (user_id, rid) VALUES (NEW.user_id, NEW.rid); END;
-- view snapshots (an optional cache, added within schema 3: code that predates it ignores the table).
-- Deleting an item drops its user's snapshot, so erased memories leave no copy behind.
CREATE TABLE IF NOT EXISTS view_snapshots (
  user_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, n INTEGER NOT NULL, data BLOB NOT NULL
);
CREATE TRIGGER IF NOT EXISTS items_drop_snapshot AFTER DELETE ON items
BEGIN DELETE FROM view_snapshots WHERE user_id = OLD.user_id; END;
-- The change-log position of the newest erasure (a change whose item row is gone: a deletion; a
-- redacting update sets it too, ``forget_history_texts``), so that a snapshot built before it, and
-- written after it by another process, is refused (``put_view_snapshot``). One number for all users:
-- it names no one, and outlives ``delete_user``.
CREATE TRIGGER IF NOT EXISTS item_changes_mark_erasure AFTER INSERT ON item_changes
WHEN NOT EXISTS (SELECT 1 FROM items WHERE rid = NEW.rid)
BEGIN INSERT OR REPLACE INTO meta (key, value) VALUES ('erased_through', NEW.seq); END;
-- schema 3: the LTM graph (schema-2 stores made these tables on first LTM use, unversioned;
-- IF NOT EXISTS keeps theirs). No link back to MTM: de-identified knowledge only.
-- schema 4: every node and edge belongs to a scope: the user id of the user whose episodes it came
-- from (the default, per-user LTM), or '' for the shared graph; a key is unique within its scope.
-- The shared graph records which users supported each node, statement and edge (ltm_sources,
-- ltm_edge_sources) so that erasing a user removes what only that user said.
CREATE TABLE IF NOT EXISTS ltm_nodes (
  id INTEGER PRIMARY KEY AUTOINCREMENT, scope TEXT NOT NULL DEFAULT '', key TEXT NOT NULL, kind TEXT NOT NULL,
  text TEXT NOT NULL, facts TEXT NOT NULL DEFAULT '[]', confidence REAL NOT NULL, evidence INTEGER NOT NULL,
  first_seen REAL NOT NULL, last_seen REAL NOT NULL, last_cycle INTEGER NOT NULL, active INTEGER NOT NULL DEFAULT 1,
  embedding BLOB NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS ltm_nodes_scope_key ON ltm_nodes (scope, key);
CREATE TABLE IF NOT EXISTS ltm_edges (
  src INTEGER NOT NULL, dst INTEGER NOT NULL, type TEXT NOT NULL, label TEXT NOT NULL DEFAULT '',
  confidence REAL NOT NULL, evidence INTEGER NOT NULL, first_seen REAL NOT NULL, last_seen REAL NOT NULL,
  last_cycle INTEGER NOT NULL, active INTEGER NOT NULL DEFAULT 1, scope TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (src, dst, type)
);
CREATE INDEX IF NOT EXISTS ltm_edges_dst ON ltm_edges (dst);
CREATE INDEX IF NOT EXISTS ltm_edges_scope ON ltm_edges (scope);
CREATE TABLE IF NOT EXISTS ltm_cycles (cycle INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, stats TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS ltm_sources (
  node INTEGER NOT NULL, user_id TEXT NOT NULL, fact TEXT NOT NULL, evidence INTEGER NOT NULL,
  PRIMARY KEY (node, user_id, fact)
);
CREATE INDEX IF NOT EXISTS ltm_sources_by_user ON ltm_sources (user_id);
CREATE TABLE IF NOT EXISTS ltm_edge_sources (
  src INTEGER NOT NULL, dst INTEGER NOT NULL, type TEXT NOT NULL, user_id TEXT NOT NULL, evidence INTEGER NOT NULL,
  PRIMARY KEY (src, dst, type, user_id)
);
CREATE INDEX IF NOT EXISTS ltm_edge_sources_by_user ON ltm_edge_sources (user_id);
"""

def _add_keys(c: sqlite3.Connection) -> None:
    """Schema 5 (inside the schema transaction, before ``_SCHEMA``): items get their ``keys`` column, and the
    change-log trigger is made again so that a change of keys reaches other processes' views. Within schema 5,
    items also get their ``pad`` (``reserve``): an additive column that older code of schema 5 ignores."""
    cols = {r[1] for r in c.execute("PRAGMA table_info(items)").fetchall()}
    if cols and "keys" not in cols:
        c.execute("ALTER TABLE items ADD COLUMN keys TEXT NOT NULL DEFAULT ''")
        c.execute("DROP TRIGGER IF EXISTS items_changes_update")
    if cols and "pad" not in cols:
        c.execute("ALTER TABLE items ADD COLUMN pad BLOB NOT NULL DEFAULT X''")
    if cols and "updated_at" not in cols:  # within schema 5 too: NULL reads as the item's created_at
        c.execute("ALTER TABLE items ADD COLUMN updated_at REAL")


# -- rows rewritten in place ------------------------------------------------------------------------------------
# Why: when an UPDATE makes a row longer than its page can hold, SQLite moves cells between pages and rebuilds
# them (btree.c's balance); the rebuilt pages keep the bytes of the cells' former places in their unused space,
# which ``secure_delete`` never zeroes, since nothing was deleted. The background indexer grows every row it
# embeds by a whole vector, so a memory's text written before its vector stayed in such space after the memory
# itself was deleted. A row written without its vector therefore holds back as many bytes in ``pad`` (zeros),
# and the indexer writes the vector and gives the bytes back in one UPDATE that keeps the record's size: SQLite
# then overwrites the cell where it is (``in_place_pad``), and nothing moves.


def _varint_len(v: int) -> int:
    """Bytes of SQLite's varint for ``v`` (>= 0)."""
    n = 1
    while v > 0x7F and n < 9:
        v >>= 7
        n += 1
    return n


def record_bytes(value: str | bytes | None) -> int:
    """Bytes a TEXT, BLOB or NULL value takes in an SQLite record: its serial type (a varint in the header) and
    its content."""
    if value is None:
        return 1
    if isinstance(value, str):
        n = len(value.encode("utf-8", "surrogatepass"))
        return _varint_len(13 + 2 * n) + n
    n = len(value)
    return _varint_len(12 + 2 * n) + n


def reserve_bytes(dim: int, text: str) -> bytes:
    """The ``pad`` of a row written without its vector: the vector's bytes and room for the word keep-scores the
    indexer may add to its metadata."""
    return bytes(4 * dim + 2 * len(text.split()) + 16)


def in_place_pad(pad: bytes, old: Sequence[str | bytes | None], new: Sequence[str | bytes | None]) -> bytes:
    """The ``pad`` that keeps a row's record the size it was when the values ``old`` become ``new``, so that
    SQLite rewrites the row in place; as close below that size as it can get where no pad fits exactly (a row
    that shrinks stays on its page too). Empty when the pad cannot absorb the growth (the row grows)."""
    target = record_bytes(pad) + sum(map(record_bytes, old)) - sum(map(record_bytes, new))
    for size in range(max(target - 1, 0), max(target - 10, -1), -1):
        if record_bytes(bytes(size)) <= target:
            return bytes(size)
    return b""


FACT_TABLES = _FACT_TABLES.format(id="INTEGER PRIMARY KEY AUTOINCREMENT", real="REAL")


def _scope_ltm(c: sqlite3.Connection) -> bool:
    """Schema 4, first half (inside the schema transaction, before ``_SCHEMA``): a graph made before
    scopes gets a scope column on its edges, and its node table is renamed for ``_copy_legacy_nodes``
    (SQLite cannot drop the old ``UNIQUE (key)``). Returns whether there is a node table to copy."""
    def columns(table: str) -> set[str]:
        return {r[1] for r in c.execute(f"PRAGMA table_info({table})").fetchall()}

    edges = columns("ltm_edges")
    if edges and "scope" not in edges:
        c.execute("ALTER TABLE ltm_edges ADD COLUMN scope TEXT NOT NULL DEFAULT ''")
    nodes = columns("ltm_nodes")
    if not nodes or "scope" in nodes:
        return False
    c.execute("ALTER TABLE ltm_nodes RENAME TO ltm_nodes_unscoped")
    return True


def _copy_legacy_nodes(c: sqlite3.Connection) -> None:
    """Schema 4, second half: the nodes of a graph made before scopes, every row kept as it was, go to
    the shared scope (''): the graph was shared by every user then. Only an operator who opts into the
    shared graph (``LTMOptions(scope="shared")``) reads them; who stated what was not recorded, so a
    user's erasure cannot attribute these statements."""
    cols = "id, key, kind, text, facts, confidence, evidence, first_seen, last_seen, last_cycle, active, embedding"
    c.execute(f"INSERT INTO ltm_nodes (scope, {cols}) SELECT '', {cols} FROM ltm_nodes_unscoped ORDER BY id")
    c.execute("DROP TABLE ltm_nodes_unscoped")


def _row_to_turn(r: tuple) -> Turn:
    """(turn_id, speaker, text, timestamp, session_id, caption, metadata) → Turn."""
    return Turn(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6]))


@dataclass
class Erasure:
    """Erasure steps held for later (the end of a transaction or of ``SQLiteTables.erasing_once``): whether the
    write-ahead log must be emptied, the erased texts to look for in the pages' unused space, and whether the file
    must be rebuilt whatever is found (a user's erasure)."""

    log: bool = False
    texts: list[str | None] = field(default_factory=list)
    always: bool = False

    def merge(self, other: Erasure) -> None:
        self.log = self.log or other.log
        self.texts.extend(other.texts)
        self.always = self.always or other.always


class SQLiteTables:
    """Thread-safe access to one lightmem database file.

    Args:
        path: Database file (created with its folder when missing).
        synchronous: SQLite ``synchronous`` pragma. ``FULL`` (default) survives power loss;
            ``NORMAL`` survives process crashes only and commits faster.
    """

    def __init__(self, path: str | Path, synchronous: str = "FULL") -> None:
        if synchronous.upper() not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, got {synchronous!r}")
        self.path = Path(path)
        self.label = store_label(self.path)
        self.lock = threading.RLock()
        self._read_only = sqlite_faults.read_only_reason(self.path)
        self._depth = 0  # transactions open in the owning thread: an inner one joins the outer (``transaction``)
        self._after = Erasure()  # what the open transaction's erasures wait for its commit to do (``erase_log``, ``scrub``)
        self._held: dict[int, Erasure] = {}  # per thread: what its open ``erasing_once`` holds for its end
        if self._read_only is not None:
            self._open_read_only()
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the folder of the lightmem store at {self.path}: {exc}") from exc
        self._conn = sqlite_faults.connect(self.path, self.label, _BUSY_TIMEOUT_S)
        try:
            schema_version(self._conn, self.path)  # first, before WAL mode writes to another application's database
            _retry_busy(lambda: self._conn.execute("PRAGMA journal_mode=WAL"))
            self._conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
            # Deleted rows are overwritten with zeros, not left in free space: a deleted memory's text
            # must not stay readable in the file (see ``erase_log``).
            self._conn.execute("PRAGMA secure_delete=ON")
            self._conn.execute("PRAGMA foreign_keys=ON")
            with self.transaction() as c:  # one process creates or upgrades the schema; others wait
                version = schema_version(c, self.path)
                if version is not None and version != SCHEMA_VERSION and version not in MIGRATABLE:
                    raise StoreError(f"{self.path} has schema version {version}; this lightmem reads {SCHEMA_VERSION}")
                legacy = _scope_ltm(c)
                _add_keys(c)
                for stmt in _statements(_SCHEMA + FACT_TABLES):
                    c.execute(stmt)
                if legacy:
                    _copy_legacy_nodes(c)
                c.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
        except BaseException as exc:
            self._conn.close()
            if isinstance(exc, sqlite3.DatabaseError):  # the file's own faults are named already (sqlite_faults)
                raise StoreError(f"{self.path} is not a usable lightmem database: {exc}") from exc
            raise

    def _open_read_only(self) -> None:
        """Open a store this process may not write: reads work, every write is refused up front."""
        if not self.path.is_file():
            raise StoreReadOnlyError(f"cannot create a lightmem store at {self.path}: {self._read_only}; "
                                     f"give a --store on a writable disk")
        self._conn = sqlite_faults.open_read_only(self.path, self.label, _BUSY_TIMEOUT_S)
        try:
            version = schema_version(self._conn, self.path)
            if version != SCHEMA_VERSION:
                raise StoreReadOnlyError(
                    f"the lightmem store at {self.path} has schema version {version or 'none'} and is read-only "
                    f"({self._read_only}); this lightmem reads version {SCHEMA_VERSION} after an upgrade that writes: "
                    f"open it once where it can be written")
        except BaseException:
            self._conn.close()
            raise
        log.info("opened %s read-only (%s): writes are refused and access statistics are not recorded",
                 self.path, self._read_only)

    @property
    def read_only(self) -> bool:
        """Whether the store was opened read-only (a read-only file system or no write permission)."""
        return self._read_only is not None

    # -- plumbing -----------------------------------------------------------------------
    @contextmanager
    def transaction(self, wait_ms: int | None = None) -> Iterator[sqlite3.Connection]:
        """One atomic write batch: everything inside commits together or not at all.

        A transaction opened inside another in the same thread joins it: it commits with the outer one, and an
        error in it rolls the outer one back (``SQLiteStore.atomic``: several operations, one transaction).

        Args:
            wait_ms: Wait at most this long for another process's write lock, once, and raise
                ``sqlite3.OperationalError`` ("database is locked") past it (None: the busy timeout,
                with retries).

        Raises:
            StoreReadOnlyError: the store was opened read-only.
            StoreFullError: the disk filled up; nothing of the batch was written.
        """
        with self.lock:
            if self._read_only is not None:
                raise StoreReadOnlyError(sqlite_faults.read_only_message(self.path, self.label, self._read_only))
            if self._depth:
                self._depth += 1
                try:
                    yield self._conn
                finally:
                    self._depth -= 1
                return
            # BEGIN IMMEDIATE takes the write lock up front (no deadlocking upgrade later); the busy
            # timeout waits for another process's transaction, and a retry covers a longer one.
            if wait_ms is None:
                _retry_busy(lambda: self._conn.execute("BEGIN IMMEDIATE"))
            else:
                self._conn.execute(f"PRAGMA busy_timeout = {int(wait_ms)}")
                try:
                    self._conn.execute("BEGIN IMMEDIATE")
                finally:
                    self._conn.execute(f"PRAGMA busy_timeout = {int(_BUSY_TIMEOUT_S * 1000)}")
            self._depth, self._after = 1, Erasure()
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException as exc:
                self._rollback(exc)
                raise
            finally:
                self._depth, after, self._after = 0, self._after, Erasure()
            held = self._held.get(threading.get_ident())
            if held is not None:  # inside ``erasing_once``: at its end, with the other transactions' erasures
                held.merge(after)
            else:  # committed: the erasures of its writes, all at once (one checkpoint, one page scan)
                self._erase(after)

    def _rollback(self, cause: BaseException) -> None:
        """Undo the open transaction unless SQLite already has: it rolls back by itself on a full
        disk, an I/O error or no memory, and a ROLLBACK then fails and would hide ``cause``."""
        if not self._conn.in_transaction:
            return
        try:
            self._conn.execute("ROLLBACK")
        except (sqlite3.Error, StoreError) as exc:
            log.error("rolling back a failed write to %s failed too: %s", self.path, exc)
            if hasattr(cause, "add_note"):  # Python 3.11+
                cause.add_note(f"rolling back afterwards failed too: {exc}")

    @property
    def connection(self) -> sqlite3.Connection:
        """The raw connection, for reads made while holding ``lock``."""
        return self._conn

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with self.lock:
            return self._conn.execute(sql, params).fetchall()

    def close(self) -> None:
        with self.lock:
            self._conn.close()

    def data_version(self) -> int:
        """Changes whenever another connection (another process) committed since the last call."""
        with self.lock:
            return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def changes_since(self, seq: int) -> tuple[int, list[tuple[int, str, int]]]:
        """(last seq pruned from the log, [(seq, user_id, rid)] after ``seq``), oldest first."""
        with self.lock:
            pruned = self._conn.execute("SELECT value FROM meta WHERE key = 'changes_pruned_through'").fetchone()
            rows = self._conn.execute("SELECT seq, user_id, rid FROM item_changes WHERE seq > ? ORDER BY seq", (seq,)).fetchall()
        return int(pruned[0]) if pruned else 0, [(int(a), u, int(r)) for a, u, r in rows]

    def last_change(self, c: sqlite3.Connection | None = None) -> int:
        """The newest change's seq (0 for none); pass ``c`` inside a transaction."""
        return int((c or self._conn).execute("SELECT COALESCE(MAX(seq), 0) FROM item_changes").fetchone()[0])

    def prune_changes(self, keep: int = 100_000) -> int:
        """Drop all but the newest ``keep`` changes. A process that had not read the dropped ones
        rebuilds its indexes from the tables instead (it sees the gap). Returns rows dropped
        (none from a read-only store)."""
        if self.read_only:
            return 0
        with self.transaction() as c:
            through = self.last_change(c) - keep
            n = c.execute("DELETE FROM item_changes WHERE seq <= ?", (through,)).rowcount
            if n:
                c.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('changes_pruned_through', ?)", (str(through),))
            return n

    def user_changes_since(self, user_id: str, seq: int) -> tuple[int, list[int]]:
        """(last seq pruned from the log, distinct row ids of the user's item changes after ``seq``)."""
        with self.lock:
            pruned = self._conn.execute("SELECT value FROM meta WHERE key = 'changes_pruned_through'").fetchone()
            rows = self._conn.execute("SELECT DISTINCT rid FROM item_changes WHERE seq > ? AND user_id = ?",
                                      (seq, user_id)).fetchall()
        return int(pruned[0]) if pruned else 0, sorted(int(r[0]) for r in rows)

    def view_snapshot(self, user_id: str) -> tuple[int, int, bytes] | None:
        """The user's view snapshot as (change seq it reflects, items, blob), or None."""
        try:
            row = self.query("SELECT seq, n, data FROM view_snapshots WHERE user_id = ?", (user_id,))
        except sqlite3.OperationalError as exc:  # a read-only store made before the table existed
            if "no such table" not in str(exc):
                raise
            return None
        return (int(row[0][0]), int(row[0][1]), bytes(row[0][2])) if row else None

    def any_deleted(self, rids: Sequence[int]) -> bool:
        """Whether any of these row ids has no item row any more (its item was deleted)."""
        found: set[int] = set()
        for i in range(0, len(rids), 500):
            chunk = [int(r) for r in rids[i : i + 500]]
            found.update(r[0] for r in self.query(f"SELECT rid FROM items WHERE rid IN ({','.join('?' * len(chunk))})", chunk))
        return len(found) < len(set(int(r) for r in rids))

    def erased_through(self, c: sqlite3.Connection | None = None) -> int:
        """The change-log position of the newest erasure (an item deletion or a redacting update, by
        any process; 0 for none); pass ``c`` inside a transaction."""
        with self.lock:
            row = (c or self._conn).execute("SELECT value FROM meta WHERE key = 'erased_through'").fetchone()
        return int(row[0]) if row else 0

    def put_view_snapshot(self, user_id: str, seq: int, n: int, data: bytes, wait_ms: int = 50) -> bool:
        """Store the user's view snapshot, which reflects every change through ``seq``, unless an item
        was erased after ``seq`` or another process holds the write lock longer than ``wait_ms`` (it
        is a cache: the next load tries again). Returns whether it was written.

        The erasure check runs in the writing transaction: a deletion another process commits while
        this one builds the view dropped the snapshots there were, and the view may still hold the
        erased item's vector and terms, so writing it would leave them in the file."""
        with self.lock:
            if self.read_only or self._conn.in_transaction:
                return False
            try:
                with self.transaction(wait_ms) as c:
                    if self.erased_through(c) > seq:
                        return False
                    c.execute("INSERT OR REPLACE INTO view_snapshots (user_id, seq, n, data) VALUES (?, ?, ?, ?)",
                              (user_id, seq, n, data))
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    return False
                raise
        return True

    def erase_log(self) -> bool:
        """Copy the write-ahead log into the database and truncate it.

        With ``secure_delete`` on, a deleted row's bytes are zeroed in the database, but the log
        still holds older copies of its pages until a checkpoint. Waits at most two seconds for
        other processes' readers; when they hold on longer the old frames stay until the next
        full checkpoint (every process's close makes one). Returns True when the log was emptied.
        """
        with self.lock:
            waiting = self._waiting()
            if waiting is not None:  # inside a transaction or ``erasing_once``: once, when it ends
                waiting.log = True
                return False
            return self._checkpoint()

    def _checkpoint(self) -> bool:
        with self.lock:
            self._conn.execute("PRAGMA busy_timeout = 2000")
            try:
                busy, _, _ = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            finally:
                self._conn.execute(f"PRAGMA busy_timeout = {int(_BUSY_TIMEOUT_S * 1000)}")
        return busy == 0

    def scrub(self, texts: Sequence[str | None], always: bool = False) -> bool:
        """After an erasure has committed and ``erase_log`` ran: rebuild the database file (``VACUUM``, then empty
        the log again) when one of the erased ``texts`` is still readable in a page's unused space, where SQLite
        left it while the row was alive (``residue``); ``always``: rebuild whatever is found (a user's
        erasure). Returns whether the file was rebuilt. Inside a transaction or ``erasing_once``, the texts wait
        for its end, with every other erasure's: the file is read once for all of them."""
        with self.lock:
            waiting = self._waiting()
            if waiting is not None:
                waiting.texts.extend(texts)
                waiting.always = waiting.always or always
                return False
            return self._rebuild(texts, always)

    def _rebuild(self, texts: Sequence[str | None], always: bool) -> bool:
        with self.lock:
            if not always and not residue.holds(self.path, texts):
                return False
            started = time.perf_counter()
            _retry_busy(lambda: self._conn.execute("VACUUM"))
            self._checkpoint()
        log.info("erasure: rebuilt %s so that no copy of the erased text stays in its unused space (%.0f ms)",
                 self.label, (time.perf_counter() - started) * 1000)
        return True

    @contextmanager
    def erasing_once(self) -> Iterator[Callable[[], None]]:
        """Hold the erasure steps of this thread's transactions committed inside (``erase_log``, ``scrub``) and run
        them once: one checkpoint and one read of the file for every text erased, instead of one per deletion,
        whose cost grows with the file (``residue.holds`` reads all of it). Yields a call that runs what is held
        now (a batch calls it under the server's lock); what is left runs on the way out, exception or not. Other
        threads' erasures do not wait for it. Nested: the inner one joins the outer."""
        me = threading.get_ident()
        with self.lock:
            outer = me not in self._held
            if outer:
                self._held[me] = Erasure()

        def now() -> None:
            with self.lock:
                held, self._held[me] = self._held[me], Erasure()
                self._erase(held)

        try:
            yield now if outer else (lambda: None)
        finally:
            if outer:
                with self.lock:
                    self._erase(self._held.pop(me))

    def _waiting(self) -> Erasure | None:
        """Where an erasure step waits (under ``lock``): the open transaction's, else this thread's
        ``erasing_once``'s; None: it runs now."""
        if self._depth:
            return self._after
        return self._held.get(threading.get_ident())

    def _erase(self, e: Erasure) -> None:
        """Run held erasure steps (under ``lock``): the log first (the page scan reads the database file), then
        the pages; inside a transaction of this thread, at its commit."""
        if self._depth:
            self._after.merge(e)
            return
        if e.log:
            self._checkpoint()
        if e.texts or e.always:
            self._rebuild(list(dict.fromkeys(t for t in e.texts if t)), e.always)

    def erased_texts(self, c: sqlite3.Connection, user_id: str, item_id: str) -> list[str]:
        """The texts an item's erasure removes, read before it: its text and keys, its history's texts and the
        texts of the turns it cites (those no other item cites go with it)."""
        row = c.execute("SELECT text, keys, provenance FROM items WHERE user_id = ? AND id = ?", (user_id, item_id)).fetchone()
        if row is None:
            return []
        texts = [row[0], row[1]]
        for old, new in c.execute("SELECT old_text, new_text FROM history WHERE user_id = ? AND item_id = ?",
                                  (user_id, item_id)):
            texts += [old, new]
        turn_ids = json.loads(row[2])
        for i in range(0, len(turn_ids), 500):
            chunk = turn_ids[i:i + 500]
            texts += [r[0] for r in c.execute(f"SELECT text FROM turns WHERE user_id = ? AND turn_id IN "
                                              f"({','.join('?' * len(chunk))})", [user_id, *chunk])]
        return [t for t in dict.fromkeys(texts) if t]

    def get_meta(self, key: str) -> str | None:
        rows = self.query("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    def set_meta(self, key: str, value: str) -> None:
        with self.transaction() as c:
            c.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    # -- writes (call inside transaction()) ------------------------------------------------
    @staticmethod
    def existing_turn_ids(c: sqlite3.Connection, user_id: str, turn_ids: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for i in range(0, len(turn_ids), 500):
            chunk = list(turn_ids[i : i + 500])
            marks = ",".join("?" * len(chunk))
            found.update(
                r[0]
                for r in c.execute(f"SELECT turn_id FROM turns WHERE user_id = ? AND turn_id IN ({marks})", [user_id, *chunk])
            )
        return found

    @staticmethod
    def insert_turn(c: sqlite3.Connection, user_id: str, turn: Turn, at: float) -> None:
        c.execute(
            "INSERT INTO turns (user_id, turn_id, session_id, speaker, text, caption, timestamp, metadata, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (user_id, turn.turn_id, turn.session_id, turn.speaker, turn.text, turn.caption, turn.timestamp,
             json.dumps(turn.metadata), at),
        )

    @staticmethod
    def fact_keys(c: sqlite3.Connection) -> FactKeys:
        """The fact-key statements (``stores.keys``) on this transaction; a vector left to write later is empty."""
        return FactKeys(c, "?", lambda v: np.asarray(v, dtype=np.float32).tobytes(), deferred=b"")

    @staticmethod
    def insert_item(c: sqlite3.Connection, item: MemoryItem, vector: np.ndarray | None, dim: int = 0) -> int:
        """Insert an item row; ``vector`` None stores an empty embedding (its vector is written later) and holds
        back the room for a vector of ``dim`` in the row's ``pad`` (``reserve_bytes``)."""
        blob = b"" if vector is None else np.asarray(vector, dtype=np.float32).tobytes()
        pad = reserve_bytes(dim, item.text) if vector is None and dim else b""
        cur = c.execute(
            "INSERT INTO items (id, user_id, text, provenance, created_at, event_time, last_access, access_count, "
            "utility, topic, entities, kind, valid_from, valid_to, superseded_by, archived, n_tokens, metadata, embedding, "
            "keys, pad, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (item.id, item.user_id, item.text, json.dumps(item.provenance), item.created_at, item.event_time,
             item.last_access, item.access_count, item.utility, item.topic, json.dumps(item.entities),
             item.kind.value, item.valid_from, item.valid_to, item.superseded_by, int(item.archived), item.n_tokens,
             json.dumps(item.metadata), blob, item.keys, pad, item.updated_at or item.created_at),
        )
        return int(cur.lastrowid)

    @staticmethod
    def log(c: sqlite3.Connection, user_id: str, item_id: str, event: str, old: str | None, new: str | None, at: float) -> None:
        c.execute(
            "INSERT INTO history (item_id, user_id, event, old_text, new_text, at) VALUES (?, ?, ?, ?, ?, ?)",
            (item_id, user_id, event, old, new, at),
        )

    @staticmethod
    def forget_history_texts(c: sqlite3.Connection, user_id: str, item_id: str) -> None:
        """Blank the texts of an item's history events; the events themselves stay. Its user's view
        snapshot (it may hold the old text's terms) is dropped, and no snapshot built before this
        change is written after it (``put_view_snapshot``): call it after the statement that changed
        or deleted the item, whose change-log row then marks the erasure."""
        c.execute("UPDATE history SET old_text = NULL, new_text = NULL WHERE user_id = ? AND item_id = ?",
                  (user_id, item_id))
        c.execute("DELETE FROM view_snapshots WHERE user_id = ?", (user_id,))
        c.execute("INSERT OR REPLACE INTO meta (key, value) "
                  "VALUES ('erased_through', (SELECT COALESCE(MAX(seq), 0) FROM item_changes))")

    @staticmethod
    def drop_uncited_turns(c: sqlite3.Connection, user_id: str, turn_ids: Sequence[str]) -> int:
        """Delete those of ``turn_ids`` that no item of the user (archived ones too) cites and the
        sensory stage does not still buffer. Returns the number of turns deleted."""
        ids = sorted(set(turn_ids))
        if not ids:
            return 0
        # A substring test of the stored JSON finds the few rows that may cite a turn (parsing every
        # row's JSON costs 3 ms at 10,000 items); the parse then confirms them.
        cited: set[str] = set()
        for t in ids:
            rows = c.execute("SELECT provenance FROM items WHERE user_id = ? AND instr(provenance, ?) > 0",
                             (user_id, json.dumps(t))).fetchall()
            if any(t in json.loads(r[0]) for r in rows):
                cited.add(t)
        drop = [t for t in ids if t not in cited]
        if not drop:
            return 0
        marks = ",".join("?" * len(drop))
        return c.execute(f"DELETE FROM turns WHERE user_id = ? AND turn_id IN ({marks}) AND turn_id NOT IN "
                         "(SELECT turn_id FROM pending WHERE user_id = ?)", [user_id, *drop, user_id]).rowcount

    # -- reads -----------------------------------------------------------------------------
    def item_rows(self, user_id: str, where: str = "", params: Sequence[Any] = (), order: str = "rid") -> list[tuple]:
        sql = f"SELECT {ITEM_COLS} FROM items WHERE user_id = ?" + (f" AND {where}" if where else "") + f" ORDER BY {order}"
        return self.query(sql, [user_id, *params])

    def items_by_rid(self, user_id: str, rids: Sequence[int]) -> dict[int, MemoryItem]:
        out: dict[int, MemoryItem] = {}
        for i in range(0, len(rids), 500):
            chunk = [int(r) for r in rids[i : i + 500]]
            marks = ",".join("?" * len(chunk))
            # "+user_id" keeps the planner on the primary key: the user-index scan it would
            # otherwise pick reads every row of the user (the user check still applies).
            sql = f"SELECT {ITEM_COLS} FROM items WHERE rid IN ({marks}) AND +user_id = ?"
            for row in self.query(sql, [*chunk, user_id]):
                out[int(row[0])] = row_to_item(row)
        return out

    def active_vectors(self, user_id: str, rids: Sequence[int] | None = None) -> list[tuple]:
        """(rid, index text, embedding, event_time, kind, topic, entities, current) of unarchived items,
        all of the user's or only these row ids (the rows another process changed)."""
        cols = f"rid, {index_text_sql()}, embedding, event_time, kind, topic, entities, (superseded_by IS NULL AND valid_to IS NULL)"
        if rids is None:
            return self.query(f"SELECT {cols} FROM items WHERE user_id = ? AND archived = 0 ORDER BY rid", (user_id,))
        out: list[tuple] = []
        for i in range(0, len(rids), 500):
            chunk = [int(r) for r in rids[i : i + 500]]
            out += self.query(f"SELECT {cols} FROM items WHERE rid IN ({','.join('?' * len(chunk))}) AND +user_id = ? "
                              "AND archived = 0 ORDER BY rid", [*chunk, user_id])
        return out

    def rid_of(self, user_id: str, item_id: str) -> int | None:
        rows = self.query("SELECT rid FROM items WHERE user_id = ? AND id = ?", (user_id, item_id))
        return int(rows[0][0]) if rows else None

    def history(self, user_id: str, item_id: str) -> list[HistoryEvent]:
        rows = self.query(
            "SELECT item_id, event, old_text, new_text, at FROM history WHERE user_id = ? AND item_id = ? ORDER BY pk",
            (user_id, item_id),
        )
        return [HistoryEvent(*r) for r in rows]

    def turns(self, user_id: str, turn_ids: Sequence[str] | None = None) -> list[Turn]:
        cols = "SELECT turn_id, speaker, text, timestamp, session_id, caption, metadata FROM turns WHERE user_id = ?"
        if turn_ids is None:
            return [_row_to_turn(r) for r in self.query(f"{cols} ORDER BY pk", (user_id,))]
        ids, rows = list(dict.fromkeys(turn_ids)), []
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            rows += self.query(f"{cols.replace(' FROM', ', pk FROM')} AND turn_id IN ({','.join('?' * len(chunk))})",
                               (user_id, *chunk))
        return [_row_to_turn(r[:-1]) for r in sorted(rows, key=lambda r: r[-1])]

    def pending_turns(self, user_id: str) -> list[Turn]:
        """Turns stored but still in the sensory stage's buffers (no items yet), oldest first."""
        rows = self.query(
            "SELECT t.turn_id, t.speaker, t.text, t.timestamp, t.session_id, t.caption, t.metadata FROM turns t "
            "JOIN pending p ON p.user_id = t.user_id AND p.turn_id = t.turn_id WHERE t.user_id = ? ORDER BY t.pk",
            (user_id,),
        )
        return [_row_to_turn(r) for r in rows]

    @staticmethod
    def set_pending(c: sqlite3.Connection, user_id: str, turn_ids: Sequence[str]) -> None:
        """Replace the user's pending marks (call inside transaction())."""
        c.execute("DELETE FROM pending WHERE user_id = ?", (user_id,))
        c.executemany("INSERT OR IGNORE INTO pending (user_id, turn_id) VALUES (?, ?)", [(user_id, t) for t in turn_ids])

    def speakers(self, user_id: str) -> list[str]:
        """The distinct speakers of a user's turns (names the consolidator must scrub)."""
        return [r[0] for r in self.query("SELECT DISTINCT speaker FROM turns WHERE user_id = ?", (user_id,))]

    def users(self) -> list[str]:
        rows = self.query("SELECT user_id FROM turns UNION SELECT user_id FROM items ORDER BY 1")
        return [r[0] for r in rows]

    def counts(self) -> dict[str, dict[str, int]]:
        """Per user: turns, active items, archived items, turns pending in the sensory stage's buffers, items
        waiting for their vector (the background indexer's work, ``unembedded``)."""
        out: dict[str, dict[str, int]] = {}

        def row(uid: str) -> dict[str, int]:
            return out.setdefault(uid, {"turns": 0, "items": 0, "archived": 0, "pending": 0, "unembedded": 0})

        for uid, n in self.query("SELECT user_id, COUNT(*) FROM turns GROUP BY user_id"):
            row(uid)["turns"] = n
        for uid, arch, n in self.query("SELECT user_id, archived, COUNT(*) FROM items GROUP BY user_id, archived"):
            row(uid)["archived" if arch else "items"] = n
        for uid, n in self.query("SELECT user_id, COUNT(*) FROM pending GROUP BY user_id"):
            row(uid)["pending"] = n
        for uid, n in self.query("SELECT user_id, COUNT(*) FROM items WHERE length(embedding) = 0 GROUP BY user_id"):
            row(uid)["unembedded"] = n
        return out

    def unembedded_count(self) -> int:
        """Items of every user waiting for their vector (an index-only count on ``items_unembedded``)."""
        (n,), = self.query("SELECT COUNT(*) FROM items WHERE length(embedding) = 0")
        return int(n)


DB_NAME = "lightmem.sqlite"


def database_path(path: str | Path) -> Path:
    """The SQLite file of a store given as a folder or as a ``.sqlite`` / ``.db`` file."""
    p = Path(path)
    return p if p.suffix in {".sqlite", ".db"} else p / DB_NAME


def store_label(db: Path) -> str:
    """The store's location as a user gives it (``--store``): the folder of a ``lightmem.sqlite``, else the file."""
    return str(db.parent) if db.name == DB_NAME else str(db)


def stored_embedder(path: str | Path) -> str | None:
    """The name of the embedder that wrote the store at ``path`` (read-only), or None when there is no store.

    Raises:
        StoreError: a file is there but cannot be read as a lightmem store; the subclass says why
            (``StoreCorruptError``, ``NotAStoreError``, ``StoreReadOnlyError``).
    """
    db = database_path(path)
    if not db.exists():
        return None
    con = sqlite_faults.open_read_only(db, store_label(db))
    try:
        if schema_version(con, db) is None:
            return None
        row = con.execute("SELECT value FROM meta WHERE key = 'embedder'").fetchone()
    finally:
        con.close()
    return row[0] if row else None


def schema_version(c: sqlite3.Connection, db: Path) -> str | None:
    """The lightmem schema version of the database, or None when it holds no tables yet.

    Raises:
        NotAStoreError: it holds tables, but not a lightmem store's (another application's database).
    """
    tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}
    if not tables:
        return None
    row = None
    if {"meta", "turns"} <= tables:
        try:
            row = c.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.OperationalError as exc:  # a `meta` table of another shape: not ours
            log.debug("%s: meta is not lightmem's: %s", db, exc)
    if row is None:
        shown = ", ".join(sorted(tables)[:6]) + (", ..." if len(tables) > 6 else "")
        raise NotAStoreError(
            f"cannot open the lightmem store at {db}: it is a SQLite database, but not a lightmem one (its tables: "
            f"{shown}). Check --store: lightmem does not write into another application's database; a new store "
            f"needs a new folder or file.")
    return row[0]


def _retry_busy(fn, attempts: int = 5):
    """Run ``fn``, retrying while another process holds the database longer than the busy timeout."""
    for i in range(attempts):
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc) or i == attempts - 1:
                raise
            time.sleep(0.05 * 2**i)
    return None


def _statements(script: str) -> list[str]:
    """Split a schema script into statements (``executescript`` would commit the open transaction)."""
    out, buf = [], []
    for line in script.splitlines():
        if line.strip().startswith("--") or not line.strip():
            continue
        buf.append(line)
        stmt = "\n".join(buf)
        if sqlite3.complete_statement(stmt):
            out.append(stmt)
            buf = []
    return out
