"""POST /v1/batch: checked and authorized before the first write, a status per operation or all-or-nothing."""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.server import KeyRing, create_app

ALICE, ADMIN = "batch-alice-key-0001", "batch-admin-key-0001"


@pytest.fixture(params=["sqlite", "postgres"])
def client(request, tmp_path):
    location = request.getfixturevalue("pg_uri") if request.param == "postgres" else tmp_path / "store"
    app = create_app(lambda: Memory.open(location, embedder=HashingEmbedder(64), selector=Stage1Selector()),
                     KeyRing({ALICE: ["alice"], ADMIN: ["*"]}))
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


def test_an_atomic_batch_is_all_or_nothing(client):
    ops = [{"op": "add", "user_id": "alice", "messages": [{"speaker": "A", "text": "a fact"}]},
           {"op": "delete", "user_id": "alice", "item_id": "missing"}]
    r = client.post("/v1/batch", headers=_h(ALICE), json={"ops": ops, "atomic": True})
    assert r.status_code == 404 and "ops[1]" in r.json()["detail"] and "nothing" in r.json()["detail"]
    assert _texts(client, "alice") == []
    r = client.post("/v1/batch", headers=_h(ALICE), json={"ops": ops[:1], "atomic": True})
    assert r.status_code == 200 and r.json()["results"][0]["status"] == "ok"
    assert _texts(client, "alice") == ["A: a fact"]
