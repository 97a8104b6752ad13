"""Compaction of a PostgreSQL store: rewrite lightmem's tables so that the server's files keep no deleted
text, and say plainly what may still hold it (``lightmem compact --store postgresql://...``).

What a deletion leaves in a PostgreSQL data directory (``tests/test_postgres_compact.py`` greps one):

- The table files. ``DELETE`` leaves the row's bytes in its page as a dead row version; ``VACUUM``
  (and autovacuum) marks that space reusable but does not clear it, and a ``CHECKPOINT`` writes the page
  to disk as it is: the text stays readable in the file until a new row happens to overwrite it.
  ``VACUUM FULL`` writes each table, its TOAST table and its indexes to new files and drops the old ones.
- The planner's statistics (``pg_statistic``): ``ANALYZE`` (autovacuum runs it too) stores sampled
  column values, texts included. Re-analyzing replaces them; ``VACUUM FULL pg_statistic`` then drops
  the old row versions.
- The write-ahead log (``pg_wal``) holds every text written. After a checkpoint PostgreSQL recycles
  old segment files by renaming them for reuse, bytes and all, so a text stays in some segment file
  until that file is reused and written over (observed on PostgreSQL 16: one ``pg_switch_wal()`` +
  ``CHECKPOINT`` moves the text to a renamed, recycled file; it left only once every recycled file
  had been reused). ``wal=True`` switches segments and checkpoints until every segment file has been
  rewritten.
- Outside the data directory nothing here reaches: archived WAL (``archive_mode``), replicas (they
  replay ``VACUUM FULL`` but keep their own WAL), base backups and ``pg_dump`` files made before, and
  server logs of statements (``log_statement``); freed disk blocks are not overwritten either.
"""
from __future__ import annotations

import logging
import re
from typing import Any

from lightmem.errors import LightMemError, StoreError
from lightmem.stores.base import Compacted
from lightmem.stores.postgres import schema as pg_schema
from lightmem.stores.postgres.conn import first_line

log = logging.getLogger(__name__)

