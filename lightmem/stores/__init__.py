"""Storage: the store interface (``base``), one way to open a store by location (``factory``), and
its two backends: ``embedded`` (SQLite, the default: ``SQLiteStore``) and ``postgres`` (PostgreSQL +
pgvector: ``postgres.store.PostgresStore``, imported on demand: it needs the ``postgres`` extra).
Both search through the per-user in-process ``views`` and share the row rules of ``rows``."""
from lightmem.stores.base import GraphStore, MemoryStore, OfflineChanges, OfflineCommit
from lightmem.stores.embedded.store import SQLiteStore
from lightmem.stores.factory import describe, is_server, open_store, stored_embedder

__all__ = ["GraphStore", "MemoryStore", "SQLiteStore", "OfflineChanges", "OfflineCommit", "describe", "is_server",
           "open_store", "stored_embedder"]
