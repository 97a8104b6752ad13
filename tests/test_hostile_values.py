"""Hostile values at every door get a 422 (``InvalidInputError`` in Python), never a 500 nor a dropped connection.

A lone surrogate (JSON's ``"\\ud800"``) in a timestamp made the 422's own message unencodable; in a metadata filter's
value, or a tag on PostgreSQL, it reached the driver. A ``?metadata=`` filter nested 1,200 deep overflowed
``json.loads``; a caller's ``{"members": 5}`` in an update's metadata broke the console's page of that memory. Each
body is sent as raw JSON text, since httpx refuses to encode a lone surrogate.
"""
from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from lightmem.errors import InvalidInputError
from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.server import KeyRing, create_app
from lightmem.stores import is_server

ADMIN = "admin-key-0000000003"
HEADERS = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}
LONE = "\ud800"


def _open(location: str) -> Memory:
    fast = {} if is_server(location) else {"synchronous": "NORMAL"}
    return Memory.open(location, embedder=HashingEmbedder(64), selector=Stage1Selector(), **fast)


@pytest.fixture(params=["sqlite", "postgres"])
def location(request, tmp_path) -> str:
    return request.getfixturevalue("pg_uri") if request.param == "postgres" else str(tmp_path / "store")


@pytest.fixture
def client(location):
    with TestClient(create_app(lambda: _open(location), KeyRing({ADMIN: ["*"]})), raise_server_exceptions=False) as c:
        r = c.post("/v1/memories", headers=HEADERS, json={"user_id": "alice", "messages": [
            {"speaker": "Alice", "text": f"note {i}", "metadata": {"topic": "sport" if i % 2 else "books"}}
            for i in range(4)]})
        assert r.status_code == 201, r.text
        yield c


def _send(client: TestClient, method: str, path: str, body: object = None):
    content = None if body is None else json.dumps(body)  # ASCII: "\ud800" travels as its JSON escape
    return client.request(method, path, content=content, headers=HEADERS)


def _refused(r, *says: str) -> str:
    """The answer is a readable 422 whose message names what is wrong."""
    assert r.status_code == 422, (r.status_code, r.text)
    message = r.json()["message"]
    assert all(s in message for s in says), message
    return message


def _message(timestamp: object) -> dict:
    return {"speaker": "Alice", "text": "hello", "timestamp": timestamp}


@pytest.mark.parametrize("timestamp, says", [(LONE, "lone surrogate"), (f"2023-05-08{LONE}", "lone surrogate"),
                                             ("2023-05-08\x00", "NUL"), ("2023-05-08" + " " * 300, "at most 256")])
def test_a_timestamp_no_store_can_keep_is_a_422_at_every_route(client, timestamp, says):
    """Before: a lone surrogate was a 500 (the 422's message repeated it) and a NUL was taken as a date over HTTP
    while MCP refused it."""
    routes = [("POST", "/v1/memories", {"user_id": "alice", "messages": [_message(timestamp)]}),
              ("POST", "/v1/batch", {"ops": [{"op": "add", "user_id": "alice", "messages": [_message(timestamp)]}]}),
              ("POST", "/v1/batch", {"atomic": True, "ops": [
                  {"op": "add", "user_id": "alice", "messages": [_message("2023-05-08")]},
                  {"op": "add", "user_id": "alice", "messages": [_message(timestamp)]}]}),
              ("PUT", "/v1/keys/k1?user_id=alice", {"text": "hello", "timestamp": timestamp}),
              ("POST", "/v1/search", {"user_id": "alice", "query": "note", "filters": {"time_from": timestamp}}),
              ("POST", "/v1/context", {"user_id": "alice", "query": "note", "filters": {"time_to": timestamp}})]
    for method, path, body in routes:
        _refused(_send(client, method, path, body), "timestamp", says)
    assert len(client.app.state.memory.get_all("alice")) == 4  # nothing refused was written


@pytest.mark.parametrize("filters, says", [
    ({"metadata": {"topic": LONE}}, "filters.metadata.topic"),
    ({"metadata": {"topic": {"$gt": f"a{LONE}"}}}, "filters.metadata.topic"),
    ({"metadata": {"topic": {}}}, "operator object is empty"),
    ({"tags": [LONE]}, "filters.tags[0]"),
])
def test_a_filter_a_store_cannot_run_is_a_422(client, filters, says):
    """Before: the surrogate reached the driver (500; PostgreSQL's for tags too), and ``{}`` matched every memory."""
    for path in ("/v1/search", "/v1/context"):
        _refused(_send(client, "POST", path, {"user_id": "alice", "query": "note", "filters": filters}), says)


@pytest.mark.parametrize("raw, says", [
    ('{"topic": "\\ud800"}', "lone surrogate"),
    ('{"topic": {}}', "operator object is empty"),
    ("[" * 1200 + "]" * 1200, "nested deeper"),
    ('{"a":' * 1200 + "1" + "}" * 1200, "nested deeper"),
    ('{"topic": ', "not JSON"),
])
def test_a_listing_s_metadata_query_is_checked_before_it_is_parsed(client, raw, says):
    """Before: a 500 for the surrogate (the driver) and the nesting (RecursionError in json.loads)."""
    _refused(client.get("/v1/memories", params={"user_id": "alice", "metadata": raw}, headers=HEADERS),
             "metadata", says)
    r = client.get("/ui/memories", params={"user": "alice", "meta": raw}, headers=HEADERS)  # the console's filter
    assert r.status_code == 422, r.status_code


def test_brackets_inside_a_filter_s_strings_are_not_nesting(client):
    spec = json.dumps({"topic": {"$ne": "[[[[[[[[[[{{{{{{{{{{\\\"]]"}})
    r = client.get("/v1/memories", params={"user_id": "alice", "metadata": spec}, headers=HEADERS)
    assert r.status_code == 200 and len(r.json()["items"]) == 4


