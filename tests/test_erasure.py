"""Forget means forget: after an item deletion, a redacting update or a user deletion, the secret
text is in no file of an embedded store and in no row of a PostgreSQL store."""
from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.server import KeyRing, create_app

SECRET = "hunter2-7f3a9c"
KEY = "erasure-test-key-000001"


def _open(location: str) -> Memory:
    """The store as shipped: memories embedded by the background indexer after ``add`` returns; a folder named
    ``sync-store`` embeds before ``add`` returns instead (both are tested)."""
    durability = {} if location.startswith("postgresql") else {"synchronous": "NORMAL"}
    return Memory.open(location, embedder=HashingEmbedder(64), selector=Stage1Selector(),
                       background_index=not location.endswith("sync-store"), **durability)


@pytest.fixture(params=["sqlite", "sqlite-sync", "postgres"])
def location(request, tmp_path) -> str:
    if request.param == "postgres":
        return request.getfixturevalue("pg_uri")
    return str(tmp_path / ("sync-store" if request.param == "sqlite-sync" else "store"))


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
        assert m.flush_index(timeout=60)  # found by its vector: "password" is none of its words
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


def test_deleted_texts_leave_no_copy_once_the_background_indexer_wrote_their_vectors(tmp_path):
    """The shipped default: ``add`` stores rows without vectors and the indexer writes them later. A row that grew
    by its vector used to be moved by SQLite, and the page it was rebuilt into kept the row as it was (text, no
    vector) in its unused space, where no deletion reached it. Every memory deleted here must be gone from
    every file once the store is closed, whatever page its rows passed through."""
    import random

    rng = random.Random(7)
    words = "we went hiking on the trail with the dog and painted a sunrise at the lake".split()
    location = str(tmp_path / "store")
    m = Memory.open(location, embedder=HashingEmbedder(384), selector=Stage1Selector(), synchronous="NORMAL",
                    background_index=True)
    try:
        texts = [f"secret-{i:04d}-x " + " ".join(rng.choice(words) for _ in range(rng.randint(2, 60)))
                 for i in range(400)]
        items = m.add([{"speaker": "Alice", "text": t} for t in texts], user_id="alice")
        assert m.flush_index(timeout=120)
        assert m.index_status()["backlog"] == 0 and m.index_status()["indexed"] == 400  # every row got its vector
        doomed = items[::2]
        for item in doomed:
            m.delete(item.id, "alice")
    finally:
        m.close()
    data = b"".join(p.read_bytes() for p in Path(location).iterdir() if p.is_file())
    left = [i for i in range(0, 400, 2) if f"secret-{i:04d}-x".encode() in data]
    kept = [i for i in range(1, 400, 2) if f"secret-{i:04d}-x".encode() in data]
    assert left == []
    assert len(kept) == 200  # the check finds what the store still holds


def test_the_indexer_rewrites_a_row_in_place(tmp_path):
    """The cause, closed where it arises: a row written without its vector holds back the vector's bytes, and
    the indexer's UPDATE keeps the record's size, so SQLite overwrites the row where it is and leaves no copy of
    it anywhere (every live text is found exactly where it belongs: its item, its turn, its ADD event)."""
    import collections
    import re

    location = tmp_path / "store"
    with Memory.open(location, embedder=HashingEmbedder(384), selector=Stage1Selector(), synchronous="NORMAL",
                     background_index=True) as m:
        m.add([{"speaker": "A", "text": f"note-{i:04d}-y " + "word " * (i % 40)} for i in range(300)], user_id="a")
        assert m.flush_index(timeout=120)
    data = (location / "lightmem.sqlite").read_bytes()
    copies = collections.Counter(re.findall(rb"note-\d{4}-y", data))
    assert len(copies) == 300 and set(copies.values()) == {3}


