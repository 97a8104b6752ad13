"""Run the HTTP API under uvicorn, with one or more worker processes."""
from __future__ import annotations

import logging
import os
from contextlib import AbstractContextManager, nullcontext

from fastapi import FastAPI

from lightmem import tracing
from lightmem.errors import LightMemError
from lightmem.server.app import create_app
from lightmem.server.auth import KeyRing
from lightmem.server.settings import ENV, ServeSettings, open_memory
from lightmem.stores.postgres import schema as pg_schema

log = logging.getLogger(__name__)

# glibc's malloc gives each thread that contends for memory an arena of its own, up to 8 per core; a worker's
# request threads (uvicorn's threadpool: up to 40) and the encoder's threads each leave their arena holding its
# high-water mark. Two arenas bound what they keep; the requests are serialised on the worker's Memory lock, so
# they rarely contend for the allocator (docs/results/throughput.md, "Worker memory under load").
DEFAULT_MALLOC_ARENAS = 2
ARENAS_ENV = "LIGHTMEM_MALLOC_ARENAS"  # what ``serve`` chose, for its workers (0: glibc's default)
_M_ARENA_MAX = -8  # mallopt's parameter number in glibc's malloc.h


def limit_malloc_arenas(arenas: int | None = None) -> int | None:
    """Cap glibc's malloc arenas at ``arenas`` in this process and in the processes it starts.

    ``arenas`` None: ``$LIGHTMEM_MALLOC_ARENAS``, else ``DEFAULT_MALLOC_ARENAS``; 0 leaves glibc's default. A
    ``MALLOC_ARENA_MAX`` already in the environment wins (the operator's, or the one ``serve`` gave its workers:
    glibc read it when the process started). Elsewhere than glibc (macOS, musl) nothing is done.

    Returns:
        The cap in force, or None where glibc's default applies.
    """
    given = os.environ.get("MALLOC_ARENA_MAX", "")
    if given:
        return int(given) if given.isdigit() and int(given) > 0 else None
    if arenas is None:
        raw = os.environ.get(ARENAS_ENV, "")
        arenas = int(raw) if raw.isdigit() else DEFAULT_MALLOC_ARENAS
    if arenas <= 0:
        return None
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return None
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        if libc.mallopt(_M_ARENA_MAX, arenas) != 1:
            return None
    except (AttributeError, OSError, ValueError):  # no confstr name, no glibc, no mallopt
        return None
    os.environ["MALLOC_ARENA_MAX"] = str(arenas)  # worker processes (spawned) have glibc apply it from their start
    return arenas


def app_from_env() -> FastAPI:
    """The app of one worker, from the settings ``serve`` left in the environment (uvicorn's factory)."""
    limit_malloc_arenas()  # a worker started by ``serve`` has it already (MALLOC_ARENA_MAX); uvicorn run by hand not
    s = ServeSettings.from_env()

    def open_warm():
        memory = open_memory(s.store, s.encoder, s.selector, s.cache_mb, s.max_turn_chars, s.index_here)
        # The stemmer's import (NLTK, which imports SciPy and scikit-learn: ~100 MB and 1-3 s) happens here,
        # before the worker answers, not in its first request.
        from lightmem.text import warm

        warm(["memory"])
        return memory

    metrics = None
    if s.metrics_port is not None:
        from lightmem.server.metrics import ServerMetrics  # prometheus-client is imported only here

        metrics = ServerMetrics()
    if s.otel:
        tracing.export_otlp()
        tracing.enable()
    return create_app(open_warm, KeyRing.load(s.keys), s.max_body_bytes, metrics)


def serve(settings: ServeSettings, malloc_arenas: int | None = None) -> None:
    """Serve until interrupted. The keys file is checked here, before any worker starts.

    Args:
        settings: What to serve, where.
        malloc_arenas: glibc malloc arenas per process (None: ``DEFAULT_MALLOC_ARENAS``; 0: glibc's default,
            8 per core); see ``limit_malloc_arenas``.

    Raises:
        KeyFileError: the keys file is missing or malformed.
    """
    import uvicorn

    KeyRing.load(settings.keys)
    if not settings.index_here and not pg_schema.is_uri(settings.store):
        raise LightMemError("--no-index-here leaves embedding to `lightmem worker` processes, which drain a PostgreSQL "
                            "store's queue: serve a postgresql:// store, or drop --no-index-here")
    if malloc_arenas is not None:
        os.environ[ARENAS_ENV] = str(max(malloc_arenas, 0))
    arenas = limit_malloc_arenas(malloc_arenas)
    log.info("malloc arenas per process: %s", arenas or "glibc's default")
    os.environ[ENV] = settings.to_env()  # workers inherit the environment
    scrapes: AbstractContextManager = nullcontext()
    if settings.metrics_port is not None:  # the workers' metric files, and the port that answers from them
        from lightmem.server.metrics import exposed

        scrapes = exposed(settings.host, settings.metrics_port)
    with scrapes:
        uvicorn.run("lightmem.server.serve:app_from_env", factory=True, host=settings.host, port=settings.port,
                    workers=settings.workers, log_level="info")
