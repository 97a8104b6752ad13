"""Per-user in-process views of a store's rows, shared by both backends: ``vector`` (exact numpy or
FAISS HNSW), ``lexical`` (BM25), ``partition`` (one user's view and its filter metadata) and
``cache`` (the byte-bounded LRU of views).
"""
