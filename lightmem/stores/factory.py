"""One way to open a store from a location: a folder or ``.sqlite`` file (the embedded store) or a
``postgresql://`` URI (the server store). The CLI, ``lightmem serve`` and ``Memory.open`` go through
here; a Hydra ``store`` node names its backend class as ``_target_`` instead."""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from lightmem.stores.base import DEFAULT_CAPACITY, MemoryStore
from lightmem.stores.embedded import tables as sqlite
from lightmem.stores.postgres import schema as pg_schema


def is_server(location: str | Path) -> bool:
    """Whether ``location`` names a PostgreSQL database (``postgresql://...``) rather than a folder or file."""
    return pg_schema.is_uri(location)


def describe(location: str | Path) -> str:
    """The location as shown to users (a URI without its password)."""
    return pg_schema.redact(location) if is_server(location) else str(location)


def open_store(location: str | Path, dim: int, embedder: str = "unknown", capacity: int = DEFAULT_CAPACITY,
               **options: Any) -> MemoryStore:
    """Open (or create) the store at ``location``: the backend is the one the location names (the CLI's and
    ``Memory.open``'s way; a Hydra ``store`` node names its class as ``_target_`` instead).

    Args:
        location: A store folder or ``.sqlite`` file, or ``postgresql://user:pw@host/db``.
        dim: Embedding dimension; must match an existing store's.
        embedder: Name of the embedder that made the vectors; checked against an existing store's.
        capacity: Active items per user before the least retained are archived.
        **options: The backend's own settings (``SQLiteStore``: index, faiss_device, synchronous...;
            ``PostgresStore``: index, ef_search, pool_size, statement_timeout...; both:
            retention_half_life_days, bm25_k1, bm25_b, cache_mb); a setting of the other backend is refused.
    """
    server = is_server(location)
    if server:
        from lightmem.stores.postgres.store import PostgresStore as backend
    else:
        from lightmem.stores.embedded.store import SQLiteStore as backend
    takes = set(inspect.signature(backend.__init__).parameters) - {"self", "path", "uri", "dim", "embedder", "capacity"}
    unknown = sorted(set(options) - takes)
    if unknown:
        kind = "a postgresql:// store" if server else "the embedded store"
        raise ValueError(f"{', '.join(unknown)}: not a setting of {kind} ({backend.__name__}); it takes {', '.join(sorted(takes))}")
    return backend(str(location) if server else location, dim=dim, embedder=embedder, capacity=capacity, **options)


def stored_embedder(location: str | Path) -> str | None:
    """The name of the embedder that wrote the store at ``location``, or None when there is no store yet."""
    if is_server(location):
        return pg_schema.stored_embedder(str(location))
    return sqlite.stored_embedder(location)
