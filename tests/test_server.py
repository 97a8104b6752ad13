"""The HTTP API: keys scoped to users, isolation between users, malformed and oversized bodies, a real uvicorn."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.server import KeyFileError, KeyRing, create_app
from lightmem.stores import is_server

ALICE, BOB, ADMIN, TEAM = "alice-key-0000000001", "bob-key-00000000002", "admin-key-0000000003", "team-key-00000000004"
KEYS = {ALICE: ["alice"], BOB: ["bob"], ADMIN: ["*"], TEAM: ["alice", "carol"]}
LIMIT = 4096


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _open(path) -> Memory:
    fast = {} if is_server(path) else {"synchronous": "NORMAL"}  # a server keeps its own durability
    return Memory.open(path, embedder=HashingEmbedder(64), selector=Stage1Selector(), **fast)


@pytest.fixture(params=["sqlite", "postgres"])
def location(request, tmp_path) -> str:
    """Where the server's store lives: a folder, or a fresh PostgreSQL database (conftest.py: pg_server)."""
    return request.getfixturevalue("pg_uri") if request.param == "postgres" else str(tmp_path / "store")


@pytest.fixture
def client(location):
    app = create_app(lambda: _open(location), KeyRing(KEYS), max_body_bytes=LIMIT)
    with TestClient(app) as c:  # runs the lifespan: the memory opens once, closes at exit
        yield c


def add(client, user: str, key: str, *texts: str) -> list[dict]:
    r = client.post("/v1/memories", headers=auth(key),
                    json={"user_id": user, "messages": [{"speaker": user.title(), "text": t} for t in texts]})
    assert r.status_code == 201, r.text
    return r.json()["items"]


def test_the_memory_opens_once_per_app_and_closes_at_shutdown(tmp_path):
    opened = []

    def factory() -> Memory:
        opened.append(_open(tmp_path / "store"))
        return opened[-1]

    with TestClient(create_app(factory, KeyRing(KEYS))) as c:
        for n in range(3):
            add(c, "alice", ALICE, f"note {n}")
            c.post("/v1/search", headers=auth(ALICE), json={"user_id": "alice", "query": "note"})
    assert len(opened) == 1
    with pytest.raises(sqlite3.ProgrammingError):  # closed: the SQLite connection refuses work
        opened[0].get_all("alice")


def test_what_the_memory_loaded_is_out_of_the_collectors_reach_once_the_app_starts(tmp_path):
    """The worker freezes what opening loaded (gc.freeze), so a full collection, which holds every request, no
    longer walks the models (the console inspector's slowest of 20 requests: ~220 ms -> ~50-90 ms)."""
    import gc

    seen = {}

    def factory() -> Memory:
        memory = _open(tmp_path / "store")
        seen["loaded"] = memory.retriever  # an object opening made: frozen once the app has started
        seen["frozen_before"] = gc.get_freeze_count()
        return memory

    with TestClient(create_app(factory, KeyRing(KEYS))) as c:
        assert gc.get_freeze_count() > seen["frozen_before"]
        assert c.get("/healthz").status_code == 200
    assert seen["loaded"] is not None


def test_a_slow_memory_call_does_not_block_the_server(client):
    memory = client.app.state.memory
    started, release = threading.Event(), threading.Event()
    search = memory.search

    def slow_search(*args, **kwargs):
        started.set()
        release.wait(10)
        return search(*args, **kwargs)

    memory.search = slow_search
    worker = threading.Thread(target=client.post, args=("/v1/search",),
                              kwargs={"headers": auth(ALICE), "json": {"user_id": "alice", "query": "x"}})
    worker.start()
    try:
        assert started.wait(10)
        t0 = time.monotonic()
        assert client.get("/healthz").status_code == 200  # the event loop is free while Memory works
        assert time.monotonic() - t0 < 2
    finally:
        release.set()
        worker.join()


