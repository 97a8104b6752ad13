"""Metadata given with a message reaches its memories, comes back on every read, and filters searches and lists
(exact match and LangGraph's $eq $ne $gt $gte $lt $lte), alike on both backends."""
from __future__ import annotations

import uuid

import pytest

from lightmem import InvalidInputError, Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def memory(request, tmp_path_factory):
    """One store per backend for the module (the tests that write use users of their own)."""
    location, drop = tmp_path_factory.mktemp("filters") / "store", None
    if request.param == "postgres":
        import psycopg

        server, name = request.getfixturevalue("pg_server"), f"t_metadata_filters_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(server.get_uri(), autocommit=True) as c:
            c.execute(f"CREATE DATABASE {name} TEMPLATE lightmem_template")
        location, drop = server.get_uri(name), (server, name)
    m = Memory.open(location, embedder=HashingEmbedder(64), selector=Stage1Selector(), background_index=False)
    notes = [("I run on Mondays", {"topic": "sport", "rank": 1, "done": True}),
             ("I swim on Tuesdays", {"topic": "sport", "rank": 5, "done": False}),
             ("I read on Wednesdays", {"topic": "books", "rank": 3, "nested": {"level": "b"}}),
             ("I cook on Thursdays", {})]
    for text, meta in notes:
        m.add({"speaker": "ana", "text": text, "metadata": meta}, user_id="ana")
    m.add({"speaker": "bob", "text": "I run on Mondays too", "metadata": {"topic": "sport"}}, user_id="bob")
    yield m
    m.close()
    if drop is not None:
        import psycopg

        with psycopg.connect(drop[0].get_uri(), autocommit=True) as c:
            c.execute(f"DROP DATABASE {drop[1]} WITH (FORCE)")


def _texts(items) -> list[str]:
    return [getattr(i, "item", i).text.split(": ", 1)[1] for i in items]


@pytest.mark.parametrize("spec, expected", [
    ({"topic": "sport"}, ["I run on Mondays", "I swim on Tuesdays"]),
    ({"topic": {"$ne": "sport"}}, ["I read on Wednesdays", "I cook on Thursdays"]),
    ({"rank": {"$gte": 3}}, ["I swim on Tuesdays", "I read on Wednesdays"]),
    ({"rank": {"$gt": 1, "$lt": 5}}, ["I read on Wednesdays"]),
    ({"rank": {"$lte": 1}}, ["I run on Mondays"]),
    ({"done": True}, ["I run on Mondays"]),
    ({"done": False}, ["I swim on Tuesdays"]),
    ({"nested.level": "b"}, ["I read on Wednesdays"]),
    ({"topic": None}, ["I cook on Thursdays"]),
    ({"topic": "sport", "rank": {"$gt": 2}}, ["I swim on Tuesdays"]),
    ({"rank": {"$gt": "a"}}, []),  # a number is never ordered against a string
])
def test_lists_and_searches_filter_on_metadata(memory, spec, expected):
    assert _texts(memory.get_all("ana", metadata=spec)) == expected
    hits = memory.search("on days", "ana", k=10, filters={"metadata": spec})
    assert sorted(_texts(hits)) == sorted(expected)
    ctx = memory.build_context("What do I do?", "ana", filters={"metadata": spec}, budget=400)
    assert sorted(_texts(ctx.memories)) == sorted(expected)


def test_metadata_comes_back_and_stays_with_its_user(memory):
    [item] = memory.get_all("ana", metadata={"nested.level": "b"})
    assert item.metadata["nested"] == {"level": "b"} and item.metadata["topic"] == "books"
    assert memory.get(item.id, "ana").metadata["rank"] == 3
    assert _texts(memory.get_all("bob", metadata={"topic": "sport"})) == ["I run on Mondays too"]