def test_an_update_or_put_cannot_write_the_pipeline_s_own_keys_and_the_console_shows_the_memory(client):
    """Before: PATCH stored ``{"members": 5}`` (add leaves the pipeline's keys out) and /ui/memory answered 500
    reading it as an abstract's member list."""
    item = client.get("/v1/memories", params={"user_id": "alice"}, headers=HEADERS).json()["items"][0]
    r = _send(client, "PATCH", f"/v1/memories/{item['id']}?user_id=alice", {"metadata": {"members": 5, "x": 1}})
    assert r.status_code == 200 and r.json()["metadata"] == {"x": 1}
    assert client.get("/ui/memory", params={"user": "alice", "id": item["id"]}, headers=HEADERS).status_code == 200
    r = _send(client, "PUT", "/v1/keys/k1?user_id=alice", {"text": "hello", "metadata": {"members": 5, "keep": "z"}})
    assert r.status_code == 200 and r.json()["metadata"] == {"key": "k1"}
    assert client.get("/ui/memory", params={"user": "alice", "id": r.json()["id"]}, headers=HEADERS).status_code == 200
    r = _send(client, "POST", "/v1/batch", {"ops": [{"op": "update", "user_id": "alice", "item_id": item["id"],
                                                     "metadata": {"members": ["x"], "y": 2}}]})
    assert r.status_code == 200 and r.json()["results"][0]["item"]["metadata"] == {"y": 2}


def test_a_row_holding_members_of_another_shape_still_shows(client):
    """A row written before updates left the pipeline's keys alone: the console shows it, with no sources."""
    memory = client.app.state.memory
    item = memory.get_all("alice")[0]
    memory.store.update("alice", item.id, memory.clock(), metadata={"members": 5})  # as such a PATCH stored it
    assert memory.get(item.id, "alice").metadata == {"members": 5} and memory.sources(item.id, "alice") == []
    assert client.get("/ui/memory", params={"user": "alice", "id": item.id}, headers=HEADERS).status_code == 200


def test_an_update_keeps_the_pipeline_s_keys_it_wrote(tmp_path):
    with _open(str(tmp_path / "store")) as memory:
        [item] = memory.add("I adopted a dog named Rex", user_id="u")
        memory.store.update("u", item.id, memory.clock(), metadata={**item.metadata, "members": [], "keep": "abc"})
        updated = memory.update(item.id, "u", metadata={"members": 5, "keep": None, "topic": "pets"})
        assert updated.metadata == {"topic": "pets", "members": [], "keep": "abc"}


def test_python_refuses_the_same_values(tmp_path):
    with _open(str(tmp_path / "store")) as memory:
        for bad in (LONE, "2023-05-08\x00"):
            with pytest.raises(InvalidInputError, match="timestamp") as refused:
                memory.add({"text": "hello", "timestamp": bad}, user_id="u")
            str(refused.value).encode("utf-8")
            with pytest.raises(InvalidInputError, match="timestamp"):
                memory.put("k", "hello", "u", timestamp=bad)
            with pytest.raises(InvalidInputError, match="time_from"):
                memory.search("hello", "u", filters={"time_from": bad})
            with pytest.raises(InvalidInputError, match="timestamp"):
                memory.get_all("u", time_to=bad)
        with pytest.raises(InvalidInputError, match="lone surrogate"):
            memory.get_all("u", text=LONE)
        assert memory.get_all("u") == []


def test_no_error_message_holds_what_cannot_be_encoded():
    """Whatever a message quotes, printing, logging or answering it cannot fail."""
    error = InvalidInputError(f"unknown fields ['{LONE}']")
    assert str(error) == "unknown fields ['\\ud800']" and str(error).encode("utf-8")


def test_a_malformed_body_s_answer_escapes_what_it_names():
    """The 422 of a body FastAPI refuses lists each bad field's location, which may be a name from the body."""
    import asyncio

    from fastapi.exceptions import RequestValidationError

    from lightmem.server.app import _malformed

    exc = RequestValidationError([{"type": "extra_forbidden", "loc": ("body", LONE), "msg": f"Extra {LONE}",
                                   "input": LONE}])
    r = asyncio.run(_malformed(None, exc))
    body = json.loads(r.body)
    assert r.status_code == 422 and body["detail"][0]["loc"] == ["body", "\\ud800"] and "input" not in body["detail"][0]
    assert "body.\\ud800" in body["message"]


def test_a_path_identifier_with_a_line_break_is_taken_literally(client):
    """Starlette's ``path`` parameters matched ``.*``: ``/v1/users/alice%0A`` named alice, ``/v1/keys/a%0Ab`` was 404."""
    assert client.put("/v1/keys/abc?user_id=bob", headers=HEADERS, json={"text": "one"}).status_code == 200
    r = client.put("/v1/keys/abc%0A?user_id=bob", headers=HEADERS, json={"text": "two"})
    assert r.status_code == 200 and r.json()["metadata"]["key"] == "abc\n"
    assert client.put("/v1/keys/a%0Ab?user_id=bob", headers=HEADERS, json={"text": "three"}).status_code == 200
    assert client.get("/v1/keys/abc?user_id=bob", headers=HEADERS).json()["text"] == "one"
    assert client.get("/v1/keys/a%0Ab?user_id=bob", headers=HEADERS).json()["text"] == "three"
    r = client.delete("/v1/users/alice%0A", headers=HEADERS)
    assert r.status_code == 200 and r.json()["user_id"] == "alice\n"
    assert len(client.get("/v1/memories", headers=HEADERS, params={"user_id": "alice"}).json()["items"]) == 4
