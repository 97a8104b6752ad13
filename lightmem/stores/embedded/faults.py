"""SQLite's failures named for what they are: a full disk, a read-only store, a damaged file, a file
that is not a lightmem store.

Every statement of the embedded store runs on a ``StoreConnection`` (``connect``, ``open_read_only``),
whose cursors turn SQLite's error codes into ``StoreError`` subclasses that say what happened and
what to do, wherever the error surfaces: opening the file, a write's COMMIT, or a read that meets a
corrupt page halfway through a scan. Errors that are not about the file (a constraint, a busy lock,
a bug's SQL) pass through unchanged.
"""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import quote

from lightmem.errors import NotAStoreError, StoreCorruptError, StoreError, StoreFullError, StoreReadOnlyError

MAGIC = b"SQLite format 3\x00"
# Primary result codes (the low byte of an extended code such as SQLITEIOERR_WRITE).
READONLY, IOERR, CORRUPT, FULL, CANTOPEN, NOTADB = 8, 10, 11, 13, 14, 26


def primary_code(exc: BaseException) -> int:
    """SQLite's primary result code of an error (0 when it carries none)."""
    return (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF


def _renaming(name: str) -> Any:
    """``sqlite3.Cursor.<name>``, with an error about the file raised as the ``StoreError`` it stands for."""
    base = getattr(sqlite3.Cursor, name)

    def method(self: StoreCursor, *args: Any) -> Any:
        try:
            return base(self, *args)
        except sqlite3.Error as exc:
            self.connection.rename(exc)
            raise

    method.__name__ = method.__qualname__ = name
    return method


class StoreCursor(sqlite3.Cursor):
    """A cursor whose errors about the file are raised as ``StoreError`` subclasses (see ``translate``).

    The fetches are wrapped too: a scan steps through pages as rows are fetched, so a corrupt page
    can surface there, not in ``execute``.
    """

    execute = _renaming("execute")
    executemany = _renaming("executemany")
    fetchone = _renaming("fetchone")
    fetchmany = _renaming("fetchmany")
    fetchall = _renaming("fetchall")
    __next__ = _renaming("__next__")


class StoreConnection(sqlite3.Connection):
    """A connection to a store's database file whose statements run on ``StoreCursor``s.

    ``db`` is the file and ``store`` the location as the user gives it (``--store``), for the
    commands the error messages suggest.
    """

    db: Path
    store: str

    def cursor(self, factory: Any = StoreCursor) -> StoreCursor:
        return super().cursor(factory)

    def execute(self, sql: str, parameters: Any = (), /) -> StoreCursor:
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Any, /) -> StoreCursor:
        return self.cursor().executemany(sql, parameters)

    def rename(self, exc: sqlite3.Error) -> None:
        """Raise ``exc`` as the ``StoreError`` it stands for (chained); return when it is no fault of the file."""
        named = translate(exc, self.db, self.store)
        if named is not None:
            raise named from exc


def connect(db: Path, store: str, timeout: float) -> StoreConnection:
    """A read-write connection (autocommit: the caller runs its own BEGIN / COMMIT)."""
    try:
        con = sqlite3.connect(str(db), check_same_thread=False, isolation_level=None, timeout=timeout,
                              factory=StoreConnection)
    except sqlite3.Error as exc:
        _raise_named(exc, db, store)
    con.db, con.store = db, store
    return con


def open_read_only(db: Path, store: str, timeout: float = 5.0) -> StoreConnection:
    """A read-only connection that works on a read-only file system too.

    SQLite reads a WAL database through its ``-shm`` file, which a read-only mount keeps it from
    creating; then the file is opened ``immutable`` (no locks, no log), which is exact only when
    no write-ahead log holds commits the file lacks, so a non-empty ``-wal`` is refused instead.

    Raises:
        StoreReadOnlyError: the store's log needs a writable open first.
        StoreError: the file cannot be read (a subclass says why).
    """
    base = f"file:{quote(db.as_posix())}?mode=ro"
    con = _connect_uri(base, db, store, timeout)
    try:
        sqlite3.Connection.execute(con, "SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        return con
    except sqlite3.Error as exc:
        con.close()
        # A folder this user may not write keeps SQLite from making the -shm file: CANTOPEN on a
        # read-only mount, READONLY (READONLY_CANTINIT) for a folder without write permission.
        if primary_code(exc) not in (CANTOPEN, READONLY) or read_only_reason(db) is None:
            _raise_named(exc, db, store)
    wal = Path(f"{db}-wal")
    if wal.exists() and wal.stat().st_size > 0:
        raise StoreReadOnlyError(
            f"cannot read the lightmem store at {db}: it is on a read-only file system and its write-ahead log "
            f"({wal.name}) holds commits that are not in the database file yet. Open it once on a writable file "
            f"system (that folds the log in), or copy the folder's lightmem files to a writable place and use the copy."
        )
    return _connect_uri(base + "&immutable=1", db, store, timeout)


def _connect_uri(uri: str, db: Path, store: str, timeout: float) -> StoreConnection:
    try:
        con = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None, timeout=timeout,
                              factory=StoreConnection)
    except sqlite3.Error as exc:
        _raise_named(exc, db, store)
    con.db, con.store = db, store
    return con


