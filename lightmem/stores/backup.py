"""Backup, restore, check and compaction of a store named by its location, whichever backend holds it: the embedded
store's own (``embedded.backup``); a PostgreSQL store is backed up, restored and checked with PostgreSQL's tools (the
error gives the command) and compacted by ``postgres.maintenance``. The commands ``lightmem backup / restore / check /
compact`` call these.
"""
from __future__ import annotations

import shlex
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from lightmem.errors import LightMemError
from lightmem.stores.base import Compacted
from lightmem.stores.embedded import backup as embedded
from lightmem.stores.embedded.backup import Restored, StoreSummary
from lightmem.stores.factory import describe, is_server

__all__ = ["Restored", "StoreSummary", "backup", "check", "compact", "pg_guidance", "restore", "without_password"]


def backup(location: str | Path, out: str | Path, force: bool = False) -> StoreSummary:
    """Copy a consistent snapshot of the embedded store at ``location`` to ``out`` (``embedded.backup.backup``).

    Raises:
        LightMemError: ``location`` is a PostgreSQL store (the message gives the ``pg_dump`` command), holds no
            store, or ``out`` exists without ``force``.
        StoreError: the store cannot be read or the backup cannot be written (a subclass says why).
    """
    if is_server(location):
        raise LightMemError(pg_guidance(str(location), str(out)))
    return embedded.backup(location, out, force=force)


def restore(backup_file: str | Path, location: str | Path, force: bool = False) -> Restored:
    """Put the backup ``backup_file`` in place as the embedded store at ``location``, atomically
    (``embedded.backup.restore``).

    Raises:
        LightMemError: ``location`` is a PostgreSQL store (the message gives ``pg_restore``), the backup is
            missing, or the store holds data and ``force`` is not given.
        StoreError: the backup is unusable, or the store is in use (a subclass says why; nothing is changed then).
    """
    if is_server(location):
        raise LightMemError(pg_guidance(str(location), str(backup_file), restoring=True))
    return embedded.restore(backup_file, location, force=force)


def check(location: str | Path) -> StoreSummary:
    """Run the embedded store's integrity check (``embedded.backup.check``).

    Raises:
        LightMemError: no store there, or a PostgreSQL store (its server checks it).
        StoreCorruptError: the check found problems (listed in the message).
    """
    if is_server(location):
        raise LightMemError(f"{describe(location)} is a PostgreSQL store: its server checks it (e.g. `pg_amcheck`)")
    return embedded.check(location)


def compact(location: str | Path, wal: bool = False) -> Compacted:
    """Rewrite the store so that its files keep nothing of what was deleted, and give the space back.

    The embedded store: ``VACUUM`` and a truncated write-ahead log (``embedded.backup.compact``). A PostgreSQL
    store: ``postgres.maintenance.compact`` (``VACUUM FULL``, which erasure needs there).

    Args:
        location: The store (folder, ``.sqlite`` file or ``postgresql://`` URI).
        wal: PostgreSQL only: also push the server's WAL segments that may hold deleted text out of
            ``pg_wal`` (needs a superuser). The embedded store always empties its log.

    Raises:
        LightMemError: no store there.
        StoreError: the store cannot be written (a subclass says why), or another process held it too long.
    """
    if is_server(location):
        from lightmem.stores.postgres.maintenance import compact as compact_postgres

        return compact_postgres(str(location), wal=wal)
    return embedded.compact(location)


def pg_guidance(uri: str, file: str, restoring: bool = False) -> str:
    """How to back up (or restore) a PostgreSQL store with PostgreSQL's tools; the password left out."""
    safe = without_password(uri)
    dump = f"pg_dump --format=custom --file={shlex.quote(file)} {shlex.quote(safe)}"
    back = f"pg_restore --clean --if-exists --no-owner --dbname={shlex.quote(safe)} {shlex.quote(file)}"
    first, then = (back, dump) if restoring else (dump, back)
    what = "restored" if restoring else "backed up"
    return (f"a postgresql:// store is {what} with PostgreSQL's own tools, not by lightmem. Run\n  {first}\n"
            f"(the password comes from PGPASSWORD or ~/.pgpass; the other way: {then})")


def without_password(uri: str) -> str:
    """``uri`` without the password of its user part or of a ``password=`` parameter."""
    parts = urlsplit(uri)
    netloc = parts.netloc
    if "@" in netloc:
        cred, hosts = netloc.rsplit("@", 1)
        netloc = f"{cred.split(':', 1)[0]}@{hosts}"
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "password"])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
