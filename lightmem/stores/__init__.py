"""Storage: the store interface (``base``) and its embedded backend: SQLite source of truth,
FAISS vector index, BM25 lexical index (``MTMStore``)."""
from lightmem.stores.base import GraphStore, MemoryStore, OfflineChanges, OfflineCommit
from lightmem.stores.mtm import MTMStore

__all__ = ["GraphStore", "MemoryStore", "MTMStore", "OfflineChanges", "OfflineCommit"]
