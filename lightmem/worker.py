"""``lightmem worker``: a process that only drains a PostgreSQL store's embedding queue (no HTTP).

Run as many as wanted, on any host that reaches the database: each claims batches with a lease
(``stores.postgres.queue``), embeds them with the store's own encoder (on the CPU, or on a GPU with
``device="cuda"`` for a store whose vectors the fp32 encoder reproduces) and stores the vectors. SIGTERM or
SIGINT stops it after its batch and gives its leases back; SIGKILL leaves them to run out, and another worker (or a
server's own indexer) takes the batch then.

With ``consolidate`` (``lightmem worker --consolidate``) it also runs the offline consolidation cycles that writers
request in the store's ``consolidation_jobs`` (``ltm.queue_scheduler``): one holder per user at a time, with a lease
renewed during the cycle. ``lightmem serve`` opens no LTM, so a deployment that builds the graph runs such workers;
a ``Memory`` with LTM in the background requests cycles and runs them too unless opened with ``index_here=False``.
"""
from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from lightmem.errors import LightMemError

if TYPE_CHECKING:
    from lightmem.ltm import LTMOptions
    from lightmem.ltm.queue_scheduler import QueueScheduler

log = logging.getLogger(__name__)

DEFAULT_WORKER_BATCH = 64  # CPU: an encoder call of ~2 s with the int8 mpnet encoder on 2 cores
DEFAULT_GPU_BATCH = 512
GPU_ENCODE_BATCH = 128  # texts per forward pass on a GPU (the CPU encoders' 16 would leave it idle)


@dataclass
class WorkerReport:
    """What a worker did: items embedded and stored, seconds, and the queue as it left it."""

    embedded: int = 0
    stored: int = 0
    batches: int = 0
    cycles: int = 0  # consolidation cycles committed (``consolidate``)
    seconds: float = 0.0
    busy_seconds: float = 0.0
    queue: dict[str, Any] = field(default_factory=dict)
    consolidation: dict[str, Any] = field(default_factory=dict)  # the consolidation queue as the worker left it

    @property
    def items_per_s(self) -> float:
        return self.embedded / self.busy_seconds if self.busy_seconds else 0.0


def open_worker_parts(store: str, device: str = "cpu", **store_options: Any) -> tuple[Any, Any]:
    """The store at ``store`` (a ``postgresql://`` URI holding a lightmem store) and the encoder that wrote it.

    Raises:
        LightMemError: not a PostgreSQL URI, no store there yet, or ``device`` cannot reproduce its vectors.
    """
    from lightmem.models.embedder import embedder_for
    from lightmem.stores.factory import describe, is_server, open_store, stored_embedder

    if not is_server(store):
        raise LightMemError(f"{describe(store)}: `lightmem worker` drains a PostgreSQL store's queue "
                            "(postgresql://...); an embedded store embeds in the process that writes it")
    name = stored_embedder(store)
    if not name or name == "unknown":
        raise LightMemError(f"{describe(store)} holds no lightmem store yet (or records no encoder): open it once with "
                            "`lightmem serve` or Memory.open, which creates it with its encoder")
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise LightMemError(f"device must be cpu, cuda or cuda:N, got {device!r}")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise LightMemError(f"--device {device}: torch sees no CUDA device on this host; use --device cpu")
        embedder = embedder_for(name, backend="torch")  # raises StoreError for a store written by an int8 encoder
        model = getattr(embedder, "_model", None)
        if device != "cuda" and model is not None:  # cuda:N (the torch backend picked cuda, i.e. cuda:0)
            model.to(device)
            embedder.device = device
        if hasattr(embedder, "batch_size"):
            embedder.batch_size = max(embedder.batch_size, GPU_ENCODE_BATCH)
    else:
        embedder = embedder_for(name)
    return open_store(store, dim=embedder.dim, embedder=embedder.name, **store_options), embedder