def test_a_filtered_search_returns_k_when_that_many_match(memory):
    memory.add([{"speaker": "cat", "text": "I run on Mondays", "metadata": {"topic": "sport"}},
                {"speaker": "cat", "text": "I swim on Tuesdays", "metadata": {"topic": "sport"}}], user_id="cat")
    for i in range(30):
        memory.add({"speaker": "cat", "text": f"I run on Mondays, lap {i}", "metadata": {"topic": "noise"}}, user_id="cat")
    hits = memory.search("run Mondays lap", "cat", k=2, filters={"metadata": {"topic": "sport"}})
    assert sorted(_texts(hits)) == ["I run on Mondays", "I swim on Tuesdays"]  # not cut to nothing by the 30 laps


@pytest.mark.parametrize("spec, says", [
    ({"a b": 1}, "not a field name"), ({"a": {"$in": [1]}}, "unknown operator"), ({"a": [1]}, "compare with"),
    ({"a": {"$gt": None}}, "orders numbers and strings"), ({"a": float("nan")}, "compare with"), ("topic", "must be an object"),
    ({"topic": {}}, "operator object is empty"),  # no condition: it matched every memory
    ({"topic": "\ud800"}, "lone surrogate"), ({"topic": {"$ne": "a\udfffb"}}, "lone surrogate"),  # no driver encodes it
    ({"topic": "sp\x00rt"}, "NUL"),
])
def test_bad_filters_are_refused(memory, spec, says):
    with pytest.raises(InvalidInputError, match=says) as refused:
        memory.get_all("ana", metadata=spec)
    str(refused.value).encode("utf-8")  # the message never repeats what cannot be encoded
    with pytest.raises(InvalidInputError, match=says):
        memory.search("x", "ana", filters={"metadata": spec})
    with pytest.raises(InvalidInputError, match=says):
        memory.build_context("x", "ana", filters={"metadata": spec}, budget=300)


@pytest.mark.parametrize("tags", [["\ud800"], ["ok", "a\x00b"]])
def test_tags_a_store_cannot_search_with_are_refused(memory, tags):
    """A lone surrogate in a tag reached PostgreSQL's driver (UnicodeEncodeError) and SQLite's silently."""
    with pytest.raises(InvalidInputError, match=r"filters\.tags\[\d\]"):
        memory.search("x", "ana", filters={"tags": tags})


def test_a_dotted_field_names_object_fields_never_array_elements_on_both_backends(memory):
    """``arr.0`` matched an array's first element on PostgreSQL (``#>``) and not on SQLite (``$.arr.0``): now it
    is the field "0" of an object on both."""
    memory.add({"speaker": "eve", "text": "a list", "metadata": {"arr": ["x", {"n": 1}], "obj": {"0": "y", "n": 4}}},
               user_id="eve")
    assert memory.get_all("eve", metadata={"arr.0": "x"}) == []
    assert memory.get_all("eve", metadata={"arr.1.n": 1}) == []
    assert memory.get_all("eve", metadata={"arr.0": {"$gte": "a"}}) == []
    assert memory.search("a list", "eve", filters={"metadata": {"arr.0": "x"}}) == []
    assert _texts(memory.get_all("eve", metadata={"arr.0": None})) == ["a list"]  # no such field: it reads as null
    assert _texts(memory.get_all("eve", metadata={"arr.0": {"$ne": "x"}})) == ["a list"]
    assert _texts(memory.get_all("eve", metadata={"obj.0": "y"})) == ["a list"]
    assert _texts(memory.get_all("eve", metadata={"obj.n": {"$gt": 3, "$lte": 4}})) == ["a list"]
    assert _texts(memory.search("a list", "eve", filters={"metadata": {"obj.0": "y"}})) == ["a list"]


def test_system_keys_of_a_turn_do_not_reach_the_memory(memory):
    [item] = memory.add({"speaker": "dan", "text": "hello", "metadata": {"keep": "9999", "excerpt": True, "x": 1}},
                        user_id="dan")
    assert "keep" not in item.metadata and "excerpt" not in item.metadata and item.metadata["x"] == 1
