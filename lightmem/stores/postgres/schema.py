"""PostgreSQL as the source of truth: connection, schema (versioned), and the store's identity.

The tables mirror the SQLite store's (``embedded/tables.py``), with pgvector ``vector(dim)`` columns; the HNSW
index (cosine) on the items' embeddings exists once a store opened with ``index="hnsw"`` made it. Item
changes are logged per user by a trigger (``item_changes``) under a per-user version
(``item_versions``): a user's versions are handed out under that row's lock, so they commit in order
and a reader that saw version v misses nothing by reading the changes after v. The in-process BM25
view (``postgres.lexical``) stays fresh that way.

Needs PostgreSQL >= 14 and pgvector >= 0.5 (HNSW); with >= 0.8 dense search scans the index iteratively, so a
per-user filter never leaves a search short of its ``k``.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from lightmem.errors import StoreError, StoreFullError
from lightmem.stores.keys import TABLES as _FACT_TABLES

log = logging.getLogger(__name__)

SCHEMA_VERSION = 5
URI_SCHEMES = ("postgresql://", "postgres://")
_SCHEMA_LOCK = 0x6C6D0001  # advisory lock: one process creates or upgrades the schema, others wait
CYCLE_LOCK = 0x6C6D0002  # advisory lock: consolidation cycles commit one at a time, in cycle order
USER_LOCK_CLASS = 0x6C6D  # advisory lock (class, hash of user id): one writer per user at a time

# Version 2: every LTM node and edge belongs to a scope (the user id of a per-user graph, '' for the shared
# graph) and a node's key is unique within its scope. A version-1 graph was shared by every user: its rows
# go to the shared scope, kept as they were, read only by a Memory opened with LTMOptions(scope="shared").
_SCOPE_LTM = """
ALTER TABLE ltm_nodes ADD COLUMN IF NOT EXISTS scope TEXT NOT NULL DEFAULT '';
ALTER TABLE ltm_nodes DROP CONSTRAINT IF EXISTS ltm_nodes_key_key;
ALTER TABLE ltm_edges ADD COLUMN IF NOT EXISTS scope TEXT NOT NULL DEFAULT '';
"""

# Version 3: fact keys (``stores.keys``): an item's ``keys`` column, the fact tables (FACT_TABLES) and the change
# trigger, which now fires on a change of keys (made again by _TABLES).
_ADD_KEYS = "ALTER TABLE items ADD COLUMN IF NOT EXISTS keys TEXT NOT NULL DEFAULT ''"

# Version 4: an item may wait for its vector (written by the background indexer after ``add`` returns): the
# embedding is NULL until then, and a partial index lists the rows still waiting. Code older than this would read
# a NULL vector, so it may not open a version-4 store.
_DEFER_VECTORS = """
ALTER TABLE items ALTER COLUMN embedding DROP NOT NULL;
ALTER TABLE items ADD COLUMN IF NOT EXISTS updated_at DOUBLE PRECISION;
"""  # and when an item last changed (NULL, in rows from before: its created_at)

# Version 5: the embedding queue (``postgres.queue``): a job per item waiting for its vector, which any process
# (``lightmem worker``, a server's own indexer) claims with a lease. A trigger keeps it exact: an item written or
# changed without a vector gets a job in the same transaction, a vector stored removes it, a deleted item takes its
# job with it. ``consolidation_jobs``: a user whose offline consolidation is due, claimed the same way (one holder
# per user at a time). Code older than this would write items without jobs, so it may not open a version-5 store.
EMBED_CHANNEL = "lightmem_embed"  # NOTIFY channel: a job was queued (workers LISTEN and wake at once)
_QUEUE = """
CREATE TABLE IF NOT EXISTS embed_jobs (
  rid BIGINT PRIMARY KEY REFERENCES items (rid) ON DELETE CASCADE,
  user_id TEXT NOT NULL,
  enqueued_at DOUBLE PRECISION NOT NULL,
  lease_until DOUBLE PRECISION, holder TEXT,
  claims INTEGER NOT NULL DEFAULT 0, failures INTEGER NOT NULL DEFAULT 0, last_error TEXT
);
CREATE INDEX IF NOT EXISTS embed_jobs_by_user ON embed_jobs (user_id, enqueued_at);
-- Who cites a turn (a deletion keeps the turns another item cites), found without parsing every row's provenance.
CREATE INDEX IF NOT EXISTS items_cites ON items USING gin ((provenance::jsonb) jsonb_path_ops);
CREATE OR REPLACE FUNCTION lightmem_embed_job() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.embedding IS NULL THEN
    -- a new or changed text: queued, or queued again (a holder's lease ends: it embedded the old text)
    INSERT INTO embed_jobs AS j (rid, user_id, enqueued_at)
      VALUES (NEW.rid, NEW.user_id, extract(epoch FROM clock_timestamp()))
      ON CONFLICT (rid) DO UPDATE SET lease_until = NULL, holder = NULL, failures = 0, last_error = NULL;
    PERFORM pg_notify('lightmem_embed', '');
  ELSIF TG_OP = 'UPDATE' AND OLD.embedding IS NULL THEN
    DELETE FROM embed_jobs WHERE rid = NEW.rid;
  END IF;
  RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER items_embed_job
AFTER INSERT OR UPDATE OF embedding, text, keys ON items FOR EACH ROW EXECUTE FUNCTION lightmem_embed_job();
CREATE TABLE IF NOT EXISTS consolidation_jobs (
  user_id TEXT PRIMARY KEY, requested_at DOUBLE PRECISION NOT NULL,
  lease_until DOUBLE PRECISION, holder TEXT,
  claims INTEGER NOT NULL DEFAULT 0, failures INTEGER NOT NULL DEFAULT 0, last_error TEXT
);
"""
# Rows of a store from before version 5 that wait for their vector get their jobs.
_QUEUE_BACKFILL = """
INSERT INTO embed_jobs (rid, user_id, enqueued_at)
  SELECT rid, user_id, extract(epoch FROM clock_timestamp()) FROM items WHERE embedding IS NULL
  ON CONFLICT DO NOTHING
"""

FACT_TABLES = _FACT_TABLES.format(id="BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY", real="DOUBLE PRECISION")

_TABLES = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS turns (
  pk BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  user_id TEXT NOT NULL, turn_id TEXT NOT NULL, session_id TEXT, speaker TEXT NOT NULL,
  text TEXT NOT NULL, caption TEXT, timestamp DOUBLE PRECISION NOT NULL, metadata TEXT NOT NULL,
  created_at DOUBLE PRECISION NOT NULL,
  UNIQUE (user_id, turn_id)
);
CREATE TABLE IF NOT EXISTS items (
  rid BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  user_id TEXT NOT NULL, text TEXT NOT NULL, provenance TEXT NOT NULL,
  created_at DOUBLE PRECISION NOT NULL, event_time DOUBLE PRECISION NOT NULL, last_access DOUBLE PRECISION NOT NULL,
  access_count INTEGER NOT NULL DEFAULT 0, utility DOUBLE PRECISION NOT NULL DEFAULT 1.0,
  topic TEXT, entities TEXT NOT NULL DEFAULT '[]', tags TEXT[] NOT NULL DEFAULT '{}',
  kind TEXT NOT NULL DEFAULT 'episodic',
  valid_from DOUBLE PRECISION, valid_to DOUBLE PRECISION, superseded_by TEXT,
  archived BOOLEAN NOT NULL DEFAULT FALSE, n_tokens INTEGER NOT NULL DEFAULT 0,
  metadata TEXT NOT NULL DEFAULT '{}', embedding vector({dim}), keys TEXT NOT NULL DEFAULT '',
  updated_at DOUBLE PRECISION
);
CREATE INDEX IF NOT EXISTS items_by_user ON items (user_id, archived, rid);
CREATE INDEX IF NOT EXISTS items_unembedded ON items (rid) WHERE embedding IS NULL;
CREATE TABLE IF NOT EXISTS history (
  pk BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  item_id TEXT NOT NULL, user_id TEXT NOT NULL, event TEXT NOT NULL,
  old_text TEXT, new_text TEXT, at DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS history_by_item ON history (user_id, item_id);
CREATE TABLE IF NOT EXISTS pending (user_id TEXT NOT NULL, turn_id TEXT NOT NULL, PRIMARY KEY (user_id, turn_id));
CREATE TABLE IF NOT EXISTS consolidated (
  user_id TEXT NOT NULL, item_id TEXT NOT NULL, cycle INTEGER NOT NULL, access_seen INTEGER NOT NULL,
  at DOUBLE PRECISION NOT NULL, PRIMARY KEY (user_id, item_id)
);
CREATE TABLE IF NOT EXISTS item_versions (
  user_id TEXT PRIMARY KEY, version BIGINT NOT NULL, pruned_through BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS item_changes (user_id TEXT NOT NULL, version BIGINT NOT NULL, rid BIGINT NOT NULL);
CREATE INDEX IF NOT EXISTS item_changes_by_user ON item_changes (user_id, version);
CREATE OR REPLACE FUNCTION lightmem_item_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE uid TEXT; r BIGINT; v BIGINT;
BEGIN
  IF TG_OP = 'DELETE' THEN uid := OLD.user_id; r := OLD.rid; ELSE uid := NEW.user_id; r := NEW.rid; END IF;
  INSERT INTO item_versions AS iv (user_id, version) VALUES (uid, 1)
    ON CONFLICT (user_id) DO UPDATE SET version = iv.version + 1 RETURNING iv.version INTO v;
  INSERT INTO item_changes (user_id, version, rid) VALUES (uid, v, r);
  RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER items_changed
AFTER INSERT OR DELETE OR UPDATE OF text, embedding, archived, superseded_by, valid_to, event_time, kind, topic, entities,
  keys ON items FOR EACH ROW EXECUTE FUNCTION lightmem_item_changed();
CREATE TABLE IF NOT EXISTS ltm_nodes (
  id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, key TEXT NOT NULL, kind TEXT NOT NULL, text TEXT NOT NULL,
  facts TEXT NOT NULL DEFAULT '[]', confidence DOUBLE PRECISION NOT NULL, evidence INTEGER NOT NULL,
  first_seen DOUBLE PRECISION NOT NULL, last_seen DOUBLE PRECISION NOT NULL, last_cycle INTEGER NOT NULL,
  active BOOLEAN NOT NULL DEFAULT TRUE, embedding vector({dim}) NOT NULL, scope TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX IF NOT EXISTS ltm_nodes_scope_key ON ltm_nodes (scope, key);
CREATE TABLE IF NOT EXISTS ltm_edges (
  src BIGINT NOT NULL, dst BIGINT NOT NULL, type TEXT NOT NULL, label TEXT NOT NULL DEFAULT '',
  confidence DOUBLE PRECISION NOT NULL, evidence INTEGER NOT NULL, first_seen DOUBLE PRECISION NOT NULL,
  last_seen DOUBLE PRECISION NOT NULL, last_cycle INTEGER NOT NULL, active BOOLEAN NOT NULL DEFAULT TRUE,
  scope TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (src, dst, type)
);
CREATE INDEX IF NOT EXISTS ltm_edges_dst ON ltm_edges (dst);
CREATE INDEX IF NOT EXISTS ltm_edges_scope ON ltm_edges (scope);
CREATE TABLE IF NOT EXISTS ltm_cycles (cycle INTEGER PRIMARY KEY, at DOUBLE PRECISION NOT NULL, stats TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS ltm_sources (
  node BIGINT NOT NULL, user_id TEXT NOT NULL, fact TEXT NOT NULL, evidence INTEGER NOT NULL,
  PRIMARY KEY (node, user_id, fact)
);
CREATE INDEX IF NOT EXISTS ltm_sources_by_user ON ltm_sources (user_id);
CREATE TABLE IF NOT EXISTS ltm_edge_sources (
  src BIGINT NOT NULL, dst BIGINT NOT NULL, type TEXT NOT NULL, user_id TEXT NOT NULL, evidence INTEGER NOT NULL,
  PRIMARY KEY (src, dst, type, user_id)
);
CREATE INDEX IF NOT EXISTS ltm_edge_sources_by_user ON ltm_edge_sources (user_id);
"""


def is_uri(location: object) -> bool:
    """Whether a store location names a PostgreSQL database (``postgresql://...``)."""
    return isinstance(location, str) and location.startswith(URI_SCHEMES)


def redact(uri: str) -> str:
    """The URI without its password, for messages and logs."""
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", uri)


def _psycopg() -> Any:
    try:
        import pgvector.psycopg  # noqa: F401
        import psycopg
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        raise StoreError("a postgresql:// store needs psycopg, psycopg-pool and pgvector: "
                         "pip install 'lightmem-slm[postgres]'") from exc
    return psycopg


DISK_FULL = "53100"  # SQLSTATE disk_full (psycopg.errors.DiskFull)


@contextmanager
def named_faults(location: str) -> Iterator[None]:
    """Raise the server's "disk full" (SQLSTATE 53100) as ``StoreFullError``; the transaction was rolled back."""
    try:
        yield
    except Exception as exc:
        if getattr(exc, "sqlstate", None) == DISK_FULL:
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else "disk full"
            raise StoreFullError(
                f"the disk of the PostgreSQL server holding the lightmem store at {location} is full ({first_line}): "
                f"nothing of this write was stored, and everything stored before is intact. Free space on the "
                f"database server, then retry.") from exc
        raise


def connect(uri: str) -> Any:
    """An autocommit connection (writes open their own transactions) with pgvector's types registered.

    Raises:
        StoreError: the server cannot be reached, or pgvector is missing and cannot be created.
    """
    psycopg = _psycopg()
    from pgvector.psycopg import register_vector

    try:
        conn = psycopg.connect(uri, autocommit=True, connect_timeout=10)
    except psycopg.Error as exc:
        raise StoreError(f"cannot connect to {redact(uri)}: {exc}".strip()) from exc
    try:
        if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone() is None:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        register_vector(conn)
    except psycopg.Error as exc:
        conn.close()
        raise StoreError(f"{redact(uri)} has no pgvector extension and this role cannot create it ({exc}); "
                         "have an administrator run `CREATE EXTENSION vector;` in that database".strip()) from exc
    return conn


def pgvector_version(conn: Any) -> tuple[int, ...]:
    (v,), = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchall()
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


def ensure_schema(conn: Any, uri: str, dim: int, embedder: str) -> None:
    """Create or check the tables; record (or check) the store's dimension and embedder.

    Raises:
        StoreError: a newer schema, or vectors of another dimension / embedder.
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        version = 0
        if conn.execute("SELECT to_regclass('schema_version')").fetchone()[0] is not None:
            (version,), = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchall()
            if version > SCHEMA_VERSION:
                raise StoreError(f"{redact(uri)} has lightmem schema version {version}; this lightmem reads "
                                 f"{SCHEMA_VERSION}: upgrade lightmem")
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            _check_identity(uri, meta, dim, embedder)
        if 0 < version < 2:  # migrations from older versions go here, in order (then _TABLES adds what is new)
            conn.execute(_SCOPE_LTM)
        if 0 < version < 3:
            conn.execute(_ADD_KEYS)
        if 0 < version < 4:
            conn.execute(_DEFER_VECTORS)
        if version < SCHEMA_VERSION:
            conn.execute(_TABLES.replace("{dim}", str(int(dim))))
            conn.execute(FACT_TABLES)
            conn.execute(_QUEUE)
        if 0 < version < 5:
            conn.execute(_QUEUE_BACKFILL)
        conn.execute("INSERT INTO schema_version (version) VALUES (%s) ON CONFLICT DO NOTHING", (SCHEMA_VERSION,))
        conn.execute("INSERT INTO meta (key, value) VALUES ('dim', %s), ('embedder', %s) ON CONFLICT DO NOTHING",
                     (str(dim), embedder))


HNSW_INDEX = "items_embedding_hnsw"


def ensure_vector_index(conn: Any, location: str, hnsw: bool) -> None:
    """Make the items' HNSW index when ``hnsw`` and it is missing (a long build on a large table). An
    index left from an ``hnsw`` store is never dropped here: a ``flat`` store over it gets a warning,
    since every insert still pays for the index entry."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        exists = conn.execute("SELECT to_regclass(%s)", (HNSW_INDEX,)).fetchone()[0] is not None
        if hnsw and not exists:
            (n,), = conn.execute("SELECT COUNT(*) FROM items").fetchall()
            log.info("building the HNSW index of %s over %d items", location, n)
            conn.execute(f"CREATE INDEX {HNSW_INDEX} ON items USING hnsw (embedding vector_cosine_ops)")
    if exists and not hnsw:
        log.warning("%s has an HNSW index that this index=flat store does not use; every insert still updates it "
                    "(`DROP INDEX %s;` removes it, `index=hnsw` uses it)", location, HNSW_INDEX)


def _check_identity(uri: str, meta: dict[str, str], dim: int, embedder: str) -> None:
    stored_dim, stored = meta.get("dim"), meta.get("embedder")
    if stored_dim is None:
        return
    if int(stored_dim) != dim or (stored != embedder and "unknown" not in (stored, embedder)):
        raise StoreError(
            f"{redact(uri)} was built with embedder {stored!r} (dim {stored_dim}); this Memory uses {embedder!r} "
            f"(dim {dim}). Open it with the same encoder, or use another database."
        )


def stored_embedder(uri: str) -> str | None:
    """The embedder that wrote the store in this database, or None when it holds no store yet.

    Raises:
        StoreError: the server cannot be reached.
    """
    psycopg = _psycopg()
    try:
        with psycopg.connect(uri, autocommit=True, connect_timeout=10) as conn:
            if conn.execute("SELECT to_regclass('meta')").fetchone()[0] is None:
                return None
            row = conn.execute("SELECT value FROM meta WHERE key = 'embedder'").fetchone()
    except psycopg.Error as exc:
        raise StoreError(f"cannot read the store at {redact(uri)}: {exc}".strip()) from exc
    return row[0] if row else None
