"""The embedding queue in PostgreSQL: jobs that any process claims with a lease.

An item written without its vector gets a row in ``embed_jobs`` in the same transaction (a trigger, see
``schema._QUEUE``); storing its vector deletes the row, deleting the item deletes it too. So the queue is exact by
construction: the backlog is ``COUNT(*)`` of the table, read the same from every process.

A process claims a batch with ``FOR UPDATE SKIP LOCKED`` (claimers never wait on each other) and stamps each job
with a lease (the database's clock, so hosts' clocks do not matter). A live holder stores the vectors within its
lease; a holder that died leaves its jobs to be claimed again once the lease has run out. A job whose item changed
while it was held is queued again by the trigger (the holder's vector for the old text is refused by
``set_vectors``). A job that failed ``max_failures`` times is left out of claims (``status`` counts it as failed)
until ``retry_failed``.

Why the items' own table and not a queue library (procrastinate, pgqueuer): the job must commit with the row it
describes, in the writer's transaction, and vanish with it; a trigger does that on every path that writes an item
(add, update, restore, migrations), and the claim is one statement. A library would add its own schema, a second
write per item and a worker runtime, for a queue of one job kind.

The same table-and-lease design holds the offline work: ``consolidation_jobs`` has a row per user whose
consolidation cycle is due (``ConsolidationQueue``), requested by the process that wrote the user's turns and run by
whichever process claims it (``ltm.queue_scheduler``): that process, another one with LTM in the background, or
``lightmem worker --consolidate``.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lightmem.stores.rows import index_text_sql

log = logging.getLogger(__name__)

CHANNEL = "lightmem_embed"  # schema.EMBED_CHANNEL: the trigger's NOTIFY
DEFAULT_LEASE_S = 30.0  # a claimed batch is stored within this, or another process may take it
MAX_FAILURES = 3  # a job failing this many times waits for retry_failed (the next process start)
_NOW = "extract(epoch FROM clock_timestamp())"

_CLAIM = f"""
WITH c AS (
  SELECT rid FROM embed_jobs
  WHERE failures < %(max)s AND (lease_until IS NULL OR lease_until < {_NOW})
  ORDER BY rid LIMIT %(n)s FOR UPDATE SKIP LOCKED)
