"""Backup, restore, check and compaction of the embedded store (``lightmem.stores.backup`` dispatches a location
to these, or to the other backend's tools).

``backup`` copies a consistent snapshot with SQLite's online backup API while other processes go on
writing; ``restore`` verifies a backup, then puts it in place atomically, and only while no process
has the store open (``openlock``); ``check`` runs SQLite's integrity check; ``compact`` rewrites the
file without its free pages (``VACUUM``). A backup is itself a store: ``--store BACKUP.sqlite`` opens
it. The commands ``lightmem backup / restore / check / compact`` call these.
"""
from __future__ import annotations

import logging
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from lightmem.errors import LightMemError, NotAStoreError, StoreCorruptError, StoreError, StoreFullError
from lightmem.stores.base import Compacted
from lightmem.stores.embedded import faults as sqlite_faults
from lightmem.stores.embedded import openlock
from lightmem.stores.embedded.tables import MIGRATABLE, SCHEMA_VERSION, database_path, schema_version, store_label

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoreSummary:
    """What a store (or backup) file holds."""

    path: Path
    users: int
    turns: int
    items: int
    size: int

    def __str__(self) -> str:
        def n(count: int, what: str) -> str:
            return f"{count} {what}{'' if count == 1 else 's'}"

        return f"{n(self.users, 'user')}, {n(self.turns, 'turn')}, {n(self.items, 'item')} ({self.size / 1e6:.1f} MB)"


@dataclass(frozen=True)
class Restored:
    """What ``restore`` did: the store it wrote, and what that file held before.

    Attributes:
        summary: The restored store (``summary.path`` is the real file written, symbolic links resolved).
        link: The path given, when it is (or passes through) a symbolic link to ``summary.path``.
        replaced: What the file held before (None when there was no file or it could not be read).
        replaced_note: Why ``replaced`` is None although a file was replaced (it could not be read).
    """

    summary: StoreSummary
    link: Path | None = None
    replaced: StoreSummary | None = None
    replaced_note: str | None = None

    def lines(self, store: str, backup_file: str) -> list[str]:
        """The report the CLI prints."""
        real = self.summary.path
        out = [f"restored {store} from {backup_file}: {self.summary}"]
        if self.link is not None:
            what = "is a symbolic link" if self.link.is_symlink() else "leads through a symbolic link"
            out.append(f"{self.link} {what}: the backup was written to the file it points to, {real} (the link stays)")
        if self.replaced is not None:
            out.append(f"replaced {real}, which held {self.replaced}; that copy is not kept")
        elif self.replaced_note is not None:
            out.append(f"replaced {real}, which {self.replaced_note}; that copy is not kept")
        else:
            out.append(f"created {real} (no store was there)")
        return out


def backup(location: str | Path, out: str | Path, force: bool = False) -> StoreSummary:
    """Copy a consistent snapshot of the store at ``location`` to ``out`` (a ``.sqlite`` file, or a folder).

    Other processes may write meanwhile: the copy holds every transaction committed before it
    began and none after. It is written beside ``out`` and renamed into place, so ``out`` is never
    half written, and it is checked (``PRAGMA integrity_check``) before the rename.

    Args:
        location: The store (folder or ``.sqlite`` file).
        out: The backup file; a folder gets ``lightmem.sqlite`` inside, so it opens as a store.
        force: Replace an existing ``out``.

    Raises:
        LightMemError: ``location`` holds no store, or ``out`` exists without ``force``.
        LinkedStoreError: the store's file has other names (hard links): a process writing through one
            keeps its recent commits in a log beside that name, which the copy would miss.
        StoreError: the store cannot be read (a subclass says why) or the backup cannot be written.
    """
    db = database_path(location)
    if not db.is_file():
        raise LightMemError(f"no lightmem store at {location}: nothing to back up")
    target = database_path(out)
    if target.exists() and os.path.samefile(target, db):  # by identity: a link of either kind is the store too
        raise LightMemError(f"{out} is the store itself; give the backup another path")
    if target.exists() and not force:
        raise LightMemError(f"{target} exists; give another path, or --force to replace it")
    openlock.one_name(db, store_label(db), "back up")  # a writer using another name keeps its log there
    src = sqlite_faults.open_read_only(db, store_label(db))
    try:
        if schema_version(src, db) is None:
            raise LightMemError(f"{db} holds no lightmem store yet: nothing to back up")
        _write_copy(src, target)
    finally:
        src.close()
    summary = summarize(target)
    log.info("backed up %s to %s: %s", db, target, summary)
    return summary