def test_a_long_turn_is_analysed_before_the_worker_lock_so_other_users_are_answered(client, monkeypatch):
    import lightmem.server.app as app_module

    lock = client.app.state.memory_lock
    started, release, held = threading.Event(), threading.Event(), []
    warm = app_module.warm

    def slow_warm(texts):  # a long text's stemming, made slow
        held.append(lock.locked())
        started.set()
        release.wait(10)
        warm(texts)

    monkeypatch.setattr(app_module, "warm", slow_warm)
    body = {"user_id": "alice", "messages": [{"speaker": "Alice", "text": "a very long turn about ferns"}]}
    worker = threading.Thread(target=client.post, args=("/v1/memories",), kwargs={"headers": auth(ALICE), "json": body})
    worker.start()
    try:
        assert started.wait(10)
        r = client.post("/v1/search", headers=auth(BOB), json={"user_id": "bob", "query": "ferns"})  # bob is not held
        assert r.status_code == 200
    finally:
        release.set()
        worker.join()
    assert held == [False]
    assert [h["text"] for h in client.post("/v1/search", headers=auth(ALICE), json={"user_id": "alice", "query": "ferns"}).json()["hits"]]


def test_health_and_docs_need_no_key(client):
    assert client.get("/healthz").json()["status"] == "ok"
    assert client.get("/docs").status_code == 200
    assert "/v1/search" in client.get("/openapi.json").json()["paths"]


@pytest.mark.parametrize("headers", [{}, auth("not-a-key-at-all-xxxx"), auth(ALICE[:-1]), auth(ALICE + "x"),
                                     {"Authorization": ALICE}, {"Authorization": f"Basic {ALICE}"}])
def test_no_or_invalid_key_gets_401(client, headers):
    calls = [("post", "/v1/memories", {"json": {"user_id": "alice", "messages": [{"speaker": "A", "text": "hi"}]}}),
             ("post", "/v1/search", {"json": {"user_id": "alice", "query": "hi"}}),
             ("get", "/v1/memories", {"params": {"user_id": "alice"}}),
             ("delete", "/v1/users/alice", {})]
    for method, path, kw in calls:
        r = client.request(method, path, headers=headers, **kw)
        assert r.status_code == 401, (path, r.text)
        assert r.headers["www-authenticate"] == "Bearer"
    assert client.get("/v1/memories", params={"user_id": "alice"}, headers=auth(ADMIN)).json()["items"] == []


def test_a_key_acts_only_for_its_users(client):
    bob_item = add(client, "bob", BOB, "Bob keeps bees on the roof")[0]
    calls = [("post", "/v1/memories", {"json": {"user_id": "bob", "messages": [{"speaker": "X", "text": "planted"}]}}),
             ("post", "/v1/search", {"json": {"user_id": "bob", "query": "bees"}}),
             ("post", "/v1/context", {"json": {"user_id": "bob", "query": "bees"}}),
             ("get", "/v1/memories", {"params": {"user_id": "bob"}}),
             ("get", f"/v1/memories/{bob_item['id']}", {"params": {"user_id": "bob"}}),
             ("patch", f"/v1/memories/{bob_item['id']}", {"params": {"user_id": "bob"}, "json": {"text": "gone"}}),
             ("delete", f"/v1/memories/{bob_item['id']}", {"params": {"user_id": "bob"}}),
             ("delete", "/v1/users/bob", {})]
    for key in (ALICE, TEAM):
        for method, path, kw in calls:
            r = client.request(method, path, headers=auth(key), **kw)
            assert r.status_code == 403, (key, path, r.text)
    items = client.get("/v1/memories", params={"user_id": "bob"}, headers=auth(ADMIN)).json()["items"]
    assert [i["text"] for i in items] == ["Bob: Bob keeps bees on the roof"]  # nothing written, changed or deleted
    assert add(client, "carol", TEAM, "Carol sings")  # a key with several users acts for each
    assert add(client, "anyone", ADMIN, "admin writes for anyone")


@pytest.mark.parametrize("body, field", [
    ({"user_id": "alice"}, "messages"),
    ({"user_id": "alice", "messages": []}, "messages"),
    ({"user_id": "alice", "messages": [{"speaker": "A"}]}, "messages.0.text"),
    ({"user_id": "alice", "messages": [{"speaker": "A", "text": 3}]}, "messages.0.text"),
    ({"user_id": "alice", "messages": [{"speaker": "A", "text": "   "}]}, "messages.0.text"),
    ({"user_id": "alice", "messages": [{"speaker": "A", "text": "hi", "mood": "odd"}]}, "messages.0.mood"),
    ({"user_id": "  ", "messages": [{"speaker": "A", "text": "hi"}]}, "user_id"),
    ({"messages": [{"speaker": "A", "text": "hi"}]}, "user_id"),
    ({"user_id": "alice", "messages": [{"speaker": "A", "text": "hi", "timestamp": "the day after never"}]}, "timestamp"),
    ({"user_id": "alice", "messages": "hi"}, "messages"),
])
def test_malformed_add_gets_422_naming_the_field(client, body, field):
    r = client.post("/v1/memories", headers=auth(ALICE), json=body)
    assert r.status_code == 422, r.text
    assert field in r.json()["message"]
    assert client.get("/v1/memories", params={"user_id": "alice"}, headers=auth(ALICE)).json()["items"] == []


