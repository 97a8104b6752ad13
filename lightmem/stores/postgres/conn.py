"""The PostgreSQL store's connections: a pool, each connection's session settings, and retry on
transient errors (a server restart, a dropped connection).

Connections come from a ``psycopg_pool.ConnectionPool``; every new one is given the store's session
settings (``configure``), so whichever connection a call gets behaves alike. A thread holds one
connection for a read snapshot or a write transaction (``bound``): every statement of it runs there.

What is retried, on a fresh connection, with exponential backoff, a bounded number of times:

- reads outside a snapshot (each is idempotent), and a snapshot's first read (sent with its BEGIN);
- a write transaction that failed before its COMMIT was sent (the server never commits it);
- a write whose COMMIT was sent but whose answer was lost: its transaction id (read inside the
  transaction) is looked up with ``pg_xact_status`` on a new connection. Committed: the write is done
  and not run again; aborted: it is run again; still unknown: only a write that may run twice
  (``replay_safe``, lightmem's ``write``, which skips turns and items already stored) is run again,
  any other raises ``StoreError`` saying its outcome is unknown.

Transient means: the connection was lost (SQLSTATE class 08, no SQLSTATE at all), the server is
shutting down or starting (57P01, 57P02, 57P03), a session timeout closed it (57P05, 25P03), or
the server rolled the transaction back for a serialization failure or deadlock (40001, 40P01). A
statement that ran past ``statement_timeout`` (57014) is not retried; it is a ``StoreError``.
"""
from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from lightmem.errors import StoreError
from lightmem.stores.postgres.schema import named_faults

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_POOL_SIZE = 4  # connections per store (process): one per thread in a call at a time
DEFAULT_STATEMENT_TIMEOUT_MS = 30_000  # PostgreSQL's statement_timeout on each connection (0: none)
WAIT_S = 10.0  # how long a call waits for a connection (the pool reconnects meanwhile)

_TRANSIENT = {
    "57P01",  # admin_shutdown: a fast shutdown or restart, pg_terminate_backend
    "57P02",  # crash_shutdown: another server process crashed
    "57P03",  # cannot_connect_now: the server is starting up or shutting down
    "57P05",  # idle_session_timeout
    "25P03",  # idle_in_transaction_session_timeout
    "40001",  # serialization_failure: rolled back by the server
    "40P01",  # deadlock_detected: rolled back by the server
}
QUERY_CANCELED = "57014"  # statement_timeout (or pg_cancel_backend)
_SNAPSHOT = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"


def pipelined(conn: Any) -> Any:
    """``conn.pipeline()`` (statements sent without waiting for each answer) where the client's libpq has
    pipeline mode (14 or newer; psycopg[binary] bundles one), else a no-op context: the same statements,
    one round trip each."""
    import psycopg

    return conn.pipeline() if psycopg.Pipeline.is_supported() else contextlib.nullcontext()


def is_transient(exc: BaseException) -> bool:
    """Whether running the same statements again, on a fresh connection, may succeed."""
    from psycopg import OperationalError
    from psycopg_pool import PoolClosed, PoolTimeout

    if not isinstance(exc, OperationalError) or isinstance(exc, (PoolClosed, PoolTimeout)):
        return False
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in _TRANSIENT


def connection_lost(exc: BaseException) -> bool:
    """Whether the error means the connection itself is gone (so may be the pool's idle ones)."""
    state = getattr(exc, "sqlstate", None)
    return state is None or state.startswith("08") or state.startswith("57P")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a call is run again after a transient error: ``retries`` more
    attempts, waiting ``first_delay`` seconds before the first, twice as long before each next one, at
    most ``max_delay`` (each wait randomized between half and all of it, so processes spread out)."""

    retries: int = 5
    first_delay: float = 0.1
    max_delay: float = 2.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait before attempt ``attempt`` (1 = the first retry)."""
        return min(self.max_delay, self.first_delay * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)


