"""Prometheus metrics of ``lightmem serve`` (``--metrics-port``): requests, the indexing backlog, the views, the pool.

Off by default: without ``--metrics-port`` no metric exists, the app has no metrics middleware and
prometheus-client is never imported (this module imports it only when a ``ServerMetrics`` is made). On, ``serve`` gives the workers a fresh ``PROMETHEUS_MULTIPROC_DIR`` (removed
when it exits) before any of them starts, so each worker writes its values to files of its own (prometheus-client's
multiprocess mode), and ``serve`` itself answers the scrapes on the metrics port from all the workers' files: a
scrape is answered even while every worker is busy, and a worker that died is left out of the live gauges.

Each worker records its requests as they end (``Observe``: latency per route template, never per path, so no
user id or memory id becomes a label) and, every ``REFRESH_S`` seconds, what ``Memory.index_status()``, the
store's ``cache_stats()`` and its connection pool say (``ServerMetrics.refresh``); ``docs/serving.md`` ("Metrics
and traces") says what each metric means.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lightmem import tracing
from lightmem.errors import LightMemError

log = logging.getLogger(__name__)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
REFRESH_S = 5.0  # how stale the backlog, views and pool figures may be (a scrape every 15 s or more is usual)
# Request latencies run from a cached search (~1 ms) to a batch of 1,000 adds (seconds).
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class ServerMetrics:
    """One worker's metrics. Made only when metrics are on; ``Observe`` feeds the request metrics and starts
    ``watch`` (the refresh thread) once the worker's memory is open.

    Args:
        registry: The ``prometheus_client.CollectorRegistry`` they register in (default: a new one); in multiprocess
            mode their values go to files regardless.
        refresh_s: Seconds between two reads of the memory's backlog, views and pool.
    """

    def __init__(self, registry: Any = None, refresh_s: float = REFRESH_S) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self._gauge = Gauge
        self.registry = registry if registry is not None else CollectorRegistry()
        self.refresh_s = refresh_s
        r = self.registry
        self.requests = Histogram("lightmem_http_request_duration_seconds", "HTTP requests answered, by route "
                                  "template, method and status class", ["route", "method", "status_class"],
                                  buckets=BUCKETS, registry=r)
        self.in_flight = Gauge("lightmem_http_requests_in_flight", "HTTP requests being answered",
                               multiprocess_mode="livesum", registry=r)
        self.oldest_wait = Gauge("lightmem_index_oldest_wait_seconds", "Age of the oldest memory waiting for its "
                                 "vector", multiprocess_mode="livemax", registry=r)
        self.embedded = Counter("lightmem_index_embedded_items", "Memories embedded (rate(): embeddings per second)",
                                registry=r)
        self.embed_failed = Counter("lightmem_index_failed_items", "Memories given up on after their retries "
                                    "(found by their words; the next open retries them)", registry=r)
        self.cache_hits = Counter("lightmem_view_cache_hits", "Requests that found the user's view in memory",
                                  ["pid"], registry=r)
        self.cache_misses = Counter("lightmem_view_cache_misses", "Requests that rebuilt the user's view",
                                    ["pid"], registry=r)
        self.cache_evictions = Counter("lightmem_view_cache_evictions", "Views dropped to stay within the ceiling",
                                       ["pid"], registry=r)
        self.cache_bytes = Gauge("lightmem_view_cache_bytes", "Estimated bytes of the worker's per-user views",
                                 multiprocess_mode="liveall", registry=r)
        self.cache_views = Gauge("lightmem_view_cache_views", "Per-user views the worker holds",
                                 multiprocess_mode="liveall", registry=r)
        self.backlog: Any = None  # made at the first refresh: its sum across workers depends on the indexer
        self.db: Any = None  # made when the store has a connection pool
        self._pid = str(os.getpid())
        self._seen: dict[str, float] = {}  # the cumulative counts last read, turned into counter increments
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned = False

    # -- requests (Observe) ------------------------------------------------------------------
    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method if method in METHODS else "other", f"{status // 100}xx").observe(seconds)

    # -- the refresh thread ------------------------------------------------------------------
    def watch(self, memory: Any) -> None:
        """Refresh from ``memory`` now and every ``refresh_s`` seconds, on a daemon thread, until ``stop``."""
        self.refresh(memory)
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, args=(memory,), name="lightmem-metrics", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop refreshing (before the memory closes); in multiprocess mode this worker's live gauges go."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if os.environ.get(MULTIPROC_ENV):
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(os.getpid())

    def _run(self, memory: Any) -> None:
        while not self._stop.wait(self.refresh_s):
            self.refresh(memory)

    def refresh(self, memory: Any) -> None:
        """Read the memory's indexer status, view cache and connection pool into the metrics. A read that fails
        is logged (once per worker) and the others go on: metrics must not take a worker down."""
        for read in (self._index, self._views, self._pool):
            try:
                read(memory)
            except Exception as exc:  # noqa: BLE001 - e.g. a store closing under us; the next refresh tries again
                if not self._warned:
                    self._warned = True
                    log.warning("metrics: %s failed (%s: %s); said once, the next refreshes try again",
                                read.__name__.strip("_"), type(exc).__name__, exc)

    def _index(self, memory: Any) -> None:
        status = memory.index_status()
        if self.backlog is None:
            # The shared queue's backlog is the database's, the same in every worker: the max of the workers' is it.
            # An in-process indexer's is its own: the workers' figures add up.
            shared = bool(status.get("queue"))
            self.backlog = self._gauge("lightmem_index_backlog", "Memories stored but not yet embedded",
                                 multiprocess_mode="livemax" if shared else "livesum", registry=self.registry)
        if status.get("backlog") is not None:
            self.backlog.set(status["backlog"])
        if status.get("oldest_wait_s") is not None:
            self.oldest_wait.set(status["oldest_wait_s"])
        self._count("indexed", status.get("indexed"), self.embedded)
        self._count("failed", status.get("failed_here", status.get("failed")), self.embed_failed)

    def _views(self, memory: Any) -> None:
        stats = memory.store.cache_stats()
        self.cache_bytes.set(float(stats.get("mb") or 0) * 2**20)
        self.cache_views.set(stats.get("views") or 0)
        for key, counter in (("hits", self.cache_hits), ("misses", self.cache_misses),
                             ("evictions", self.cache_evictions)):
            self._count(key, stats.get(key), counter.labels(self._pid))

    def _pool(self, memory: Any) -> None:
        stats = pool_stats(memory.store)
        if stats is None:
            return
        if self.db is None:
            self.db = self._gauge("lightmem_db_connections", "The worker's database connections: in_use, idle, "
                            "waiting (requests queued for one), max (the pool's ceiling)", ["state"],
                            multiprocess_mode="livesum", registry=self.registry)
        size, idle = stats.get("pool_size", 0), stats.get("pool_available", 0)
        self.db.labels("in_use").set(max(size - idle, 0))
        self.db.labels("idle").set(idle)
        self.db.labels("waiting").set(stats.get("requests_waiting", 0))
        self.db.labels("max").set(stats.get("pool_max", 0))

    def _count(self, key: str, value: Any, counter: Any) -> None:
        """Turn a cumulative count read from the memory into a counter's increment (a count that went down was
        reset: the new count is the increment)."""
        if not isinstance(value, (int, float)):
            return
        last = self._seen.get(key, 0)
        counter.inc(value - last if value >= last else value)
        self._seen[key] = value


def pool_stats(store: Any) -> dict[str, int] | None:
    """The store's connection pool figures (psycopg_pool's ``get_stats``), or None for a store without a pool."""
    read = getattr(store, "pool_stats", None)
    if read is None:  # PostgresStore keeps its pool in its Connections (lightmem/stores/postgres/conn.py)
        read = getattr(getattr(store, "_db", None), "pool_stats", None)
    return read() if callable(read) else None


class Observe:
    """ASGI middleware of a worker with metrics or spans on: each request's latency and status by route template,
    the requests in flight, and (spans on) an HTTP server span, child of the caller's ``traceparent``. It also starts
    the metrics' refresh once the app's lifespan opened the memory, and stops it before the memory closes."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics | None) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" and self.metrics is not None:
            await self._lifespan(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # an exception that escapes the app is answered 500 outside this middleware
        method = scope.get("method", "")

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        started = time.perf_counter()
        if self.metrics is not None:
            self.metrics.in_flight.inc()
        try:
            with tracing.server_span(method, scope.get("headers", [])) as s:
                await self.app(scope, receive, sent)
                if s is not None:
                    s.update_name(f"{method} {route_of(scope)}")
                    s.set_attributes({"http.route": route_of(scope), "http.response.status_code": status})
        finally:
            if self.metrics is not None:
                self.metrics.in_flight.dec()
                self.metrics.observe(route_of(scope), method, status, time.perf_counter() - started)

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        metrics, app = self.metrics, scope.get("app")

        async def received() -> Message:
            message = await receive()
            if message["type"] == "lifespan.shutdown":  # before the app closes its memory
                metrics.stop()
            return message

        async def sent(message: Message) -> None:
            if message["type"] == "lifespan.startup.complete" and app is not None:
                memory = getattr(app.state, "memory", None)
                if memory is not None:
                    metrics.watch(memory)
            await send(message)

        await self.app(scope, received, sent)


def route_of(scope: Scope) -> str:
    """The route template that answered (``/v1/memories/{item_id}``), a mounted app's prefix, or ``unmatched``:
    a label with a bounded set of values."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    mounted = scope.get("root_path", "")[len(scope.get("app_root_path", "")):] if scope.get("app_root_path") else ""
    return mounted or "unmatched"


# -- the scrape side (``serve``'s process) ----------------------------------------------------
def multiproc_dir() -> str:
    """A fresh folder for the workers' metric files, set as ``PROMETHEUS_MULTIPROC_DIR`` for this process and the
    workers it starts: before prometheus-client is first imported, which reads the variable then."""
    if "prometheus_client" in sys.modules:
        from prometheus_client import values

        if values.ValueClass is values.MutexValue:
            raise RuntimeError("prometheus_client was imported before serve set PROMETHEUS_MULTIPROC_DIR: this "
                               "process's metrics would not reach the scrapes")
    path = tempfile.mkdtemp(prefix="lightmem-metrics-")
    os.environ[MULTIPROC_ENV] = path
    return path


def remove_multiproc_dir(path: str) -> None:
    os.environ.pop(MULTIPROC_ENV, None)
    shutil.rmtree(path, ignore_errors=True)


@contextmanager
def exposed(host: str, port: int) -> Iterator[str]:
    """While the block runs (``serve``'s uvicorn), the workers write their metrics to a fresh folder and this process
    answers scrapes on ``host:port`` from it; afterwards both are gone. Yields the folder.

    Raises:
        LightMemError: the port cannot be listened on (before any worker starts).
    """
    path = multiproc_dir()
    try:
        server = serve_scrapes(host, port, path)
    except OSError as exc:
        remove_multiproc_dir(path)
        raise LightMemError(f"cannot answer metrics on {host}:{port}: {exc}; choose another --metrics-port") from exc
    log.info("metrics: Prometheus scrapes on http://%s:%d/metrics", host, port)
    try:
        yield path
    finally:
        server.shutdown()
        server.server_close()
        remove_multiproc_dir(path)


class _LiveWorkers:
    """The workers' metric files, less the live gauges of workers that are gone (SIGKILLed, crashed): those are
    marked dead (their files removed) at each scrape, so a replaced worker does not count twice."""

    _LIVE = re.compile(r"^gauge_live\w+?_(\d+)\.db$")

    def __init__(self, path: str) -> None:
        from prometheus_client import multiprocess

        self.path = path
        self._files = multiprocess.MultiProcessCollector(None, path)

    def collect(self):
        from prometheus_client import multiprocess

        pids = {int(m.group(1)) for name in os.listdir(self.path) if (m := self._LIVE.match(name))}
        for pid in pids:
            if not _alive(pid):
                multiprocess.mark_process_dead(pid, self.path)
        return self._files.collect()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def serve_scrapes(host: str, port: int, path: str) -> Any:
    """Answer Prometheus on ``host:port`` (any path, ``/metrics`` included) from the workers' files in ``path``, on a
    daemon thread of this process; returns the HTTP server (``shutdown()`` stops it).

    Raises:
        OSError: the port is taken (said before any worker starts).
    """
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry()
    registry.register(_LiveWorkers(path))
    server, _ = start_http_server(port, addr=host, registry=registry)
    return server