UPDATE embed_jobs j SET lease_until = {_NOW} + %(lease)s, holder = %(me)s, claims = j.claims + 1
FROM c, items i WHERE j.rid = c.rid AND i.rid = c.rid
RETURNING i.rid, i.user_id, i.id, {index_text_sql("i")}, {_NOW} - j.enqueued_at, j.claims
"""


@dataclass(frozen=True)
class Job:
    """A claimed job: the item to embed, how long it has waited (seconds), and how many times it was claimed."""

    rid: int
    user_id: str
    item_id: str
    text: str
    waited_s: float
    claims: int


class EmbedQueue:
    """The queue's statements over a store's connections (``PostgresStore.embed_queue``).

    Args:
        db: The store's ``pg_conn.Connections`` (pooled, retried on transient errors).
        uri: The database, for the dedicated LISTEN connection of ``wait``.
        max_failures: Failures after which a job is left out of claims.
    """

    def __init__(self, db: Any, uri: str, max_failures: int = MAX_FAILURES) -> None:
        self._db, self._uri, self.max_failures = db, uri, max_failures
        self._listener: Any = None

    def claim(self, holder: str, n: int, lease_s: float = DEFAULT_LEASE_S) -> list[Job]:
        """Lease up to ``n`` claimable jobs, oldest item first, to ``holder``."""
        rows = self._db.write(lambda cur, _: cur.execute(
            _CLAIM, {"max": self.max_failures, "n": int(n), "lease": float(lease_s), "me": holder}).fetchall(),
            "", what="claiming embedding jobs")
        return sorted((Job(int(r[0]), r[1], r[2], r[3], float(r[4]), int(r[5])) for r in rows), key=lambda j: j.rid)

    def renew(self, holder: str, rids: Sequence[int], lease_s: float = DEFAULT_LEASE_S) -> int:
        """Extend ``holder``'s lease on ``rids`` (a long batch); returns how many it still held."""
        return self._db.write(lambda cur, _: cur.execute(
            f"UPDATE embed_jobs SET lease_until = {_NOW} + %s WHERE holder = %s AND rid = ANY(%s)",
            (float(lease_s), holder, list(rids))).rowcount, "", what="renewing embedding leases")

    def release(self, holder: str, rids: Sequence[int] | None = None) -> int:
        """Give back ``holder``'s leases (all of them when ``rids`` is None): claimable at once by anyone."""
        where, params = ("holder = %s", [holder]) if rids is None else ("holder = %s AND rid = ANY(%s)", [holder, list(rids)])
        return self._db.write(lambda cur, _: cur.execute(
            f"UPDATE embed_jobs SET lease_until = NULL, holder = NULL WHERE {where}", params).rowcount,
            "", what="releasing embedding leases")

    def fail(self, holder: str, rids: Sequence[int], error: str, retry_after_s: float = 1.0) -> None:
        """Count a failure of ``holder``'s jobs ``rids``; they are claimable again after ``retry_after_s``."""
        self._db.write(lambda cur, _: cur.execute(
            f"UPDATE embed_jobs SET failures = failures + 1, last_error = %s, holder = NULL, "
            f"lease_until = {_NOW} + %s WHERE holder = %s AND rid = ANY(%s)",
            (error[:500], float(retry_after_s), holder, list(rids))), "", what="recording failed embedding jobs")

    def retry_failed(self) -> int:
        """Make the jobs that failed for good claimable again; returns how many."""
        return self._db.write(lambda cur, _: cur.execute(
            "UPDATE embed_jobs SET failures = 0, lease_until = NULL, holder = NULL WHERE failures >= %s",
            (self.max_failures,)).rowcount, "", what="retrying failed embedding jobs")

    def waiting(self, item_ids: Sequence[str]) -> set[str]:
        """Which of ``item_ids`` still wait for their vector (failed-for-good jobs do not count as waiting)."""
        if not item_ids:
            return set()
        rows = self._db.read(lambda conn: conn.execute(
            "SELECT i.id FROM embed_jobs j JOIN items i ON i.rid = j.rid WHERE i.id = ANY(%s) AND j.failures < %s",
            (list(item_ids), self.max_failures)).fetchall(), what="reading the embedding queue")
        return {r[0] for r in rows}

    def last_rid(self) -> int:
        """The newest job's item row id (0 when the queue is empty): what was queued before now is at or below it."""
        (rid,), = self._db.read(lambda conn: conn.execute("SELECT COALESCE(MAX(rid), 0) FROM embed_jobs").fetchall(),
                                what="reading the embedding queue")
        return int(rid)

    def waiting_through(self, rid: int) -> int:
        """How many jobs at or below item row ``rid`` still wait (failed-for-good ones aside)."""
        (n,), = self._db.read(lambda conn: conn.execute(
            "SELECT COUNT(*) FROM embed_jobs WHERE rid <= %s AND failures < %s", (int(rid), self.max_failures)).fetchall(),
            what="reading the embedding queue")
        return int(n)

    def status(self) -> dict[str, Any]:
        """The queue as every process sees it: jobs waiting (``backlog``), leased now, failed for good, and the age
        of the oldest waiting job in seconds (0 when none)."""
        (backlog, leased, failed, oldest), = self._db.read(lambda conn: conn.execute(
            f"SELECT COUNT(*), COUNT(*) FILTER (WHERE lease_until > {_NOW} AND holder IS NOT NULL), "
            f"COUNT(*) FILTER (WHERE failures >= %s), {_NOW} - MIN(enqueued_at) FROM embed_jobs",
            (self.max_failures,)).fetchall(), what="reading the embedding queue")
        return {"backlog": int(backlog), "leased": int(leased), "failed": int(failed),
                "oldest_wait_s": round(float(oldest), 3) if oldest is not None else 0.0}

    def wait(self, timeout: float) -> bool:
        """Block until a job is queued anywhere (the trigger's NOTIFY) or ``timeout`` seconds pass; True when
        notified. A lost listening connection is opened again on the next call (and this one returns False)."""
        try:
            if self._listener is None or self._listener.closed:
                import psycopg

                self._listener = psycopg.connect(self._uri, autocommit=True, connect_timeout=10)
                self._listener.execute(f"LISTEN {CHANNEL}")
            if not list(self._listener.notifies(timeout=timeout, stop_after=1)):
                return False
            list(self._listener.notifies(timeout=0.0))  # a burst of commits is many notifies: drain what came
            return True
        except Exception as exc:  # noqa: BLE001 - the caller polls anyway; a listener is only a shortcut
            log.debug("embedding queue: LISTEN failed (%s: %s); polling", type(exc).__name__, exc)
            self.close()
            time.sleep(min(timeout, 1.0))
            return False

    def close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                listener.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass


# -- consolidation jobs ----------------------------------------------------------------------------------------
DEFAULT_CYCLE_LEASE_S = 60.0  # a claimed user is this holder's for this long; a live holder renews it mid-cycle
VECTORS_WAIT_S = 60.0  # a request waits at most this long for the user's memories queued before it to be embedded
_LEASED = f"(holder IS NOT NULL AND lease_until > {_NOW})"