def retrying(fn: Callable[[], T], policy: RetryPolicy, what: str, location: str,
             on_transient: Callable[[BaseException], None] | None = None,
             sleep: Callable[[float], None] = time.sleep) -> T:
    """``fn()``, run again after each transient error (see ``RetryPolicy``).

    Raises:
        StoreError: still failing after ``policy.retries`` retries (the last error is its cause), or
            no connection came within the wait (the server is down), or a statement timed out.
    """
    last: BaseException | None = None
    for attempt in range(policy.retries + 1):
        if attempt:
            sleep(policy.delay(attempt))
        try:
            return fn()
        except Exception as exc:
            if not is_transient(exc):
                _reraise(exc, location, what)
            last = exc
            log.warning("%s on %s failed (%s); retrying (%d of %d)", what, location, first_line(exc), attempt + 1,
                        policy.retries)
            if on_transient is not None:
                on_transient(exc)
    raise exhausted(what, location, policy.retries, last) from last


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def exhausted(what: str, location: str, retries: int, last: BaseException | None) -> StoreError:
    return StoreError(f"{what} on the PostgreSQL store at {location} failed {retries + 1} times on transient errors "
                      f"(the last: {first_line(last) if last else 'none'}); the server may be down or restarting. "
                      f"Nothing was left half done: retry when it is back.")


def named(exc: BaseException, location: str, what: str) -> BaseException:
    """``exc`` as lightmem names it: a statement timeout or a connection wait is a ``StoreError``."""
    from psycopg_pool import PoolClosed, PoolTimeout

    if isinstance(exc, PoolTimeout):
        return StoreError(f"{what}: no connection to the PostgreSQL store at {location} within {WAIT_S:g} s "
                          f"({first_line(exc)}); the server is down, unreachable or every connection is busy. Retry later.")
    if isinstance(exc, PoolClosed):
        return StoreError(f"{what}: the PostgreSQL store at {location} is closed")
    if getattr(exc, "sqlstate", None) == QUERY_CANCELED:
        return StoreError(f"{what} on the PostgreSQL store at {location} was canceled ({first_line(exc)}): a "
                          f"statement ran past the store's statement_timeout; nothing of it was stored")
    return exc


class _Bound(threading.local):
    """This thread's connection while it holds a read snapshot or a write transaction."""

    conn: Any = None
    snapshot: bool = False  # the connection holds a read snapshot (else a write transaction)
    begun: bool = False  # the snapshot's BEGIN was sent (with its first read, in one round trip)
    seen: frozenset[str] | set[str] = frozenset()  # users whose views were brought up to date in this snapshot


