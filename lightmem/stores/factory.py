"""One way to open a store from a location: a folder or ``.sqlite`` file (the embedded store) or a
``postgresql://`` URI (the server store). The CLI, ``lightmem serve``, ``Memory.open`` and the Hydra
builder all go through here."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from lightmem.stores.base import DEFAULT_CAPACITY, MemoryStore
from lightmem.stores.embedded import tables as sqlite
from lightmem.stores.embedded.snapshot import SNAPSHOT_MIN_ITEMS
from lightmem.stores.postgres import conn as pg_conn
from lightmem.stores.postgres import schema as pg_schema

# Settings of the embedded store that a server store does without: durability is the server's
# (synchronous_commit), so ``synchronous`` is dropped; vectors are searched in the database, so
# ``faiss_device`` may only be its default; it keeps no cross-process change log (``keep_changes``).
# Its views are rebuilt from indexed SQL, so it keeps no view snapshots (``snapshot_min_items``).
_EMBEDDED_ONLY = {"faiss_device": "cpu", "synchronous": None, "keep_changes": None,
                  "snapshot_min_items": SNAPSHOT_MIN_ITEMS}
# Settings of the server store's connections, which the embedded store has none of: left at their
# defaults (as every Hydra config passes them), they are dropped for it.
_SERVER_ONLY = {"pool_size": pg_conn.DEFAULT_POOL_SIZE, "statement_timeout": pg_conn.DEFAULT_STATEMENT_TIMEOUT_MS,
                "retries": pg_conn.RetryPolicy.retries}


def is_server(location: str | Path) -> bool:
    """Whether ``location`` names a PostgreSQL database (``postgresql://...``) rather than a folder or file."""
    return pg_schema.is_uri(location)


def describe(location: str | Path) -> str:
    """The location as shown to users (a URI without its password)."""
    return pg_schema.redact(location) if is_server(location) else str(location)


def open_store(location: str | Path, dim: int, embedder: str = "unknown", capacity: int = DEFAULT_CAPACITY,
               **options: Any) -> MemoryStore:
    """Open (or create) the store at ``location``.

    Args:
        location: A store folder or ``.sqlite`` file, or ``postgresql://user:pw@host/db``.
        dim: Embedding dimension; must match an existing store's.
        embedder: Name of the embedder that made the vectors; checked against an existing store's.
        capacity: Active items per user before the least retained are archived.
        **options: The backend's own settings (``MTMStore``: index, faiss_device, synchronous...;
            ``PostgresStore``: index, ef_search, pool_size, statement_timeout...; both:
            retention_half_life_days, bm25_k1, bm25_b, cache_mb).
    """
    if is_server(location):
        from lightmem.stores.postgres.store import PostgresStore

        for key, default in _EMBEDDED_ONLY.items():
            value = options.pop(key, default)
            if default is not None and value != default:
                raise ValueError(f"{key}={value!r} is a setting of the embedded store; a postgresql:// store has none")
        return PostgresStore(str(location), dim=dim, embedder=embedder, capacity=capacity, **options)
    for key, default in _SERVER_ONLY.items():
        if options.pop(key, default) != default:
            raise ValueError(f"{key} is a setting of a postgresql:// store; the embedded store has none")
    from lightmem.stores.embedded.store import MTMStore

    return MTMStore(location, dim=dim, embedder=embedder, capacity=capacity, **options)


def stored_embedder(location: str | Path) -> str | None:
    """The name of the embedder that wrote the store at ``location``, or None when there is no store yet."""
    if is_server(location):
        return pg_schema.stored_embedder(str(location))
    return sqlite.stored_embedder(location)