_REQUEST = f"""
INSERT INTO consolidation_jobs AS j (user_id, requested_at) VALUES (%(user)s, {_NOW})
ON CONFLICT (user_id) DO UPDATE SET
  requested_at = CASE WHEN j.holder IS NOT NULL OR j.failures >= %(max)s  -- held (even past its lease): run again
                      THEN EXCLUDED.requested_at ELSE j.requested_at END,
  lease_until = CASE WHEN j.failures >= %(max)s THEN NULL ELSE j.lease_until END,
  failures = CASE WHEN j.failures >= %(max)s THEN 0 ELSE j.failures END
"""
# A user is claimable once the memories written before its request have their vectors (a cycle selects only
# embedded memories; without this a worker could run it on a batch the embedding workers have not reached), or
# once the request has waited ``VECTORS_WAIT_S`` (the rest waits for the next cycle, as it always may).
_CYCLE_CLAIM = f"""
WITH c AS (
  SELECT user_id FROM consolidation_jobs j
  WHERE failures < %(max)s AND (lease_until IS NULL OR lease_until < {_NOW})
    AND (requested_at < {_NOW} - %(wait)s OR NOT EXISTS (
      SELECT 1 FROM embed_jobs e
      WHERE e.user_id = j.user_id AND e.enqueued_at <= j.requested_at AND e.failures < %(embed_max)s))
  ORDER BY requested_at LIMIT %(n)s FOR UPDATE OF j SKIP LOCKED)
UPDATE consolidation_jobs j SET lease_until = {_NOW} + %(lease)s, holder = %(me)s, claims = j.claims + 1
FROM c WHERE j.user_id = c.user_id
RETURNING j.user_id, j.requested_at
"""