def restore(backup_file: str | Path, location: str | Path, force: bool = False) -> Restored:
    """Put the backup ``backup_file`` in place as the store at ``location``, atomically.

    The backup is checked first (a lightmem database that passes ``PRAGMA integrity_check``). Then,
    holding the store's lock exclusively (``openlock``: no process may have the store open, and one
    that opens it meanwhile waits), the backup is copied beside the store, the store's stale ``-wal`` /
    ``-shm`` files are removed (SQLite would replay an old log onto the new file) and the copy is
    renamed over the store. A ``location`` that is a symbolic link is followed: the file it points to
    is replaced, and the link stays. A store file with other names (hard links: its link count, by
    device and inode) is refused: a process may have it open through one of them unseen. The
    replaced store is not kept.

    Args:
        backup_file: A backup made by ``backup`` (or any lightmem store file or folder).
        location: The store to replace or create (folder or ``.sqlite`` file).
        force: Replace a store that holds turns or items, or that cannot be read.

    Returns:
        The restored store, the link followed (if any), and what the replaced file held.

    Raises:
        LightMemError: the backup is missing, or the store holds data and ``force`` is not given.
        StoreInUseError: another process has the store open (``--force`` does not override it).
        LinkedStoreError: the store's file has other names (hard links; ``--force`` does not override it).
        StoreError: the backup is unusable (nothing is changed then).
    """
    src_db = database_path(backup_file)
    if not src_db.is_file():
        raise LightMemError(f"no backup at {backup_file}")
    given = database_path(location)
    target = given.resolve()  # a link is followed: its file is restored, the link stays
    link = given if Path(os.path.abspath(given)) != target else None
    if target.exists() and os.path.samefile(target, src_db):  # by identity: a hard link is the store too
        raise LightMemError(f"{backup_file} is the store itself; nothing to restore")
    try:
        src = sqlite_faults.open_read_only(src_db, store_label(src_db))
    except StoreError as exc:
        raise _unusable(src_db, target, exc) from exc
    try:
        try:
            version = schema_version(src, src_db)
            problems = integrity_problems(src)
        except StoreError as exc:
            raise _unusable(src_db, target, exc) from exc
        if version is None:
            raise NotAStoreError(f"the backup {src_db} holds no lightmem store (no tables): nothing was restored")
        if version != SCHEMA_VERSION and version not in MIGRATABLE:
            raise StoreError(f"the backup {src_db} has schema version {version}; this lightmem reads {SCHEMA_VERSION}: "
                             "restore it with the lightmem that made it. Nothing was restored.")
        if problems:
            raise StoreCorruptError(f"the backup {src_db} is corrupt (PRAGMA integrity_check: {'; '.join(problems[:5])}): "
                                    f"nothing was restored, and {target} is untouched. Use another backup.")
        with openlock.hold_exclusive(target, str(location), str(backup_file)):
            if not force:
                _refuse_to_replace(target)
            replaced, note = _held(target)
            _write_copy(src, target)
            summary = summarize(target)
    finally:
        src.close()
    log.info("restored %s from %s: %s (replaced: %s)", target, src_db, summary, replaced or note or "nothing")
    return Restored(summary, link, replaced, note)


def check(location: str | Path) -> StoreSummary:
    """Run ``PRAGMA integrity_check`` on the store at ``location``.

    Raises:
        StoreCorruptError: the check found problems (listed in the message).
        StoreError: the file cannot be read as a lightmem store (a subclass says why).
        LightMemError: no store there.
    """
    db = database_path(location)
    if not db.is_file():
        raise LightMemError(f"no lightmem store at {location}")
    con = sqlite_faults.open_read_only(db, store_label(db))
    try:
        if schema_version(con, db) is None:
            raise NotAStoreError(f"{db} holds no lightmem store yet (no tables)")
        problems = integrity_problems(con)
    finally:
        con.close()
    if problems:
        label = store_label(db)
        raise StoreCorruptError(
            f"the lightmem store at {db} is corrupt (PRAGMA integrity_check: {'; '.join(problems[:5])}"
            f"{f'; and {len(problems) - 5} more' if len(problems) > 5 else ''}). Recover it from a backup with "
            f"`lightmem restore BACKUP --store {label} --force`, or salvage what is readable with `sqlite3 {db} .recover`.")
    return summarize(db)


def compact(location: str | Path) -> Compacted:
    """Rewrite the store so that its files keep nothing of what was deleted, and give the space back.

    ``VACUUM`` (the file is rewritten without its free pages, and shrinks), then the write-ahead log
    is copied in and truncated. Deleted text is already zeroed in the file (``secure_delete``) and the
    log is emptied after each deletion, so this reclaims space rather than erases.

    Args:
        location: The store (folder or ``.sqlite`` file).

    Raises:
        LightMemError: no store there.
        StoreError: the store cannot be written (a subclass says why), or another process held the
            database longer than the busy timeout.
    """
    db = database_path(location)
    if not db.is_file():
        raise LightMemError(f"no lightmem store at {location}: nothing to compact")
    label = store_label(db)

    def size() -> int:
        return sum(p.stat().st_size for p in (db, Path(f"{db}-wal")) if p.exists())

    before = size()
    with openlock.hold_shared(db, label):  # not while a restore replaces the file
        con = sqlite_faults.connect(db, label, 30.0)
        try:
            if schema_version(con, db) is None:
                raise NotAStoreError(f"{db} holds no lightmem store yet (no tables): nothing to compact")
            try:
                con.execute("VACUUM")
                busy, _, _ = con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    raise StoreError(f"cannot compact the lightmem store at {label}: another process kept it busy "
                                     f"({exc}); run `lightmem compact --store {label}` again later") from exc
                raise
        finally:
            con.close()
    remaining = () if busy == 0 else (
        f"the write-ahead log {db.name}-wal: another process was reading, so the log could not be truncated; "
        f"it empties at the next checkpoint (at the latest when the last process closes the store)",)
    return Compacted(label, before, size(), ("VACUUM", "wal_checkpoint(TRUNCATE)"), remaining)