def test_the_residue_check_finds_text_in_unused_space_only(tmp_path):
    from lightmem.stores.embedded import residue
    from lightmem.stores.embedded.tables import in_place_pad, record_bytes

    location = tmp_path / "store"
    with Memory.open(location, embedder=HashingEmbedder(64), background_index=False) as m:
        m.add("a text that stays in the store", user_id="a")
    db = location / "lightmem.sqlite"
    assert not residue.holds(db, ["user: a text that stays in the store"])  # live rows are not residue
    raw = bytearray(db.read_bytes())
    page = 4096 * (len(raw) // 4096 - 1)  # plant a copy in the unused space of a b-tree leaf page
    for start in range(0, len(raw), 4096):
        hdr = 100 if start == 0 else 0
        if raw[start + hdr] == 0x0D:
            n = int.from_bytes(raw[start + hdr + 3:start + hdr + 5], "big")
            gap = start + hdr + 8 + 2 * n
            if int.from_bytes(raw[start + hdr + 5:start + hdr + 7], "big") - (gap - start) > 64:
                page = gap
                break
    raw[page:page + 20] = b"user: a planted copy"
    db.write_bytes(bytes(raw))
    assert residue.holds(db, ["user: a planted copy"])
    # the pad keeps a record's size whatever the vector and metadata become
    pad, old, new = bytes(4 * 384 + 50), (b"", "{}"), (bytes(4 * 384), '{"keep": "1234"}')
    after = in_place_pad(pad, old, new)
    assert record_bytes(after) + sum(map(record_bytes, new)) == record_bytes(pad) + sum(map(record_bytes, old))


@pytest.mark.parametrize("atomic", [False, True])
def test_a_batch_of_deletions_erases_every_text(location, atomic):
    """Each memory a batch deletes is gone from every file when the call returns, atomic or not (on SQLite the
    batch's erasure runs once, at its end), and the memories it leaves are all there."""
    m = _open(location)
    try:
        secrets = [f"{SECRET}-{i:02d}" for i in range(12)]
        items = m.add([{"speaker": "Alice", "text": f"note {i}: my pin is {s}"} for i, s in enumerate(secrets)],
                      user_id="alice")
        kept = m.add("I adopted a dog named Rex", user_id="alice")[0]
        assert m.flush_index(timeout=60)
        out = m.batch([{"op": "delete", "item_id": i.id} for i in items], user_id="alice", atomic=atomic)
        assert [r["status"] for r in out] == ["ok"] * len(items)
        assert [s for s in secrets if _holders(location, s)] == []  # still open: the batch already erased them
        assert [i.id for i in m.get_all("alice", include_archived=True)] == [kept.id]
    finally:
        m.close()
    assert [s for s in secrets if _holders(location, s)] == []


@pytest.mark.parametrize("atomic", [False, True])
def test_a_batch_of_deletions_reads_the_file_once(tmp_path, monkeypatch, atomic):
    """SQLite: an erasure empties the write-ahead log and reads the whole database file for copies of the texts
    (``residue.holds``), a cost that grows with the file. A batch of N deletions does both once, not N times."""
    from lightmem.stores.embedded import residue

    location = str(tmp_path / "store")
    m = _open(location)
    try:
        items = m.add([f"note {i}: my pin is {SECRET}-{i:02d}" for i in range(20)], user_id="alice")
        assert m.flush_index(timeout=60)
        reads, checkpoints = [], []
        holds = residue.holds
        monkeypatch.setattr(residue, "holds", lambda path, texts: reads.append(list(texts)) or holds(path, texts))
        m.store.sql.connection.set_trace_callback(
            lambda sql: checkpoints.append(sql) if "wal_checkpoint" in sql else None)
        m.batch([{"op": "delete", "item_id": i.id} for i in items], user_id="alice", atomic=atomic)
        assert len(reads) == 1 and len(checkpoints) in (1, 2)  # a second after a rebuild (VACUUM), if one was needed
        assert all(any(f"{SECRET}-{i:02d}" in t for t in reads[0]) for i in range(20))  # every text looked for
        reads.clear()
        m.delete(m.add("one more", user_id="alice")[0].id, "alice")  # a single deletion: as before
        assert len(reads) == 1
    finally:
        m.store.sql.connection.set_trace_callback(None)
        m.close()