class ConsolidationQueue:
    """Users whose offline consolidation is due, as jobs any process claims (``PostgresStore.consolidation_queue``).

    One row per user in ``consolidation_jobs``: ``request`` upserts it (a user already queued stays once), ``claim``
    leases users to one holder at a time (``FOR UPDATE SKIP LOCKED``, the lease on the database's clock), ``done``
    deletes the row after the cycle, unless the user was requested again while the cycle ran (new turns the cycle
    may not have seen): then the row stays, claimable again at once. A request made while the user is held marks
    the row by moving ``requested_at`` to the request's time; ``done`` compares it with the value the claim read.
    A holder that dies leaves its users to be claimed again when the lease runs out (a live one renews it during a
    long cycle). The cycle itself commits under the store's cycle lock, so a cycle run twice (a lease that ran out
    under a slow holder) is correct, only wasted.

    A job that failed ``max_failures`` times is left out of claims until ``retry_failed`` or until the user is
    requested again (the next due point retries it, as the in-process scheduler does).

    Args:
        db: The store's ``conn.Connections``.
        max_failures: Failures after which a job is left out of claims.
        vectors_wait_s: Seconds a request waits for the user's memories queued before it to get their vectors.
    """

    def __init__(self, db: Any, max_failures: int = MAX_FAILURES, vectors_wait_s: float = VECTORS_WAIT_S) -> None:
        self._db, self.max_failures, self.vectors_wait_s = db, max_failures, vectors_wait_s
        self._claimed: dict[tuple[str, str], float] = {}  # (holder, user) -> requested_at the claim read
        self._mutex = threading.Lock()

    def request(self, user_id: str) -> None:
        """Queue ``user_id`` for a cycle (idempotent: a user already waiting stays once, with its first request's
        time; a user held by a running cycle is marked to run again after it)."""
        self._db.write(lambda cur, _: cur.execute(_REQUEST, {"user": user_id, "max": self.max_failures}), "",
                       what="requesting a consolidation cycle", replay_safe=True)

    def claim(self, holder: str, n: int = 1, lease_s: float = DEFAULT_CYCLE_LEASE_S) -> list[str]:
        """Lease up to ``n`` claimable users, longest waiting first, to ``holder``; returns their ids."""
        rows = self._db.write(lambda cur, _: cur.execute(_CYCLE_CLAIM, {
            "max": self.max_failures, "wait": float(self.vectors_wait_s), "embed_max": MAX_FAILURES, "n": int(n),
            "lease": float(lease_s), "me": holder}).fetchall(), "", what="claiming consolidation jobs")
        with self._mutex:
            self._claimed.update(((holder, r[0]), float(r[1])) for r in rows)
        return sorted(r[0] for r in rows)

    def renew(self, holder: str, user_ids: Sequence[str], lease_s: float = DEFAULT_CYCLE_LEASE_S) -> int:
        """Extend ``holder``'s lease on ``user_ids`` (a long cycle); returns how many it still held."""
        return self._db.write(lambda cur, _: cur.execute(
            f"UPDATE consolidation_jobs SET lease_until = {_NOW} + %s WHERE holder = %s AND user_id = ANY(%s)",
            (float(lease_s), holder, list(user_ids))).rowcount, "", what="renewing consolidation leases")

    def done(self, holder: str, user_id: str) -> bool:
        """The cycle of ``holder``'s ``user_id`` committed: the job goes, unless the user was requested again
        after the claim (then it is claimable again at once). True when the job went."""
        with self._mutex:
            claimed = self._claimed.pop((holder, user_id), None)

        def op(cur: Any, _: bool) -> bool:
            if claimed is not None and cur.execute(
                    "DELETE FROM consolidation_jobs WHERE user_id = %s AND holder = %s AND requested_at = %s",
                    (user_id, holder, claimed)).rowcount:
                return True
            cur.execute("UPDATE consolidation_jobs SET holder = NULL, lease_until = NULL, failures = 0 "
                        "WHERE user_id = %s AND holder = %s", (user_id, holder))
            return False

        return self._db.write(op, "", what="finishing a consolidation job")

    def fail(self, holder: str, user_id: str, error: str, retry_after_s: float = 5.0) -> None:
        """Count a failed cycle of ``holder``'s ``user_id``; it is claimable again after ``retry_after_s``."""
        with self._mutex:
            self._claimed.pop((holder, user_id), None)
        self._db.write(lambda cur, _: cur.execute(
            f"UPDATE consolidation_jobs SET failures = failures + 1, last_error = %s, holder = NULL, "
            f"lease_until = {_NOW} + %s WHERE holder = %s AND user_id = %s",
            (error[:500], float(retry_after_s), holder, user_id)), "", what="recording a failed consolidation job")

    def release(self, holder: str, user_ids: Sequence[str] | None = None) -> int:
        """Give back ``holder``'s users (all of them when ``user_ids`` is None): claimable at once by anyone."""
        with self._mutex:
            for key in [k for k in self._claimed if k[0] == holder and (user_ids is None or k[1] in user_ids)]:
                del self._claimed[key]
        where, params = (("holder = %s", [holder]) if user_ids is None
                         else ("holder = %s AND user_id = ANY(%s)", [holder, list(user_ids)]))
        return self._db.write(lambda cur, _: cur.execute(
            f"UPDATE consolidation_jobs SET lease_until = NULL, holder = NULL WHERE {where}", params).rowcount,
            "", what="releasing consolidation leases")

    def retry_failed(self) -> int:
        """Make the jobs that failed for good claimable again; returns how many."""
        return self._db.write(lambda cur, _: cur.execute(
            "UPDATE consolidation_jobs SET failures = 0, lease_until = NULL, holder = NULL WHERE failures >= %s",
            (self.max_failures,)).rowcount, "", what="retrying failed consolidation jobs")

    def waiting(self, user_ids: Sequence[str]) -> set[str]:
        """Which of ``user_ids`` still have a cycle to run, held or not (failed-for-good jobs do not count)."""
        if not user_ids:
            return set()
        rows = self._db.read(lambda conn: conn.execute(
            "SELECT user_id FROM consolidation_jobs WHERE user_id = ANY(%s) AND failures < %s",
            (list(user_ids), self.max_failures)).fetchall(), what="reading the consolidation queue")
        return {r[0] for r in rows}

    def status(self) -> dict[str, Any]:
        """The queue as every process sees it: users ``waiting`` for a holder, ``leased`` now, ``failed`` for good,
        and how long the oldest request not failed for good has waited (seconds, 0 when none)."""
        (waiting, leased, failed, oldest), = self._db.read(lambda conn: conn.execute(
            f"SELECT COUNT(*) FILTER (WHERE failures < %(max)s AND NOT {_LEASED}), COUNT(*) FILTER (WHERE {_LEASED}), "
            f"COUNT(*) FILTER (WHERE failures >= %(max)s), "
            f"{_NOW} - MIN(requested_at) FILTER (WHERE failures < %(max)s) FROM consolidation_jobs",
            {"max": self.max_failures}).fetchall(), what="reading the consolidation queue")
        return {"waiting": int(waiting), "leased": int(leased), "failed": int(failed),
                "oldest_wait_s": round(float(oldest), 3) if oldest is not None else 0.0}
