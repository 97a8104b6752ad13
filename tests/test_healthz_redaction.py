"""``GET /healthz`` answers without a key, so it names no filesystem path: after the background indexer met a
full disk (whose message names the store's file), ``last_error`` says only the kind of error; the log keeps it whole."""
from __future__ import annotations

import logging
import sqlite3

from fastapi.testclient import TestClient

from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.server import KeyRing, create_app
from lightmem.stores.embedded.faults import translate

KEY = "admin-key-0000000000065"
AUTH = {"Authorization": f"Bearer {KEY}"}


def _sqlite_full() -> sqlite3.Error:
    """A real SQLITE_FULL, as SQLite raises it on a full disk (a database held to a few pages)."""
    con = sqlite3.connect(":memory:")
    con.execute("PRAGMA max_page_count = 3")
    con.execute("CREATE TABLE t (x BLOB)")
    try:
        while True:
            con.execute("INSERT INTO t VALUES (zeroblob(4096))")
    except sqlite3.Error as exc:
        return exc
    finally:
        con.close()


def test_healthz_shows_the_kind_of_an_indexer_error_not_the_store_path(tmp_path, caplog):
    store = tmp_path / "secret-place" / "store"
    app = create_app(lambda: Memory.open(store, embedder=HashingEmbedder(64), selector=Stage1Selector(),
                                         background_index=True), KeyRing({KEY: ["*"]}))
    with caplog.at_level(logging.ERROR, logger="lightmem"), TestClient(app) as client:
        memory = client.app.state.memory
        db = store / "lightmem.sqlite"
        # The vectors' write meets a full disk: the store's own error for it names the database file.
        # (Writing a vector rewrites its row in place, so capping the file's pages cannot provoke it here.)
        full = translate(_sqlite_full(), db, str(store))

        def set_vectors_on_a_full_disk(*args, **kwargs):
            raise full

        memory.store.set_vectors = set_vectors_on_a_full_disk
        r = client.post("/v1/memories", headers=AUTH,
                        json={"user_id": "ann", "messages": [{"speaker": "Ann", "text": "my locker is number 12"}]})
        assert r.status_code == 201
        memory.flush_index(timeout=60)  # the item is given up on after its tries: found by its words meanwhile
        error = memory.index_status()["last_error"]
        assert error is not None and str(db) in error, error  # the error names the path...
        health = client.get("/healthz")  # ...which the answer without a key does not
        del memory.store.set_vectors  # the disk has room again, for the close
    assert health.status_code == 200
    body = health.text
    assert str(tmp_path) not in body and "secret-place" not in body and "lightmem.sqlite" not in body, body
    assert health.json()["index"]["last_error"] == "StoreFullError"
    assert health.json()["index"]["failed"] == 1
    assert any(str(db) in r.getMessage() for r in caplog.records)  # the operator's log keeps the detail