@pytest.mark.parametrize("path, body, field", [
    ("/v1/search", {"user_id": "alice", "query": ""}, "query"),
    ("/v1/search", {"user_id": "alice", "query": "x", "k": 0}, "k"),
    ("/v1/search", {"user_id": "alice", "query": "x", "filters": {"user_id": "bob"}}, "filters.user_id"),
    ("/v1/search", {"user_id": "alice", "query": "x", "filters": {"kinds": ["secret"]}}, "filters.kinds"),
    ("/v1/context", {"user_id": "alice", "query": "x", "budget": -5}, "budget"),
    ("/v1/context", {"user_id": "alice", "query": "x", "k": 0}, "k"),
])
def test_malformed_search_and_context_get_422(client, path, body, field):
    r = client.post(path, headers=auth(ALICE), json=body)
    assert r.status_code == 422 and field in r.json()["message"], r.text


BIG = "1" + "0" * 309  # an integer JSON number beyond float range (10**309)


@pytest.mark.parametrize("path, body, field", [
    ("/v1/memories", '{"user_id": "alice", "messages": [{"speaker": "A", "text": "hi", "timestamp": %s}]}' % BIG, "timestamp"),
    ("/v1/memories", '{"user_id": "alice", "messages": [{"speaker": "A", "text": "hi", "timestamp": -%s}]}' % BIG, "timestamp"),
    ("/v1/memories", '{"user_id": "alice", "messages": [{"speaker": "A", "text": "hi", "timestamp": 1e400}]}', "timestamp"),
    ("/v1/search", '{"user_id": "alice", "query": "x", "filters": {"time_from": 1%s}}' % ("0" * 400), "time_from"),
    ("/v1/search", '{"user_id": "alice", "query": "x", "filters": {"time_to": -1e400}}', "time_to"),
    ("/v1/search", '{"user_id": "alice", "query": "x", "budget": 1%s}' % ("0" * 400), "budget"),
    ("/v1/context", '{"user_id": "alice", "query": "x", "budget": 1%s}' % ("0" * 40), "budget"),
])
def test_numbers_beyond_float_range_get_422_not_500(client, path, body, field):
    r = client.post(path, headers={**auth(ALICE), "Content-Type": "application/json"}, content=body.encode())
    assert r.status_code == 422, r.text
    assert field in r.json()["message"] and len(r.text) < 1000  # the 400 digits are not echoed back
    assert client.get("/v1/memories", params={"user_id": "alice"}, headers=auth(ALICE)).json()["items"] == []


@pytest.mark.parametrize("path, body, field", [
    ("/v1/memories", {"user_id": "alice", "messages": [{"speaker": "A", "text": "hi", "timestamp": True}]}, "timestamp"),
    ("/v1/search", {"user_id": "alice", "query": "x", "filters": {"time_from": False}}, "time_from"),
    ("/v1/search", {"user_id": "alice", "query": "x", "k": True}, "k"),
    ("/v1/search", {"user_id": "alice", "query": "x", "budget": True}, "budget"),
    ("/v1/context", {"user_id": "alice", "query": "x", "budget": True}, "budget"),
])
def test_booleans_are_not_numbers(client, path, body, field):
    r = client.post(path, headers=auth(ALICE), json=body)
    assert r.status_code == 422 and field in r.json()["message"], r.text
    assert client.get("/v1/memories", params={"user_id": "alice"}, headers=auth(ALICE)).json()["items"] == []


def test_a_body_that_is_not_json_gets_422(client):
    r = client.post("/v1/search", headers={**auth(ALICE), "Content-Type": "application/json"}, content=b'{"user_id": ')
    assert r.status_code == 422 and "not valid JSON" in r.json()["message"]
    for body, why in ((b'{"user_id": "\xff"}', "not UTF-8 text"), (b"[" * 1500 + b"]" * 1500, "nested too deep")):
        r = client.post("/v1/search", headers={**auth(ALICE), "Content-Type": "application/json"}, content=body)
        assert r.status_code == 422 and r.json()["message"] == f"malformed request: the body is not valid JSON ({why})"


