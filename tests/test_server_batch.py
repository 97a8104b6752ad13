"""POST /v1/batch: checked and authorized before the first write, a status per operation or all-or-nothing."""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.server import KeyRing, create_app

ALICE, ADMIN = "batch-alice-key-0001", "batch-admin-key-0001"


@pytest.fixture(params=["sqlite", "sqlite-background", "postgres"])
def client(request, tmp_path):
    """The server over each backend; on SQLite also with the background indexer on, as `lightmem serve` ships it
    (tests/conftest.py turns it off unless a test says so)."""
    location = request.getfixturevalue("pg_uri") if request.param == "postgres" else tmp_path / "store"
    background = request.param.endswith("-background")
    app = create_app(lambda: Memory.open(location, embedder=HashingEmbedder(64), selector=Stage1Selector(),
                                         background_index=background), KeyRing({ALICE: ["alice"], ADMIN: ["*"]}))
    with TestClient(app) as c:
        yield c


def _h(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def _texts(client, user: str) -> list[str]:
    return [i["text"] for i in client.get("/v1/memories", params={"user_id": user}, headers=_h(ADMIN)).json()["items"]]


def test_a_batch_answers_a_status_per_operation(client):
    first = client.post("/v1/memories", headers=_h(ALICE), json={"user_id": "alice", "messages": [
        {"speaker": "Alice", "text": "I live in Porto"}]}).json()["items"][0]
    r = client.post("/v1/batch", headers=_h(ALICE), json={"ops": [
        {"op": "add", "user_id": "alice", "messages": [{"speaker": "Alice", "text": "I adopted a dog named Rex"}]},
        {"op": "update", "user_id": "alice", "item_id": first["id"], "text": "I live in Lisbon"},
        {"op": "delete", "user_id": "alice", "item_id": "missing"},
    ]})
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert [(x["index"], x["status"]) for x in res] == [(0, "ok"), (1, "ok"), (2, "not_found")]
    assert res[0]["items"][0]["text"] == "Alice: I adopted a dog named Rex" and res[1]["item"]["text"] == "I live in Lisbon"
    assert _texts(client, "alice") == ["I live in Lisbon", "Alice: I adopted a dog named Rex"]


def test_a_bad_or_foreign_operation_writes_nothing(client):
    good = {"op": "add", "user_id": "alice", "messages": [{"speaker": "A", "text": "a fact"}]}
    r = client.post("/v1/batch", headers=_h(ALICE), json={"ops": [good, {"op": "add", "user_id": "alice", "messages": []}]})
    assert r.status_code == 422 and "ops.1" in r.json()["message"]
    r = client.post("/v1/batch", headers=_h(ALICE), json={"ops": [good, {"op": "delete", "user_id": "bob", "item_id": "x"}]})
    assert r.status_code == 403 and "ops[1]" in r.json()["detail"]
    deep: dict = {}
    for _ in range(40):
        deep = {"a": deep}
    r = client.post("/v1/batch", headers=_h(ALICE), json={"ops": [good, {"op": "update", "user_id": "alice",
                                                                           "item_id": "x", "metadata": deep}]})
    assert r.status_code == 422 and "ops[1] (update)" in r.json()["message"]
    r = client.post("/v1/batch", headers=_h(ALICE), json={"ops": [good] * 1001})
    assert r.status_code == 422
    assert _texts(client, "alice") == []


def test_a_batch_holds_at_most_the_turns_of_one_request(client):
    """One bound on what a request makes its worker do: a batch's turns and changed memories, summed over its
    operations, are capped at POST /v1/memories' turn cap (an atomic batch holds the worker until it commits).
    Over it: 422 naming the cap, nothing written; at it: accepted."""
    from lightmem.server.schemas import MAX_TURNS_PER_REQUEST

    half = MAX_TURNS_PER_REQUEST // 2
    adds = [{"op": "add", "user_id": "alice", "messages": [{"speaker": "A", "text": f"t{n}-{i}"} for i in range(half)]}
            for n in range(2)]
    for atomic in (False, True):
        r = client.post("/v1/batch", headers=_h(ALICE), json={"ops": [
            *adds, {"op": "delete", "user_id": "alice", "item_id": "x"}], "atomic": atomic})
        assert r.status_code == 422, r.text[:300]
        assert f"at most {MAX_TURNS_PER_REQUEST:,} turns" in r.json()["message"] and "split" in r.json()["message"]
        assert _texts(client, "alice") == []
    big = {"op": "add", "user_id": "alice", "messages": [{"speaker": "A", "text": f"b{i}"} for i in range(3 * half // 2)]}
    deletes = [{"op": "delete", "user_id": "alice", "item_id": f"x{i}"} for i in range(half // 2 + 1)]
    r = client.post("/v1/batch", headers=_h(ALICE), json={"ops": [big, *deletes]})  # a deletion counts as one
    assert r.status_code == 422 and f"ops[0..{len(deletes)}] hold {MAX_TURNS_PER_REQUEST + 1:,}" in r.json()["message"]
    r = client.post("/v1/batch", headers=_h(ALICE), json={"ops": [big, *deletes[1:]]})  # at the cap
    assert r.status_code == 200 and [x["status"] for x in r.json()["results"]][-2:] == ["not_found"] * 2
    r = client.post("/v1/batch", headers=_h(ALICE), json={"ops": adds[1:], "atomic": True})
    assert r.status_code == 200 and len(r.json()["results"][0]["items"]) == half


def test_an_atomic_batch_is_all_or_nothing(client):
    ops = [{"op": "add", "user_id": "alice", "messages": [{"speaker": "A", "text": "a fact"}]},
           {"op": "delete", "user_id": "alice", "item_id": "missing"}]
    r = client.post("/v1/batch", headers=_h(ALICE), json={"ops": ops, "atomic": True})
    assert r.status_code == 404 and "ops[1]" in r.json()["detail"] and "nothing" in r.json()["detail"]
    assert _texts(client, "alice") == []
    r = client.post("/v1/batch", headers=_h(ALICE), json={"ops": ops[:1], "atomic": True})
    assert r.status_code == 200 and r.json()["results"][0]["status"] == "ok"
    assert _texts(client, "alice") == ["A: a fact"]


def _search_while_the_batch_waits(client, atomic: bool, hold, wait: float) -> tuple[dict, dict, bool]:
    """Send a 4-add batch from a thread; ``hold(inside, release)`` stops it mid-way; then search from another
    thread and give it ``wait`` s. Returns the batch's answer, the search's and whether the search was answered."""
    import threading

    inside, release = threading.Event(), threading.Event()
    hold(inside, release)
    ops = [{"op": "add", "user_id": "alice", "messages": [{"speaker": "Alice", "text": f"op {i}"}]} for i in range(4)]
    answer: dict = {}
    searched: dict = {}
    writer = threading.Thread(target=lambda: answer.update(r=client.post("/v1/batch", headers=_h(ALICE),
                                                                             json={"ops": ops, "atomic": atomic})))
    reader = threading.Thread(target=lambda: searched.update(r=client.post(
        "/v1/search", headers=_h(ALICE), json={"query": "op", "user_id": "alice", "k": 10})))
    writer.start()
    try:
        assert inside.wait(10)
        reader.start()
        reader.join(wait)
        in_time = not reader.is_alive()
        mid = dict(searched)
    finally:
        release.set()
        writer.join(10)
    reader.join(10)
    assert answer["r"].status_code == 200 and [x["status"] for x in answer["r"].json()["results"]] == ["ok"] * 4
    assert searched["r"].status_code == 200 and len(_texts(client, "alice")) == 4
    return answer, mid, in_time


def test_a_search_goes_between_the_operations_of_a_batch(client, monkeypatch):
    """The server runs one Memory call at a time; a batch that is not atomic takes that turn per operation, so a
    search sent while a long batch writes is answered before the batch ends."""
    import threading

    import lightmem.server.app as app_module

    real_lock, real_run = client.app.state.memory_lock, app_module.run_batch
    batch = {"thread": None, "turns": 0}

    class Turns:  # the server's lock, which the batch's thread waits for before taking it a second time
        def __enter__(self):
            if threading.current_thread() is batch["thread"]:
                batch["turns"] += 1
                if batch["turns"] == 2:
                    batch["inside"].set()
                    assert batch["release"].wait(10)
            return real_lock.__enter__()

        def __exit__(self, *exc):
            return real_lock.__exit__(*exc)

    def run_batch(*args, **kwargs):  # the route's thread is the batch's while it runs
        batch["thread"] = threading.current_thread()
        try:
            return real_run(*args, **kwargs)
        finally:
            batch["thread"] = None

    def hold(inside, release):
        batch.update(inside=inside, release=release)
        monkeypatch.setattr(client.app.state, "memory_lock", Turns())
        monkeypatch.setattr(app_module, "run_batch", run_batch)

    _, mid, in_time = _search_while_the_batch_waits(client, False, hold, wait=10)
    assert in_time and mid["r"].status_code == 200  # answered mid-batch: the first add is committed, the rest not yet
    assert [h["text"] for h in mid["r"].json()["hits"]] == ["Alice: op 0"]
    assert batch["turns"] == 4  # the lock taken once per operation


def test_an_atomic_batch_holds_the_server_until_it_commits(client):
    memory = client.app.state.memory
    real = memory.add_turns

    def hold(inside, release):
        def add_turns(user_id, turns, context=(), **kw):
            if turns[0].text == "op 1":  # the second operation waits, inside the batch's transaction
                inside.set()
                assert release.wait(10)
            return real(user_id, turns, context, **kw)

        memory.add_turns = add_turns

    try:
        _, mid, in_time = _search_while_the_batch_waits(client, True, hold, wait=1)  # still waiting after 1 s
    finally:
        memory.add_turns = real
    assert not in_time and not mid  # the search waited for the whole batch