class WorkerMetrics:
    """A worker's Prometheus metrics on a port of its own (``lightmem worker --metrics-port``): the names the
    servers use for the index (``lightmem_index_*``), so one dashboard sums replicas and workers, and the time per
    batch. prometheus-client is imported only when a worker asks for metrics."""

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        try:
            from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
        except ImportError as exc:
            raise LightMemError("--metrics-port needs prometheus-client: pip install 'lightmem-slm[metrics]'") from exc
        r = self.registry = CollectorRegistry()
        self.embedded = Counter("lightmem_index_embedded_items", "Memories embedded (rate(): embeddings per second)",
                                registry=r)
        self.stored = Counter("lightmem_worker_stored_items", "Memories whose vector this worker stored", registry=r)
        self.batch = Histogram("lightmem_worker_batch_seconds", "Seconds per claimed batch: encode and store",
                               buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60), registry=r)
        self.backlog = Gauge("lightmem_index_backlog", "Memories stored but not yet embedded (the shared queue)",
                             registry=r)
        self.oldest = Gauge("lightmem_index_oldest_wait_seconds", "Age of the oldest memory waiting for its vector",
                            registry=r)
        self.leased = Gauge("lightmem_index_leased_items", "Jobs held under a lease by some worker", registry=r)
        self.failed = Gauge("lightmem_index_failed_jobs", "Jobs left out after failing (retried at a worker's start)",
                            registry=r)
        self.server, self.thread = start_http_server(port, addr=host, registry=r)

    def on_batch(self, n: int, done: int, seconds: float) -> None:
        self.embedded.inc(n)
        self.stored.inc(done)
        self.batch.observe(seconds)

    def on_queue(self, status: dict[str, Any]) -> None:
        self.backlog.set(status["backlog"])
        self.oldest.set(status["oldest_wait_s"])
        self.leased.set(status["leased"])
        self.failed.set(status["failed"])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()  # the port is free again


def run_worker(store: str, *, device: str = "cpu", batch_size: int | None = None, lease_s: float | None = None,
               drain: bool = False, report_every: float = 10.0, stop: threading.Event | None = None,
               on_report: Callable[[WorkerReport], None] | None = None, metrics_port: int | None = None,
               metrics_host: str = "127.0.0.1", consolidate: bool = False, ltm: LTMOptions | None = None,
               **store_options: Any) -> WorkerReport:
    """Drain the store's embedding queue (and, with ``consolidate``, its consolidation jobs) until stopped
    (SIGTERM/SIGINT, or ``stop`` set) or, with ``drain``, until nothing claimable is left.

    Args:
        store: ``postgresql://`` URI of the store.
        device: ``cpu`` or ``cuda[:N]`` (the encoder on a GPU; the store must have been written by the fp32 encoder).
        batch_size: Items claimed and embedded per batch (default 64 on the CPU, 512 on a GPU).
        lease_s: Seconds a claimed batch stays this worker's (default ``queue.DEFAULT_LEASE_S``).
        drain: Return once the queue has nothing claimable (a backfill, a benchmark, a test).
        report_every: Seconds between progress lines in the log (and ``on_report`` calls).
        stop: An event that stops the worker when set (tests); SIGTERM and SIGINT set it in the main thread.
        on_report: Called with the running report every ``report_every`` seconds and at the end.
        metrics_port: Serve Prometheus metrics on this port (``WorkerMetrics``); None: none.
        metrics_host: The interface of the metrics port.
        consolidate: Also claim consolidation jobs and run their cycles.
        ltm: The cycles' settings (``background`` is ignored: the worker runs them); None: ``LTMOptions()``, rules
            only (no spaCy pipeline; ``lightmem worker --consolidate`` passes spaCy's, as ``lightmem consolidate``).
        **store_options: ``PostgresStore`` settings (pool_size, statement_timeout, ...).
    """
    from lightmem.queue_indexer import QueueIndexer

    db, embedder = open_worker_parts(store, device, **store_options)
    try:
        metrics = WorkerMetrics(metrics_port, metrics_host) if metrics_port is not None else None
    except BaseException:  # the port is taken, or no prometheus-client: nothing else was started
        db.close()
        raise
    batch = batch_size or (DEFAULT_GPU_BATCH if device.startswith("cuda") else DEFAULT_WORKER_BATCH)
    report = WorkerReport()
    lock = threading.Lock()

    def counted(n: int, done: int, seconds: float) -> None:
        with lock:
            report.embedded += n
            report.stored += done
            report.batches += 1
            report.busy_seconds += seconds
        if metrics is not None:
            metrics.on_batch(n, done, seconds)

    stop = stop or threading.Event()
    indexer = QueueIndexer(db, embedder, batch_size=batch, lease_s=lease_s, on_batch=counted)
    try:
        cycles = _cycle_runner(db, embedder, ltm, report, lock) if consolidate else None
    except BaseException:  # the cycles' settings or models: close what was opened
        db.close()
        if metrics is not None:
            metrics.close()
        raise
    restore = _stop_on_signals(stop)
    started = last = time.monotonic()
    try:
        indexer.start()
        if cycles is not None:
            cycles.start()
        log.info("worker %s: draining %s (batch %d, lease %.0f s, device %s)", indexer.holder, db.location, batch,
                 indexer.lease_s, device)
        while not stop.wait(0.5):
            now = time.monotonic()
            if now - last >= report_every:
                last = now
                _report(report, indexer, started, on_report)
                if metrics is not None:
                    metrics.on_queue(report.queue)
            if drain and _drained(indexer) and (cycles is None or _cycles_drained(db, cycles)):
                break
            if not indexer.alive:
                raise LightMemError(f"the worker's indexer stopped: {indexer.last_error}")
    finally:
        indexer.close(wait=False)  # gives back the leases of a batch not stored
        if cycles is not None:
            cycles.close()  # a running cycle commits or rolls back whole first; then its leases go back
        report.seconds = time.monotonic() - started
        try:
            report.queue = db.embed_queue.status()
            if cycles is not None:
                report.consolidation = db.consolidation_queue.status()
        except Exception as exc:  # noqa: BLE001 - the report goes without the queue's state
            log.warning("worker: could not read the queue at the end: %s: %s", type(exc).__name__, exc)
        finally:
            db.close()
            restore()
            if metrics is not None:
                metrics.close()
    if on_report is not None:
        on_report(report)
    log.info("worker %s: %d embedded, %d stored in %.1f s (%.1f items/s while busy); %d consolidation cycles",
             indexer.holder, report.embedded, report.stored, report.seconds, report.items_per_s, report.cycles)
    return report