@pytest.mark.parametrize("body, field", [
    ({"user_id": "alice", "query": "x", "k": "5"}, "k"),
    ({"user_id": "alice", "query": "x", "budget": 2.5}, "budget"),
    ({"user_id": "alice", "query": "x", "filters": {"include_superseded": "yes"}}, "filters.include_superseded"),
    ({"user_id": "alice", "query": "x", "filters": {"tags": "solo"}}, "filters.tags"),
    ({"user_id": 5, "query": "x"}, "user_id"),
])
def test_a_value_of_another_json_type_is_refused_not_coerced(client, body, field):
    r = client.post("/v1/search", headers=auth(ALICE), json=body)
    assert r.status_code == 422 and field in r.json()["message"], r.text


def test_a_whole_number_written_as_a_float_is_a_count(client):
    add(client, "alice", ALICE, "I adopted a puppy named Rex")
    r = client.post("/v1/search", headers=auth(ALICE), json={"user_id": "alice", "query": "puppy", "k": 1.0, "budget": 500.0})
    assert r.status_code == 200 and len(r.json()["hits"]) == 1


def test_the_openapi_schema_documents_every_error_answer(client):
    paths = client.get("/openapi.json").json()["paths"]
    assert set(paths["/v1/memories"]["post"]["responses"]) == {"201", "401", "403", "413", "422"}
    assert set(paths["/v1/memories/{item_id}"]["patch"]["responses"]) == {"200", "401", "403", "404", "413", "422"}
    error = paths["/v1/search"]["post"]["responses"]["422"]["content"]["application/json"]["schema"]
    assert error == {"$ref": "#/components/schemas/ErrorOut"}


def test_oversized_body_gets_413_and_writes_nothing(client):
    big = {"user_id": "alice", "messages": [{"speaker": "A", "text": "x" * LIMIT}]}
    assert client.post("/v1/memories", headers=auth(ALICE), json=big).status_code == 413
    chunks = iter([json.dumps(big).encode()[i:i + 1000] for i in range(0, LIMIT + 100, 1000)])  # no Content-Length
    r = client.post("/v1/memories", headers={**auth(ALICE), "Content-Type": "application/json"}, content=chunks)
    assert r.status_code == 413
    assert client.get("/v1/memories", params={"user_id": "alice"}, headers=auth(ALICE)).json()["items"] == []


def test_own_memories_are_found_with_score_and_provenance(client):
    written = add(client, "alice", ALICE, "I adopted a puppy named Rex", "We moved to Lisbon in May")
    hits = client.post("/v1/search", headers=auth(ALICE), json={"user_id": "alice", "query": "puppy Rex", "k": 1}).json()["hits"]
    assert len(hits) == 1 and hits[0]["text"] == "Alice: I adopted a puppy named Rex"
    assert hits[0]["provenance"] == written[0]["provenance"] and hits[0]["score"] > 0
    listed = client.get("/v1/memories", params={"user_id": "alice"}, headers=auth(ALICE)).json()["items"]
    assert {i["id"] for i in listed} == {i["id"] for i in written}
    one = client.get(f"/v1/memories/{written[1]['id']}", params={"user_id": "alice"}, headers=auth(TEAM)).json()
    assert one["text"] == "Alice: We moved to Lisbon in May"
    ctx = client.post("/v1/context", headers=auth(ALICE),
                      json={"user_id": "alice", "query": "Where did we move?", "budget": 60, "stm": ["Bob: any news?"]}).json()
    assert "Lisbon" in ctx["prompt"] and "Bob: any news?" in ctx["prompt"] and 0 < ctx["n_tokens"] <= 60
    both = client.post("/v1/context", headers=auth(ALICE), json={"user_id": "alice", "query": "Rex Lisbon"}).json()
    one = client.post("/v1/context", headers=auth(ALICE), json={"user_id": "alice", "query": "Rex Lisbon", "k": 1}).json()
    assert len(both["memory_ids"]) == 2 and len(one["memory_ids"]) == 1  # k packs the best k, as Memory.build_context does


def test_an_acknowledged_write_is_committed(client, location):
    add(client, "alice", ALICE, "I run marathons")
    other = _open(location)  # a second connection sees only what was committed
    try:
        assert [i.text for i in other.get_all("alice")] == ["Alice: I run marathons"]
    finally:
        other.close()


