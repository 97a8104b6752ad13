"""The server backend: PostgreSQL 16 with pgvector, shared by processes on several hosts (needs the
``postgres`` extra). ``store`` is the backend (``PostgresStore``, config ``store=postgres``);
``schema`` the versioned tables; ``conn`` the pool, retries and pipelining; ``lexical`` the per-user
BM25 view kept fresh from a change log; ``graph`` the LTM graph; ``offline`` the history log, item
inserts and the consolidation cycle's writes.
"""