# Every table of a lightmem store, the LTM graph's included: those postgres.schema creates.
TABLES = tuple(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", pg_schema._TABLES + pg_schema.FACT_TABLES))
_SEGMENTS = r"SELECT name, modification FROM pg_ls_waldir() WHERE name ~ '^[0-9A-F]{24}$'"


def compact(uri: str, wal: bool = False) -> Compacted:
    """Rewrite lightmem's tables (``VACUUM (FULL, ANALYZE)``), the planner's statistics and, with ``wal``,
    the server's write-ahead log, so that no file of the data directory keeps deleted text.

    Each table is locked (``ACCESS EXCLUSIVE``) while it is rewritten, so reads and writes of the store
    wait meanwhile, and the rewrite needs free disk space about the table's size.

    Args:
        uri: The store's database (``postgresql://...``).
        wal: Also switch WAL segments and checkpoint until every segment file in ``pg_wal`` has been
            written over (``pg_switch_wal``, ``pg_ls_waldir`` and ``CHECKPOINT``: a superuser). Each
            round writes one segment (16 MB by default); there are at least as many rounds as segment
            files plus two, and at most twice that.

    Returns:
        Sizes before and after, the steps run and what may still hold deleted text.

    Raises:
        LightMemError: the database holds no lightmem store; ``wal`` without the privileges it needs
            (checked before anything runs); or a role that may not ``VACUUM`` lightmem's tables (PostgreSQL
            skips those: the message names them).
        StoreError: the server cannot be reached or refuses a statement.
    """
    psycopg = pg_schema._psycopg()
    from psycopg import sql

    location = pg_schema.redact(uri)
    try:
        conn = psycopg.connect(uri, autocommit=True, connect_timeout=10)  # VACUUM runs outside a transaction
    except psycopg.Error as exc:
        raise StoreError(f"cannot connect to {location}: {exc}".strip()) from exc
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    try:
        with conn:
            if conn.execute("SELECT to_regclass('meta')").fetchone()[0] is None:
                raise LightMemError(f"no lightmem store at {location}: nothing to compact")
            if wal:
                _check_wal_privileges(conn, location)
            tables = [t for t in TABLES if conn.execute("SELECT to_regclass(%s)", (t,)).fetchone()[0] is not None]
            before = _size(conn, tables)
            steps, remaining = [], []
            conn.execute(sql.SQL("VACUUM (FULL, ANALYZE) {}").format(sql.SQL(", ").join(map(sql.Identifier, tables))))
            steps.append(f"VACUUM (FULL, ANALYZE) of {len(tables)} tables")
            skipped = _take(notices, "skipping")
            if skipped:
                raise LightMemError(
                    f"PostgreSQL did not compact every table of {location} ({'; '.join(skipped[:3])}"
                    f"{'; ...' if len(skipped) > 3 else ''}): deleted text stays in those tables' files. Run "
                    f"`lightmem compact` with the URI of the tables' owner or of a superuser.")
            conn.execute("VACUUM FULL pg_catalog.pg_statistic")
            if _take(notices, "skipping"):
                remaining.append("the planner's statistics (pg_statistic) may keep old row versions with sampled "
                                 "texts: `VACUUM FULL pg_statistic` needs the database's owner or a superuser")
            else:
                steps.append("VACUUM FULL pg_statistic")
            if _checkpoint(conn):
                steps.append("CHECKPOINT")
            else:
                remaining.append("CHECKPOINT needs a superuser (or pg_checkpoint): the rewritten statistics reach "
                                 "the disk at the server's next checkpoint (checkpoint_timeout)")
            if wal:
                rounds, stale = _cycle_wal(conn)
                steps.append(f"{rounds} x pg_switch_wal() + CHECKPOINT")
                if stale:
                    remaining.append(f"{len(stale)} WAL segment file(s) in pg_wal were not rewritten ({', '.join(stale[:3])}"
                                     f"{', ...' if len(stale) > 3 else ''}): kept for a replication slot, wal_keep_size "
                                     "or archiving; they may hold deleted text until PostgreSQL lets them go")
            else:
                remaining.append("the write-ahead log (pg_wal): its segment files keep deleted text until they are "
                                 "reused and written over (`lightmem compact --wal` with a superuser's URI forces that)")
            remaining += _outside(conn)
            after = _size(conn, tables)
    except psycopg.Error as exc:
        raise StoreError(f"compacting {location} failed: {first_line(exc)}") from exc
    log.info("compacted %s: %d -> %d bytes (%s)", location, before, after, "; ".join(steps))
    return Compacted(location, before, after, tuple(steps), tuple(remaining))


def _take(notices: list[str], word: str) -> list[str]:
    """The server's notices so far that contain ``word`` (all of them are cleared)."""
    found = [n for n in notices if word in n]
    notices.clear()
    return found


def _size(conn: Any, tables: list[str]) -> int:
    (n,), = conn.execute("SELECT COALESCE(SUM(pg_total_relation_size(t::regclass)), 0) FROM unnest(%s::text[]) t",
                         (tables,)).fetchall()
    return int(n)


def _checkpoint(conn: Any) -> bool:
    """Run CHECKPOINT; False when this role may not."""
    import psycopg

    try:
        conn.execute("CHECKPOINT")
    except psycopg.errors.InsufficientPrivilege:
        return False
    return True


def _check_wal_privileges(conn: Any, location: str) -> None:
    """Raise unless this role may switch WAL segments, list them and checkpoint."""
    (switch, listing, superuser), = conn.execute(
        "SELECT has_function_privilege('pg_switch_wal()', 'EXECUTE'), has_function_privilege('pg_ls_waldir()', 'EXECUTE'), "
        "(SELECT rolsuper FROM pg_roles WHERE rolname = current_user)").fetchall()
    if not (switch and listing and superuser):
        raise LightMemError(
            f"`compact --wal` rewrites the server's write-ahead log and needs a superuser (pg_switch_wal, pg_ls_waldir, "
            f"CHECKPOINT); the role of {location} is not one. Nothing was changed: run it with a superuser's URI, or "
            f"without --wal (the tables are compacted; the WAL keeps deleted text until its segments are reused).")


def _cycle_wal(conn: Any) -> tuple[int, list[str]]:
    """Switch segments and checkpoint until every segment file was written since the start (FIFO reuse of
    recycled files: one round per file, plus two). Returns (rounds, segment files never rewritten)."""
    conn.execute("SELECT pg_switch_wal()")
    conn.execute("CHECKPOINT")  # older segments are recycled or removed now
    # A file modified at or after `start` was written during the rounds (the clock ticks past it first).
    (start,), = conn.execute("SELECT date_trunc('second', clock_timestamp()) + interval '1 second'").fetchall()
    conn.execute("SELECT pg_sleep(GREATEST(0, EXTRACT(EPOCH FROM (%s - clock_timestamp()))))", (start,))
    files = len(conn.execute(_SEGMENTS).fetchall())
    rounds, stale = 0, []
    while rounds < 2 * files + 4:
        conn.execute("SELECT pg_switch_wal()")  # the current segment is ended (its rest written as zeros)
        conn.execute("CHECKPOINT")  # a record of its own, so the next switch has one to end
        rounds += 1
        stale = sorted(name for name, modified in conn.execute(_SEGMENTS).fetchall() if modified < start)
        if rounds >= files + 2 and not stale:
            break
    return rounds, stale


def _outside(conn: Any) -> list[str]:
    """What keeps copies outside this data directory, as far as the server tells."""
    out = []
    (archive,), = conn.execute("SELECT current_setting('archive_mode')").fetchall()
    if archive != "off":
        out.append(f"archived WAL (archive_mode = {archive}): the archive keeps every segment written before")
    (replicas,), = conn.execute("SELECT count(*) FROM pg_stat_replication").fetchall()
    (slots,), = conn.execute("SELECT count(*) FROM pg_replication_slots").fetchall()
    if replicas or slots:
        out.append(f"replicas ({replicas} streaming, {slots} replication slot(s)): each compacts its tables by replaying "
                   "this, but keeps its own WAL files")
    return out