class Connections:
    """The store's connection pool and how calls use it (see the module docstring).

    Args:
        uri: The database.
        location: The URI without its password (for messages).
        size: Most connections open at once.
        settings: ``SET`` statements run on every new connection.
        policy: Retries after transient errors.
    """

    def __init__(self, uri: str, location: str, size: int, settings: Sequence[str], policy: RetryPolicy) -> None:
        from psycopg_pool import ConnectionPool, PoolTimeout

        if size < 1:
            raise ValueError("pool_size must be at least 1")
        self.location, self.policy, self._settings = location, policy, list(settings)
        self._bound = _Bound()
        self._pool = ConnectionPool(uri, min_size=1, max_size=size, kwargs={"autocommit": True, "connect_timeout": 10},
                                    configure=self._configure, timeout=WAIT_S, name="lightmem", open=False)
        try:
            self._pool.open(wait=True, timeout=WAIT_S)
        except PoolTimeout as exc:
            self._pool.close()
            raise StoreError(f"cannot open connections to {location} within {WAIT_S:g} s: {exc}") from exc

    def _configure(self, conn: Any) -> None:
        from pgvector.psycopg import register_vector

        register_vector(conn)
        for sql in self._settings:
            conn.execute(sql)

    @property
    def closed(self) -> bool:
        return self._pool.closed

    def close(self) -> None:
        self._pool.close()

    def pool_stats(self) -> dict[str, int]:
        """The pool's figures (psycopg_pool's ``get_stats``: pool_size, pool_available, pool_max, requests_waiting...),
        for the server's metrics."""
        return self._pool.get_stats()

    def bound(self) -> Any:
        """This thread's snapshot or transaction connection, or None."""
        return self._bound.conn

    @property
    def in_snapshot(self) -> bool:
        return self._bound.snapshot

    def _check_pool(self, exc: BaseException) -> None:
        if connection_lost(exc):
            self._pool.check()  # drop the pool's other dead connections (a restart killed them all)

    # -- reads --------------------------------------------------------------------------------------
    def read(self, fn: Callable[[Any], T], what: str = "a read") -> T:
        """``fn(connection)``: on this thread's snapshot or transaction connection when it holds one
        (an error there ends the snapshot: not retried, unless it is the snapshot's first read), else
        on a pooled one, retried."""
        b = self._bound
        if b.snapshot:
            if not b.begun:
                return retrying(lambda: self._first_read(fn), self.policy, what, self.location, self._check_pool)
            try:
                return fn(b.conn)
            except Exception as exc:
                if is_transient(exc):
                    raise StoreError(f"{what} on the PostgreSQL store at {self.location} lost its connection inside a "
                                     f"read snapshot (`with store.lock:`) ({first_line(exc)}); run it again") from exc
                _reraise(exc, self.location, what)
        if b.conn is not None:
            return fn(b.conn)  # inside a write transaction: its own retry handles errors

        def attempt() -> T:
            with self._pool.connection() as c, named_faults(self.location):
                return fn(c)

        return retrying(attempt, self.policy, what, self.location, self._check_pool)

    def _first_read(self, fn: Callable[[Any], T]) -> T:
        """The snapshot's BEGIN and its first read, sent together (one round trip). Nothing was read in the
        snapshot before, so after a lost connection it starts again on a fresh one."""
        b = self._bound
        if b.conn is None:
            b.conn = self._pool.getconn()
        conn = b.conn
        try:
            with named_faults(self.location), pipelined(conn):
                conn.execute(_SNAPSHOT)
                out = fn(conn)
        except Exception as exc:
            if is_transient(exc):
                b.conn = None
                self._pool.putconn(conn)  # the pool drops a dead connection
            else:
                b.begun = True  # the transaction may be open: ended with a ROLLBACK
            raise
        b.begun = True
        return out

    def begin_snapshot(self) -> None:
        """Start this thread's read-only REPEATABLE READ snapshot: its first read takes a pooled connection
        and begins the transaction there (``_first_read``); a snapshot that reads nothing takes none."""
        self._bound.snapshot, self._bound.begun, self._bound.seen = True, False, set()

    def synced_in_snapshot(self, user_id: str) -> bool:
        """Whether the user's view was brought up to date in this thread's current read snapshot (then it
        matches the snapshot: nothing can change what the snapshot sees)."""
        return self._bound.snapshot and user_id in self._bound.seen

    def mark_synced(self, user_id: str) -> None:
        if self._bound.snapshot:
            self._bound.seen.add(user_id)

    def end_snapshot(self) -> None:
        b = self._bound
        conn, begun = b.conn, b.begun
        b.conn, b.snapshot, b.begun, b.seen = None, False, False, frozenset()
        if conn is None:  # nothing read, or its first read lost the connection and no other came
            return
        try:
            if begun:
                conn.execute("ROLLBACK")  # read only: nothing to commit
        except Exception:  # a lost connection: the pool drops it
            pass
        finally:
            self._pool.putconn(conn)

    # -- writes -------------------------------------------------------------------------------------
    def write(self, op: Callable[[Any, bool], T], first: str, params: Sequence[Any] = (), *, what: str,
              replay_safe: bool = False) -> T:
        """Run ``op(cursor, replay)`` in one transaction, after ``first`` (a SELECT of lock functions,
        or ""); retried as the module docstring says. ``replay`` is True when an earlier attempt may
        have committed (only for ``replay_safe`` ops).

        Raises:
            StoreError: inside this thread's read snapshot; retries exhausted; outcome unknown.
        """
        if self._bound.snapshot:
            raise StoreError("a store write inside `with store.lock:` (a read snapshot); write outside it")
        if self._bound.conn is not None:
            with self._bound.conn.cursor() as cur:  # part of this thread's transaction already open
                if first:
                    cur.execute(f"SELECT {first}", params)
                return op(cur, False)
        select = f"SELECT pg_current_xact_id()::text{', ' + first if first else ''}"
        replay, last = False, None
        for attempt in range(self.policy.retries + 1):
            if attempt:
                time.sleep(self.policy.delay(attempt))
            xid, committing, result = None, False, None
            try:
                conn = self._pool.getconn()
            except Exception as exc:
                _reraise(exc, self.location, what)
            self._bound.conn = conn
            try:
                with named_faults(self.location):
                    try:
                        with conn.cursor() as cur:
                            with pipelined(conn):  # BEGIN and the first SELECT in one round trip
                                conn.execute("BEGIN")
                                xid = cur.execute(select, params).fetchone()[0]
                            result = op(cur, replay)
                    except BaseException:
                        _rollback_quietly(conn)
                        raise
                    committing = True
                    self.commit(conn)
                return result  # type: ignore[return-value]
            except Exception as exc:
                if not is_transient(exc):
                    _reraise(exc, self.location, what)
                last = exc
            finally:
                self._bound.conn = None
                self._pool.putconn(conn)
            if committing:  # the COMMIT was sent: did it happen?
                outcome = self.outcome(xid)
                if outcome == "committed":
                    log.warning("%s on %s: the connection was lost at COMMIT (%s), which had committed", what,
                                self.location, first_line(last))
                    return result  # type: ignore[return-value]
                if outcome is None:
                    if not replay_safe:
                        raise StoreError(
                            f"{what} on the PostgreSQL store at {self.location} lost its connection while committing "
                            f"({first_line(last)}) and the server cannot say yet whether it committed: check the "
                            f"data before doing it again") from last
                    replay = True
            log.warning("%s on %s failed (%s); retrying (%d of %d)", what, self.location, first_line(last), attempt + 1,
                        self.policy.retries)
            self._check_pool(last)
        raise exhausted(what, self.location, self.policy.retries, last) from last

    @staticmethod
    def commit(conn: Any) -> None:
        """COMMIT the connection's transaction (a seam for the tests: a reply lost after the commit)."""
        conn.execute("COMMIT")

    def outcome(self, xid: str | None) -> str | None:
        """``committed`` or ``aborted`` for transaction ``xid`` as the server knows it, None when it cannot tell
        (no answer within the retries, or the transaction is still in progress)."""
        if xid is None:
            return None
        for attempt in range(self.policy.retries + 1):
            if attempt:
                time.sleep(self.policy.delay(attempt))
            try:
                with self._pool.connection() as conn:
                    (status,), = conn.execute("SELECT pg_xact_status(%s::xid8)", (xid,)).fetchall()
            except Exception as exc:
                if not is_transient(exc):
                    return None
                self._check_pool(exc)
                continue
            if status in ("committed", "aborted"):
                return status
        return None


def _reraise(exc: BaseException, location: str, what: str) -> None:
    """Raise ``exc`` as ``named`` names it (call inside its ``except`` block)."""
    renamed = named(exc, location, what)
    if renamed is exc:
        raise exc
    raise renamed from exc


def _rollback_quietly(conn: Any) -> None:
    try:
        conn.execute("ROLLBACK")
    except Exception:  # the connection is gone: the server rolls back on its own
        pass

