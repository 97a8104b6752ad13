"""One bound for metadata (depth, keys, size) on every door, and reads that never fail on a row stored before it.

Issue 65: a PATCH with metadata nested 300 levels deep was stored and answered 500, and from then on every read of
the item (GET, the user's listing) answered 500, while Python's ``add`` took 900 levels and POST refused any metadata.
Now Python (``add``, ``update``) and HTTP (POST, PATCH) refuse metadata over ``MAX_METADATA_DEPTH`` levels,
``MAX_METADATA_KEYS`` keys or ``MAX_METADATA_BYTES`` of JSON before writing, with ``InvalidInputError`` / 422 naming
the limit; a row written before the bound is served with its over-deep part shown as ``METADATA_CUT``.
"""
from __future__ import annotations

import asyncio
import json

import pytest
from fastapi.testclient import TestClient

from lightmem.errors import InvalidInputError
from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.server import KeyRing, create_app
from lightmem.server.mcp_server import create_mcp_server
from lightmem.server.schemas import METADATA_CUT
from lightmem.stores import is_server
from lightmem.validation import (
    MAX_METADATA_BYTES,
    MAX_METADATA_DEPTH,
    MAX_METADATA_KEYS,
    check_metadata,
    json_depth,
)

KEY = "admin-key-0000000003"
HEADERS = {"Authorization": f"Bearer {KEY}"}
USER = "alice"


def deep(levels: int) -> dict:
    """An object nested ``levels`` deep: ``{"a": {"a": ... {"leaf": 1}}}``."""
    d: dict = {"leaf": 1}
    for _ in range(levels - 1):
        d = {"a": d}
    return d


def sized(n_bytes: int) -> dict:
    """An object exactly ``n_bytes`` long as compact JSON."""
    meta = {"blob": ""}
    meta["blob"] = "x" * (n_bytes - len(json.dumps(meta, separators=(",", ":"))))
    assert len(json.dumps(meta, separators=(",", ":")).encode()) == n_bytes
    return meta


def keyed(n_keys: int) -> dict:
    return {f"k{i}": i for i in range(n_keys)}


