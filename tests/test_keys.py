"""Memories addressed by the caller's key (a framework's put(namespace, key, value)): put, get_by_key, upsert,
delete; a key is unique per user, and a replaced text is erased."""
from __future__ import annotations

from pathlib import Path

import pytest

from lightmem import InvalidInputError, ItemNotFoundError, Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector


@pytest.fixture(params=["sqlite", "postgres"])
def location(request, tmp_path):
    return request.getfixturevalue("pg_uri") if request.param == "postgres" else str(tmp_path / "store")


def _open(location) -> Memory:
    return Memory.open(location, embedder=HashingEmbedder(64), selector=Stage1Selector(), background_index=True)


def test_put_get_upsert_and_delete_by_key(location):
    with _open(location) as m:
        first = m.put("prefs", "Ana likes green tea", "ana", metadata={"kind": "preference"})
        assert first.text == "Ana likes green tea" and first.metadata["key"] == "prefs"
        assert m.get_by_key("prefs", "ana").id == first.id
        again = m.put("prefs", "Ana likes black coffee now", "ana", metadata={"kind": "preference", "v": 2})
        assert again.id == first.id  # the key names one memory
        assert [i.text for i in m.get_all("ana")] == ["Ana likes black coffee now"]
        assert m.get_by_key("prefs", "ana").metadata["v"] == 2
        assert m.flush_index(timeout=30)
        assert m.search("coffee", "ana", k=1)[0].item.id == first.id
        m.put("prefs", "Bob likes juice", "bob")
        assert m.get_by_key("prefs", "bob").id != first.id  # the same key of another user is another memory
        assert m.get_by_key("prefs", "ana").text == "Ana likes black coffee now"
        assert sorted(m.users()) == ["ana", "bob"]
        m.delete(m.get_by_key("prefs", "ana").id, "ana")
        with pytest.raises(ItemNotFoundError):
            m.get_by_key("prefs", "ana")
        assert m.users() == ["bob"]  # nothing of ana is left
        with pytest.raises(InvalidInputError):
            m.put("", "text", "ana")


def test_a_replaced_text_is_erased_from_the_files(tmp_path):
    location = tmp_path / "store"
    with _open(location) as m:
        m.put("card", "my card number is 4111-9999-zz", "ana")
        assert m.flush_index(timeout=30)
        m.put("card", "I removed my card number", "ana")
        data = b"".join(p.read_bytes() for p in Path(location).iterdir() if p.is_file())
        assert b"4111-9999-zz" not in data


def test_keys_users_and_archive_over_http(tmp_path):
    from fastapi.testclient import TestClient

    from lightmem.server import KeyRing, create_app

    alice, admin = "keys-alice-000000001", "keys-admin-000000001"
    app = create_app(lambda: _open(tmp_path / "s"), KeyRing({alice: ["alice"], admin: ["*"]}))
    h, q = {"Authorization": f"Bearer {alice}"}, {"user_id": "alice"}
    with TestClient(app) as c:
        r = c.put("/v1/keys/prefs", params=q, headers=h, json={"text": "Alice likes tea", "metadata": {"n": 1}})
        assert r.status_code == 200 and r.json()["metadata"] == {"n": 1, "key": "prefs"}
        r = c.put("/v1/keys/prefs", params=q, headers=h, json={"text": "Alice likes coffee"})
        item = c.get("/v1/keys/prefs", params=q, headers=h).json()
        assert item["text"] == "Alice likes coffee" and item["id"] == r.json()["id"]
        assert c.get("/v1/keys/none", params=q, headers=h).status_code == 404
        assert c.get("/v1/keys/prefs", params={"user_id": "bob"}, headers=h).status_code == 403
        assert c.post(f"/v1/memories/{item['id']}/archive", params=q, headers=h).json()["archived"] is True
        assert c.get("/v1/memories", params=q, headers=h).json()["items"] == []
        assert c.post(f"/v1/memories/{item['id']}/restore", params=q, headers=h).json()["archived"] is False
        assert c.get("/v1/users", headers=h).status_code == 403
        assert c.get("/v1/users", headers={"Authorization": f"Bearer {admin}"}).json() == {"users": ["alice"]}


def test_updated_at_follows_changes(location):
    with _open(location) as m:
        m.clock = lambda: 1_700_000_000.0
        item = m.add("I live in Porto", user_id="ana")[0]
        assert m.get(item.id, "ana").updated_at == item.created_at
        m.clock = lambda: 1_700_000_500.0
        changed = m.update(item.id, "ana", text="I live in Lisbon")
        assert changed.updated_at == 1_700_000_500.0 == m.get(item.id, "ana").updated_at
        m.clock = lambda: 1_700_000_900.0
        assert m.archive(item.id, "ana").updated_at == 1_700_000_900.0
        assert m.get(item.id, "ana", include_archived=True).updated_at == 1_700_000_900.0
        assert m.get(item.id, "ana", include_archived=True).created_at == item.created_at