def test_another_users_item_is_never_returned(client):
    alice_item = add(client, "alice", ALICE, "my bank PIN is 4321")[0]
    add(client, "bob", BOB, "Bob likes chess")
    for query in ("bank PIN 4321", alice_item["text"], alice_item["id"]):
        hits = client.post("/v1/search", headers=auth(BOB), json={"user_id": "bob", "query": query, "k": 50}).json()["hits"]
        assert all(h["id"] != alice_item["id"] and "PIN" not in h["text"] for h in hits)
    listed = client.get("/v1/memories", params={"user_id": "bob", "include_archived": True}, headers=auth(BOB)).json()["items"]
    assert [i["user_id"] for i in listed] == ["bob"]
    q = {"user_id": "bob"}
    for key in (BOB, ADMIN):  # even an admin acting for bob
        for r in (client.get(f"/v1/memories/{alice_item['id']}", params=q, headers=auth(key)),
                  client.patch(f"/v1/memories/{alice_item['id']}", params=q, headers=auth(key), json={"text": "hacked"}),
                  client.delete(f"/v1/memories/{alice_item['id']}", params=q, headers=auth(key)),
                  client.get(f"/v1/memories/{alice_item['id']}/history", params=q, headers=auth(key))):
            assert r.status_code == 404, r.text
            assert r.json()["detail"] == f"user 'bob' has no item '{alice_item['id']}'"  # as for an id that never existed
    assert client.get("/v1/memories/no-such-id", params=q, headers=auth(BOB)).status_code == 404
    kept = client.get(f"/v1/memories/{alice_item['id']}", params={"user_id": "alice"}, headers=auth(ALICE)).json()
    assert kept["text"] == alice_item["text"]


def test_delete_user_deletes_only_that_user(client):
    add(client, "alice", ALICE, "alice one", "alice two")
    bob_items = add(client, "bob", BOB, "bob one")
    r = client.delete("/v1/users/alice", headers=auth(ALICE))
    assert r.status_code == 200 and r.json()["removed"]["items"] == 2 and r.json()["removed"]["turns"] == 2
    assert client.get("/v1/memories", params={"user_id": "alice"}, headers=auth(ALICE)).json()["items"] == []
    assert [i["id"] for i in client.get("/v1/memories", params={"user_id": "bob"}, headers=auth(BOB)).json()["items"]] \
        == [i["id"] for i in bob_items]


def test_patch_then_history(client):
    item = add(client, "alice", ALICE, "I live in Porto")[0]
    r = client.patch(f"/v1/memories/{item['id']}", params={"user_id": "alice"}, headers=auth(ALICE),
                     json={"text": "Alice: I live in Lisbon now", "metadata": {"source": "correction"}, "keep_history": True})
    assert r.status_code == 200 and r.json()["text"] == "Alice: I live in Lisbon now"
    meta = r.json()["metadata"]
    assert {k: v for k, v in meta.items() if k != "keep"} == {"source": "correction"}
    assert "keep" not in meta or len(meta["keep"]) == 2 * len("Alice: I live in Lisbon now".split())  # scored again
    hits = client.post("/v1/search", headers=auth(ALICE), json={"user_id": "alice", "query": "Lisbon", "k": 1}).json()["hits"]
    assert hits[0]["id"] == item["id"]  # re-embedded and re-indexed
    events = client.get(f"/v1/memories/{item['id']}/history", params={"user_id": "alice"}, headers=auth(ALICE)).json()["events"]
    assert [(e["event"], e["old_text"], e["new_text"]) for e in events] == [
        ("ADD", None, "Alice: I live in Porto"), ("UPDATE", "Alice: I live in Porto", "Alice: I live in Lisbon now")]
    assert client.patch(f"/v1/memories/{item['id']}", params={"user_id": "alice"}, headers=auth(ALICE), json={}).status_code == 422
    assert client.delete(f"/v1/memories/{item['id']}", params={"user_id": "alice"}, headers=auth(ALICE)).json()["deleted"]
    assert client.get(f"/v1/memories/{item['id']}", params={"user_id": "alice"}, headers=auth(ALICE)).status_code == 404


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity"])
def test_patch_refuses_non_finite_metadata(client, number):
    item = add(client, "alice", ALICE, "I live in Porto")[0]
    r = client.patch(f"/v1/memories/{item['id']}", params={"user_id": "alice"},
                     headers={**auth(ALICE), "Content-Type": "application/json"},
                     content=('{"metadata": {"x": %s}, "text": "Alice: I live in Lisbon"}' % number).encode())
    assert r.status_code == 422, r.text
    assert "metadata" in r.json()["message"] and "finite numbers" in r.json()["message"]
    kept = client.get(f"/v1/memories/{item['id']}", params={"user_id": "alice"}, headers=auth(ALICE)).json()
    assert kept["metadata"] == item["metadata"] and kept["text"] == item["text"]


