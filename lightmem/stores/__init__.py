"""Storage: the store interface (``base``), one way to open a store by location (``factory``), and
its backends: the embedded SQLite + FAISS + BM25 store (``MTMStore``) and the PostgreSQL +
pgvector server store (``postgres.PostgresStore``, imported on demand: it needs the ``postgres`` extra)."""
from lightmem.stores.base import GraphStore, MemoryStore, OfflineChanges, OfflineCommit
from lightmem.stores.factory import describe, is_server, open_store, stored_embedder
from lightmem.stores.mtm import MTMStore

__all__ = ["GraphStore", "MemoryStore", "MTMStore", "OfflineChanges", "OfflineCommit", "describe", "is_server",
           "open_store", "stored_embedder"]