def integrity_problems(con: sqlite3.Connection) -> list[str]:
    """What ``PRAGMA integrity_check`` finds wrong ([] when it says ok)."""
    try:
        rows = [r[0] for r in con.execute("PRAGMA integrity_check").fetchall()]
    except (StoreCorruptError, sqlite3.DatabaseError) as exc:
        if isinstance(exc, sqlite3.DatabaseError) and sqlite_faults.primary_code(exc) not in (sqlite_faults.CORRUPT, sqlite_faults.NOTADB):
            raise
        cause = exc.__cause__ if isinstance(exc, StoreCorruptError) else exc
        return [f"the check stopped at a page it cannot read ({cause})"]
    return [] if rows == ["ok"] else rows


def summarize(path: str | Path) -> StoreSummary:
    """Users, turns, items and size of the store file at ``path``."""
    db = database_path(path)
    con = sqlite_faults.open_read_only(db, store_label(db))
    try:
        (users,), = con.execute("SELECT COUNT(*) FROM (SELECT user_id FROM turns UNION SELECT user_id FROM items)").fetchall()
        (turns,), = con.execute("SELECT COUNT(*) FROM turns").fetchall()
        (items,), = con.execute("SELECT COUNT(*) FROM items").fetchall()
    finally:
        con.close()
    return StoreSummary(db, int(users), int(turns), int(items), db.stat().st_size)


def _held(target: Path) -> tuple[StoreSummary | None, str | None]:
    """What the file about to be replaced holds, or why that cannot be told ((None, None): no file)."""
    if not target.exists():
        return None, None
    try:
        return summarize(target), None
    except (StoreError, sqlite3.Error) as exc:
        return None, f"could not be read ({type(exc).__name__}; {target.stat().st_size / 1e6:.1f} MB)"


def _refuse_to_replace(target: Path) -> None:
    """Raise unless ``target`` is absent or an empty store (restore replaces it only with --force)."""
    if not target.exists():
        return
    label = store_label(target)
    try:
        held = summarize(target)
    except StoreError as exc:
        raise LightMemError(f"{target} exists and cannot be read ({type(exc).__name__}); restoring replaces it: "
                            f"add --force to `lightmem restore ... --store {label}`") from exc
    if held.turns or held.items:
        raise LightMemError(f"the store at {label} holds {held}; restoring replaces all of it: add --force "
                            f"(first `lightmem backup --store {label} OLD.sqlite` if it may be needed)")


def _write_copy(src: sqlite3.Connection, target: Path) -> None:
    """Copy ``src`` (one snapshot) into ``target`` through a temporary file renamed into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        dst = sqlite3.connect(tmp, isolation_level=None)
        try:
            # pages=-1: all pages in one step, inside one read transaction of the source, so the copy
            # is one consistent snapshot although other processes keep committing (WAL readers never block them).
            try:
                src.backup(dst, pages=-1)
            except sqlite3.Error as exc:
                if isinstance(src, sqlite_faults.StoreConnection):
                    src.rename(exc)  # a fault of the source file (a corrupt page) is named for it
                raise
            dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file; a store reopens it in WAL mode
            problems = integrity_problems(dst)
        finally:
            dst.close()
        if problems:
            raise StoreCorruptError(f"the copy made for {target} fails PRAGMA integrity_check ({'; '.join(problems[:5])}): "
                                    f"the source is corrupt; nothing was written to {target}")
        _fsync(tmp)
        for suffix in ("-wal", "-shm", "-journal"):  # an old log must never be replayed onto the new file
            Path(f"{target}{suffix}").unlink(missing_ok=True)
        os.replace(tmp, target)
        _fsync(target.parent)
    except sqlite3.Error as exc:
        if sqlite_faults.primary_code(exc) == sqlite_faults.FULL:
            raise StoreFullError(f"the disk holding {target} is full (SQLite: {exc}): nothing was written there; "
                                 f"free space (`df -h {target.parent}`) and retry") from exc
        raise StoreError(f"cannot write {target}: {exc}") from exc
    except OSError as exc:
        raise StoreError(f"cannot write {target}: {exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unusable(src: Path, target: Path, exc: StoreError) -> StoreError:
    """The error for a backup that cannot be read: what it is, and that nothing was changed."""
    if isinstance(exc, StoreCorruptError):
        what = f"it is corrupt: {sqlite_faults.diagnose(src)[1]}"
    elif isinstance(exc, NotAStoreError):
        what = "it is not a lightmem database"
    else:
        what = str(exc)
    return type(exc)(f"the backup {src} cannot be used ({what}): nothing was restored, and {target} is untouched. "
                     "Use another backup.")
