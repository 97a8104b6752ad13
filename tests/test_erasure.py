"""Forget means forget: after an item deletion, a redacting update or a user deletion, the secret
text is in no file of an embedded store and in no row of a PostgreSQL store."""
from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.roles.selector import Stage1Selector
from lightmem.server import KeyRing, create_app

SECRET = "hunter2-7f3a9c"
KEY = "erasure-test-key-000001"


def _open(location: str) -> Memory:
    durability = {} if location.startswith("postgresql") else {"synchronous": "NORMAL"}
    return Memory.open(location, embedder=HashingEmbedder(64), selector=Stage1Selector(), **durability)


@pytest.fixture(params=["sqlite", "postgres"])
def location(request, tmp_path) -> str:
    return request.getfixturevalue("pg_uri") if request.param == "postgres" else str(tmp_path / "store")


def _holders(location: str, secret: str = SECRET) -> list[str]:
    """Where the secret can still be read: store files (SQLite: database, WAL, anything beside
    them) or tables with a row that holds it (PostgreSQL)."""
    if location.startswith("postgresql"):
        with psycopg.connect(location) as c:
            tables = [r[0] for r in c.execute("SELECT table_name FROM information_schema.tables "
                                              "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'")]
            return [t for t in tables
                    if c.execute(f'SELECT count(*) FROM "{t}" AS r WHERE r::text LIKE %s', (f"%{secret}%",)).fetchone()[0]]
    needle = secret.encode()
    return [p.name for p in Path(location).iterdir() if p.is_file() and needle in p.read_bytes()]


def test_the_secret_is_found_where_it_was_written(location):
    """The check itself: it finds the secret while the store holds it."""
    with _open(location) as m:
        m.add(f"my bank password is {SECRET}", user_id="alice")
        assert _holders(location)


def test_item_deletion_erases_the_text_its_history_and_its_source_turn(location):
    m = _open(location)
    try:
        keep = m.add("I adopted a dog named Rex", user_id="alice")[0]
        gone = m.add({"speaker": "Alice", "text": f"my bank password is {SECRET}", "id": "s1"}, user_id="alice")[0]
        m.update(gone.id, "alice", metadata={"tag": "sensitive"})  # history events that carry the text
        m.archive(gone.id, "alice")
        m.restore(gone.id, "alice")
        assert _holders(location)
        assert m.delete(gone.id, "alice") == {"items": 1, "turns": 1, "facts": 0}
        # the events stay, with no text; the source turn is gone; the other memory is untouched
        assert [(e.event, e.old_text, e.new_text) for e in m.history(gone.id, "alice")] == [
            ("ADD", None, None), ("UPDATE", None, None), ("ARCHIVE", None, None), ("RESTORE", None, None),
            ("DELETE", None, None)]
        assert [t.turn_id for t in m.store.turns("alice")] == [keep.provenance[0]]
        assert [i.id for i in m.get_all("alice", include_archived=True)] == [keep.id]
        assert m.search("password", "alice", k=5)[0].item.id == keep.id
        assert _holders(location) == []  # still open: the delete already emptied the write-ahead log
    finally:
        m.close()
    assert _holders(location) == []


def test_a_turn_cited_by_another_item_stays_until_that_item_goes(location):
    m = _open(location)
    try:
        first = m.add({"speaker": "Alice", "text": f"pin {SECRET}", "id": "s1"}, user_id="alice")[0]
        # a second memory written from the same turn (as a consolidation abstract would be)
        second = m.update(m.add("placeholder", user_id="alice")[0].id, "alice", provenance=["s1"])
        assert m.delete(first.id, "alice") == {"items": 1, "turns": 0, "facts": 0}
        assert "s1" in [t.turn_id for t in m.store.turns("alice")]
        assert m.delete(second.id, "alice") == {"items": 1, "turns": 1, "facts": 0}
        assert "s1" not in [t.turn_id for t in m.store.turns("alice")]
    finally:
        m.close()
    assert _holders(location) == []


def test_an_update_replaces_the_text_for_good_unless_history_is_asked_for(location):
    with _open(location) as m:
        kept = m.add("I live in Porto", user_id="alice")[0]
        m.update(kept.id, "alice", text="I live in Lisbon", keep_history=True)
        assert [(e.event, e.new_text) for e in m.history(kept.id, "alice")][-1] == ("UPDATE", "I live in Lisbon")
        assert m.history(kept.id, "alice")[-1].old_text == "user: I live in Porto"

        item = m.add(f"my bank password is {SECRET}", user_id="alice")[0]
        m.update(item.id, "alice", text="my bank password is [redacted]")
        assert [(e.event, e.old_text, e.new_text) for e in m.history(item.id, "alice")] == [
            ("ADD", None, None), ("UPDATE", None, None)]
        # the turn it was written from is the record of what was said: an update changes the memory,
        # deleting the memory drops the turn
        assert any(SECRET in t.text for t in m.store.turns("alice"))
        m.delete(item.id, "alice")
        assert _holders(location) == []


def test_user_deletion_leaves_no_trace(location):
    m = _open(location)
    try:
        m.add(f"my bank password is {SECRET}", user_id="alice")
        m.add("Bob likes tea", user_id="bob")
        m.delete_user("alice")
        assert _holders(location) == []
        assert [i.text for i in m.get_all("bob")] == ["user: Bob likes tea"]
    finally:
        m.close()
    assert _holders(location) == []


def test_http_post_patch_delete_then_history_holds_no_text(location):
    """The attack that used to work: redact with PATCH, DELETE, then read the history."""
    app = create_app(lambda: _open(location), KeyRing({KEY: ["alice"]}))
    h, q = {"Authorization": f"Bearer {KEY}"}, {"user_id": "alice"}
    with TestClient(app) as client:
        item = client.post("/v1/memories", headers=h, json={"user_id": "alice", "messages": [
            {"speaker": "Alice", "text": f"my bank password is {SECRET}"}]}).json()["items"][0]
        r = client.patch(f"/v1/memories/{item['id']}", params=q, headers=h, json={"text": "my bank password is [redacted]"})
        assert r.status_code == 200
        history = client.get(f"/v1/memories/{item['id']}/history", params=q, headers=h).json()["events"]
        assert SECRET not in str(history)
        r = client.delete(f"/v1/memories/{item['id']}", params=q, headers=h)
        assert r.status_code == 200 and r.json()["removed"] == {"items": 1, "turns": 1, "facts": 0}
        history = client.get(f"/v1/memories/{item['id']}/history", params=q, headers=h)
        assert history.status_code == 200 and [e["event"] for e in history.json()["events"]] == ["ADD", "UPDATE", "DELETE"]
        assert all(e["old_text"] is None and e["new_text"] is None for e in history.json()["events"])
        assert _holders(location) == []
