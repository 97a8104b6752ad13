"""Storage: SQLite source of truth, FAISS vector index, BM25 lexical index, the MTM store."""
from lightmem.stores.mtm import MTMStore

__all__ = ["MTMStore"]