def _cycle_runner(db: Any, embedder: Any, ltm: LTMOptions | None, report: WorkerReport,
                  lock: threading.Lock) -> QueueScheduler:
    """The consolidation jobs' runner over the worker's store: the cycles ``ltm`` describes, counted in ``report``."""
    from lightmem.ltm import LTMOptions, build_ltm
    from lightmem.ltm.queue_scheduler import QueueScheduler

    options = replace(ltm or LTMOptions(), background=False)  # the runner below is this worker's own
    runtime = build_ltm(db, embedder, options)

    def counted(rep: Any) -> None:
        if rep.cycle:
            with lock:
                report.cycles += 1

    n = db.consolidation_queue.retry_failed()
    if n:
        log.info("worker: %d consolidation jobs that failed before are queued again", n)
    return QueueScheduler(runtime.consolidator, db.consolidation_queue, options.consolidation.every_n_turns,
                          options.nice, on_report=counted, poll_s=0.5)


def _cycles_drained(db: Any, cycles: QueueScheduler) -> bool:
    """No consolidation job waits or is held (failed-for-good ones aside), and none runs here."""
    status = db.consolidation_queue.status()
    return status["waiting"] + status["leased"] == 0 and not cycles.busy


def _drained(indexer: Any) -> bool:
    """Nothing left to claim: no job waits unleased, and this worker holds none (failed-for-good ones aside)."""
    status = indexer.queue.status()
    return status["backlog"] - status["failed"] == 0


def _report(report: WorkerReport, indexer: Any, started: float, on_report: Callable[[WorkerReport], None] | None) -> None:
    queue = indexer.queue.status()
    report.queue, report.seconds = queue, time.monotonic() - started
    log.info("worker %s: %d embedded (%.1f items/s while busy); queue: %d waiting, %d leased, %d failed, oldest %.1f s",
             indexer.holder, report.embedded, report.items_per_s, queue["backlog"], queue["leased"], queue["failed"],
             queue["oldest_wait_s"])
    if on_report is not None:
        on_report(report)


def _stop_on_signals(stop: threading.Event) -> Callable[[], None]:
    """SIGTERM and SIGINT set ``stop`` (in the main thread only; elsewhere nothing changes). Returns the undo."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    for sig in before:
        signal.signal(sig, lambda *_: stop.set())

    def restore() -> None:
        for sig, handler in before.items():
            signal.signal(sig, handler)

    return restore