def _raise_named(exc: sqlite3.Error, db: Path, store: str) -> NoReturn:
    named = translate(exc, db, store)
    if named is not None:
        raise named from exc
    raise exc


def translate(exc: sqlite3.Error, db: Path, store: str) -> StoreError | None:
    """The ``StoreError`` an SQLite error stands for, or None when it is no fault of the file."""
    primary = primary_code(exc)
    if primary == FULL:
        return StoreFullError(
            f"the disk holding the lightmem store at {db} is full (SQLite: {exc}): nothing of this write was stored, "
            f"and everything stored before is intact. Free space on that disk (`df -h {db.parent}`), then retry."
        )
    if primary == READONLY:
        return StoreReadOnlyError(read_only_message(db, store, read_only_reason(db) or f"SQLite: {exc}"))
    if primary in (CORRUPT, NOTADB):
        return damaged(db, store, str(exc))
    if primary in (CANTOPEN, IOERR):
        if db.is_dir():
            return NotAStoreError(f"cannot open the lightmem store at {db}: it is a folder, not a database file; "
                                  f"give its parent folder or a .sqlite file as --store")
        why = read_only_reason(db)
        if why is not None:
            return StoreReadOnlyError(read_only_message(db, store, why))
        return StoreError(
            f"cannot {'open' if primary == CANTOPEN else 'read or write'} the lightmem store at {db} (SQLite: {exc}): "
            f"check that the disk is healthy (`dmesg`), has free space (`df -h {db.parent}`), and that this user "
            f"may read and write the file and its folder."
        )
    return None


def damaged(db: Path, store: str, sqlite_says: str) -> StoreError:
    """The error for a file SQLite finds corrupt or not a database: what its bytes show, and what to do."""
    kind, detail = diagnose(db)
    if kind in ("foreign", "empty"):
        return NotAStoreError(f"cannot open the lightmem store at {db}: not a lightmem database: {detail} "
                              f"(SQLite: {sqlite_says}). Check --store; a new store needs a new folder or file.")
    return StoreCorruptError(
        f"the lightmem store at {db} is corrupt: {detail} (SQLite: {sqlite_says}). "
        f"Check it with `lightmem check --store {store}` (or `sqlite3 {db} 'PRAGMA integrity_check'`); "
        f"recover it from a backup with `lightmem restore BACKUP --store {store} --force`, "
        f"or salvage what is readable with `sqlite3 {db} .recover`."
    )


def diagnose(db: Path) -> tuple[str, str]:
    """What the bytes of a file SQLite cannot use show: (kind, explanation).

    Kinds: ``empty``, ``foreign`` (not SQLite), ``header`` (SQLite pages under a damaged header),
    ``truncated`` (shorter than its header records) and ``pages`` (a corrupt page inside).
    """
    try:
        size = db.stat().st_size
        with db.open("rb") as f:
            head = f.read(101)
    except OSError as exc:
        return "pages", f"its bytes cannot be read ({exc})"
    if size == 0:
        return "empty", "the file is empty (0 bytes)"
    if head[:16] != MAGIC:
        # Page 1 holds the schema table's b-tree page right after the 100-byte header.
        if size >= 1024 and size % 512 == 0 and len(head) > 100 and head[100] in (0x05, 0x0D):
            return "header", "its 100-byte header is garbage, though SQLite pages follow it"
        return "foreign", "the file does not start with SQLite's header, so it is another kind of file"
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    if head[24:28] == head[92:96] and page_size and pages * page_size > size:  # the header's page count is current
        return "truncated", f"it is truncated ({size} bytes, where its header records {pages} pages of {page_size} bytes)"
    if page_size and size % page_size:
        return "truncated", f"it is truncated ({size} bytes is not a whole number of {page_size}-byte pages)"
    return "pages", "a page inside the file is damaged"


def read_only_reason(db: Path) -> str | None:
    """Why this process cannot write the database ``db`` (or create it), or None when it can."""
    where = db if db.exists() else next((p for p in db.parents if p.exists()), db.parent)
    try:
        if os.statvfs(where).f_flag & os.ST_RDONLY:
            return "it is on a read-only file system"
    except OSError:
        return None
    if db.is_file() and not os.access(db, os.W_OK):
        return "this user may not write the file"
    if where.is_dir() and not os.access(where, os.W_OK):
        return "this user may not write its folder, where SQLite keeps the -wal and -shm files"
    return None


def read_only_message(db: Path, store: str, why: str) -> str:
    return (f"the lightmem store at {db} is read-only ({why}): it can be searched, not written. To write, remount "
            f"it read-write or give this user write access to the file and its folder, or copy it to a writable "
            f"place with `lightmem backup --store {store} COPY.sqlite` and use --store COPY.sqlite.")