def test_key_files_are_checked():
    with pytest.raises(KeyFileError, match="shorter than 16"):
        KeyRing({"short": ["alice"]})
    with pytest.raises(KeyFileError, match="list of user ids"):
        KeyRing({ALICE: []})
    with pytest.raises(KeyFileError, match="no API keys"):
        KeyRing({})
    ring = KeyRing({ADMIN: "*", ALICE: ["alice"]})
    assert ring.identify(ADMIN).may_act_for("zed") and not ring.identify(ALICE).may_act_for("zed")
    assert ring.identify("") is None and ring.identify(ALICE.upper()) is None


@pytest.mark.parametrize("bad, why", [
    (" " + ALICE, "starts or ends with whitespace"),
    (ALICE + "\n", "starts or ends with whitespace"),
    ("alice key 000000001", "has whitespace (character 6)"),
    ("clé-secrète-0000000001", "has a non-ASCII character (character 3)"),
    ("alice-key-\x00000000001", "has a control character (character 11)"),
    ("alice-key-\x7f000000001", "has a control character (character 11)"),
    (12345678901234567890, "is not a string"),
])
def test_a_key_no_client_could_send_is_refused_by_position_never_shown(tmp_path, bad, why):
    with pytest.raises(KeyFileError) as err:
        KeyRing({ADMIN: ["*"], bad: ["alice"]})
    message = str(err.value)
    assert message.startswith(f"key #2 {why}") and str(bad).strip() not in message
    if isinstance(bad, str):  # the same from a keys file, which also says why
        assert "could never authenticate" in message
        (tmp_path / "keys.json").write_text(json.dumps({ADMIN: ["*"], bad: ["alice"]}), encoding="utf-8")
        with pytest.raises(KeyFileError, match=re.escape(f"key #2 {why}")):
            KeyRing.load(tmp_path / "keys.json")


def test_every_visible_ascii_character_can_be_in_a_key(tmp_path):
    key = "".join(chr(c) for c in range(0x21, 0x7F))  # ! to ~: what check_key allows
    app = create_app(lambda: _open(tmp_path / "store"), KeyRing({key: ["alice"]}))
    with TestClient(app) as c:
        assert c.get("/v1/memories", params={"user_id": "alice"}, headers=auth(key)).status_code == 200
        assert c.get("/v1/memories", params={"user_id": "alice"}, headers=auth(key[:-1])).status_code == 401


def test_serve_refuses_a_bad_keys_file_before_starting(tmp_path, capsys):
    from lightmem.cli import main

    (tmp_path / "keys.json").write_text("{not json")
    assert main(["serve", "--store", str(tmp_path / "s"), "--keys", str(tmp_path / "keys.json")]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert main(["serve", "--store", str(tmp_path / "s"), "--keys", str(tmp_path / "missing.json")]) == 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.multiprocess
def test_a_real_uvicorn_serves_requests(tmp_path, location):
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps(KEYS))
    port = _free_port()
    cmd = [sys.executable, "-m", "lightmem.cli", "serve", "--store", location, "--keys", str(keys),
           "--port", str(port), "--encoder", "hashing", "--selector", "none"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ})
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.2)
        secret_text = "my locker code is 918273"
        slow = 60  # a loaded CI machine: the first write may take seconds, not a failure of the server
        r = httpx.post(f"{base}/v1/memories", headers=auth(ALICE), timeout=slow,
                       json={"user_id": "alice", "messages": [{"speaker": "Alice", "text": secret_text}]})
        assert r.status_code == 201
        hits = httpx.post(f"{base}/v1/search", headers=auth(ALICE), timeout=slow,
                          json={"user_id": "alice", "query": "locker code"}).json()["hits"]
        assert hits[0]["text"] == f"Alice: {secret_text}"
        assert httpx.post(f"{base}/v1/search", headers=auth("wrong-key-000000000000"), json={}, timeout=slow).status_code == 401
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert '"POST /v1/memories HTTP/1.1" 201' in out  # the access log is on
    assert ALICE not in out and "wrong-key" not in out and "918273" not in out  # neither keys nor memory text are logged