# (metadata over the bound, words its refusal must hold: the limit)
OVER = {
    "depth 300": (deep(300), ["nested", f"{MAX_METADATA_DEPTH} levels"]),
    "one level too deep": (deep(MAX_METADATA_DEPTH + 1), ["nested", f"{MAX_METADATA_DEPTH} levels"]),
    "too many keys": (keyed(MAX_METADATA_KEYS + 1), ["keys", f"{MAX_METADATA_KEYS:,}"]),
    "keys spread over nested objects": ({"a": keyed(MAX_METADATA_KEYS // 2), "b": keyed(MAX_METADATA_KEYS // 2)},
                                        ["keys", f"{MAX_METADATA_KEYS:,}"]),
    "one byte too large": (sized(MAX_METADATA_BYTES + 1), ["bytes", f"{MAX_METADATA_BYTES:,}"]),
}
WITHIN = {
    "the deepest": deep(MAX_METADATA_DEPTH),
    "the most keys": keyed(MAX_METADATA_KEYS),
    "the largest": sized(MAX_METADATA_BYTES),
    "arrays count as levels too": {"a": [[[{"b": [1, 2]}]]]},
}


def _open(location: str) -> Memory:
    fast = {} if is_server(location) else {"synchronous": "NORMAL"}
    return Memory.open(location, embedder=HashingEmbedder(64), background_index=False, **fast)


@pytest.fixture
def memory(tmp_path):
    with _open(str(tmp_path / "store")) as m:
        yield m


@pytest.fixture
def client(tmp_path):
    with TestClient(create_app(lambda: _open(str(tmp_path / "store")), KeyRing({KEY: ["*"]}))) as c:
        yield c


def _state(memory: Memory) -> tuple:
    return ([(i.id, i.text, i.metadata) for i in memory.get_all(USER, include_archived=True)], memory.stats().get(USER))


def _refusal_names(message: str, words: list[str]) -> None:
    assert "metadata" in message and all(w in message for w in words), message


# -- the check itself ----------------------------------------------------------------------------
def test_the_check_walks_without_recursion_and_stops_at_the_first_excess():
    far = deep(200_000)  # json.dumps and any recursive walk die long before this
    with pytest.raises(InvalidInputError, match=f"{MAX_METADATA_DEPTH} levels"):
        check_metadata(far)
    assert json_depth(far) == 200_000 and json_depth(far, limit=5) == 6
    loop: dict = {}
    loop["self"] = loop  # a cycle is no JSON: refused, not walked for ever
    with pytest.raises(InvalidInputError):
        check_metadata(loop)
    assert json_depth({}) == 1 and json_depth({"a": [1]}) == 2 and json_depth(3) == 0


@pytest.mark.parametrize("name", WITHIN)
def test_metadata_within_the_bound_passes_the_check(name):
    check_metadata(WITHIN[name])


# -- Python ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", OVER)
def test_python_add_refuses_metadata_over_the_bound_and_writes_nothing(memory, name):
    meta, words = OVER[name]
    memory.add("I adopted a dog named Rex", user_id=USER)
    before = _state(memory)
    with pytest.raises(InvalidInputError) as err:
        memory.add([{"speaker": "Alice", "text": "I moved to Lisbon"},
                    {"speaker": "Alice", "text": "I like tea", "metadata": meta}], user_id=USER)
    _refusal_names(str(err.value), words)
    assert "message 1" in str(err.value)
    assert _state(memory) == before


def test_python_add_counts_a_messages_extra_fields_as_metadata(memory):
    with pytest.raises(InvalidInputError, match="keys"):
        memory.add({"text": "hi there", **keyed(MAX_METADATA_KEYS), "metadata": {"one": "more"}}, user_id=USER)
    assert memory.get_all(USER) == []


@pytest.mark.parametrize("name", OVER)
def test_python_update_refuses_metadata_over_the_bound_and_changes_nothing(memory, name):
    meta, words = OVER[name]
    item = memory.add("I adopted a dog named Rex", user_id=USER)[0]
    memory.update(item.id, USER, metadata={"source": "chat"})
    before = _state(memory)
    with pytest.raises(InvalidInputError) as err:
        memory.update(item.id, USER, text="I adopted a cat named Rex", metadata=meta)
    _refusal_names(str(err.value), words)
    assert _state(memory) == before


@pytest.mark.parametrize("name", WITHIN)
def test_python_takes_metadata_within_the_bound(memory, name):
    meta = WITHIN[name]
    item = memory.add({"speaker": "Alice", "text": "I adopted a dog named Rex", "metadata": meta}, user_id=USER)[0]
    assert memory.update(item.id, USER, metadata=meta).metadata == meta
    assert memory.get(item.id, USER).metadata == meta


# -- HTTP ------------------------------------------------------------------------------------------
def _post(client: TestClient, meta: dict | None):
    msg = {"speaker": "Alice", "text": "I adopted a dog named Rex", **({"metadata": meta} if meta is not None else {})}
    return client.post("/v1/memories", headers=HEADERS, json={"user_id": USER, "messages": [msg]})


@pytest.mark.parametrize("name", OVER)
def test_http_post_and_patch_refuse_metadata_over_the_bound_with_422_and_write_nothing(client, name):
    meta, words = OVER[name]
    memory = client.app.state.memory
    item = _post(client, {"source": "chat"}).json()["items"][0]
    before = _state(memory)
    r = _post(client, meta)
    assert r.status_code == 422, r.text
    _refusal_names(r.json()["message"], words)
    assert _state(memory) == before
    r = client.patch(f"/v1/memories/{item['id']}", params={"user_id": USER}, headers=HEADERS,
                     json={"text": "I adopted a cat named Rex", "metadata": meta})
    assert r.status_code == 422, r.text
    _refusal_names(r.json()["message"], words)
    assert _state(memory) == before
    assert client.get(f"/v1/memories/{item['id']}", params={"user_id": USER}, headers=HEADERS).json() == item


@pytest.mark.parametrize("name", WITHIN)
def test_http_takes_metadata_within_the_bound(client, name):
    meta = WITHIN[name]
    r = _post(client, meta)
    assert r.status_code == 201, r.text
    item = r.json()["items"][0]
    r = client.patch(f"/v1/memories/{item['id']}", params={"user_id": USER}, headers=HEADERS, json={"metadata": meta})
    assert r.status_code == 200, r.text
    assert r.json()["metadata"] == meta
    assert client.get(f"/v1/memories/{item['id']}", params={"user_id": USER}, headers=HEADERS).json()["metadata"] == meta


def test_the_bound_is_in_the_openapi_schema(client):
    schema = client.get("/openapi.json").json()["components"]["schemas"]
    for model in ("Message", "UpdateRequest"):
        doc = schema[model]["properties"]["metadata"]["description"]
        assert f"{MAX_METADATA_DEPTH} levels" in doc and f"{MAX_METADATA_KEYS:,} keys" in doc, doc


# -- a row stored before the bound -----------------------------------------------------------------
@pytest.fixture(params=["sqlite", "postgres"])
def location(request, tmp_path) -> str:
    return request.getfixturevalue("pg_uri") if request.param == "postgres" else str(tmp_path / "store")


def test_a_row_stored_before_the_bound_is_served_by_every_read(location):
    with TestClient(create_app(lambda: _open(location), KeyRing({KEY: ["*"]}))) as client:
        memory = client.app.state.memory
        item = _post(client, None).json()["items"][0]
        # As an older lightmem wrote it: past the validation, straight into the store.
        stored = {"source": "old", "deep": deep(300)}
        memory.store.update(USER, item["id"], memory.clock(), metadata=stored)
        assert memory.get(item["id"], USER).metadata == stored  # Python returns the row as stored

        r = client.get(f"/v1/memories/{item['id']}", params={"user_id": USER}, headers=HEADERS)
        assert r.status_code == 200, r.text
        shown = r.json()["metadata"]
        assert shown["source"] == "old" and json_depth(shown) == MAX_METADATA_DEPTH
        assert METADATA_CUT in json.dumps(shown)
        r = client.get("/v1/memories", params={"user_id": USER}, headers=HEADERS)
        assert r.status_code == 200 and r.json()["items"][0]["metadata"] == shown, r.text
        r = client.post("/v1/search", headers=HEADERS, json={"user_id": USER, "query": "dog named Rex"})
        assert r.status_code == 200 and [h["id"] for h in r.json()["hits"]] == [item["id"]], r.text
        r = client.post("/v1/context", headers=HEADERS, json={"user_id": USER, "query": "dog named Rex", "budget": 300})
        assert r.status_code == 200 and r.json()["memory_ids"] == [item["id"]], r.text
        listed = asyncio.run(create_mcp_server(memory, USER).call_tool("get_memories", {}))
        assert METADATA_CUT in str(listed)
        assert memory.get(item["id"], USER).metadata == stored  # serving it changed nothing stored

        # The caller can replace it through the same door, within the bound.
        r = client.patch(f"/v1/memories/{item['id']}", params={"user_id": USER}, headers=HEADERS,
                         json={"metadata": {"source": "new"}})
        assert r.status_code == 200 and r.json()["metadata"] == {"source": "new"}, r.text
