"""The MCP server: typed tool schemas, one user per server, error results that never stop it, stdio."""
from __future__ import annotations

import asyncio
import sys

import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from lightmem.server.mcp_server import create_mcp_server

TOOLS = {"add_memory", "add_memories", "search_memories", "get_memories", "delete_memory", "build_context"}


def run(server_or_params, calls):
    """Connect a client (in memory, or over stdio) and make ``calls(client)``; returns its result."""

    async def go():
        async with Client(server_or_params) as client:
            return await calls(client)

    return asyncio.run(go())


@pytest.fixture
def server(memory):
    return create_mcp_server(memory, "alice")


def test_tools_have_typed_schemas(server):
    async def calls(c):
        return {t.name: t for t in (await c.list_tools()).tools}

    tools = run(server, calls)
    assert set(tools) == TOOLS
    add = tools["add_memory"].input_schema
    assert add["required"] == ["text"] and add["properties"]["text"]["type"] == "string"
    assert tools["search_memories"].input_schema["properties"]["k"]["type"] == "integer"
    assert tools["build_context"].input_schema["properties"]["stm"]["anyOf"][0]["type"] == "array"
    assert all(t.description and t.output_schema for t in tools.values())


def test_add_search_context_list_delete(server):
    async def calls(c):
        added = await c.call_tool("add_memory", {"text": "I adopted a puppy named Rex", "speaker": "Alice",
                                                 "timestamp": "2023-05-08T13:56:00"})
        await c.call_tool("add_memory", {"text": "We moved to Lisbon in May"})
        found = await c.call_tool("search_memories", {"query": "puppy Rex", "k": 1})
        ctx = await c.call_tool("build_context", {"query": "Where do we live?", "budget": 80, "stm": ["Bob: news?"]})
        both = await c.call_tool("build_context", {"query": "Rex Lisbon"})
        one = await c.call_tool("build_context", {"query": "Rex Lisbon", "k": 1})
        assert [len(r.structured_content["memory_ids"]) for r in (both, one)] == [2, 1]
        item_id = added.structured_content["items"][0]["id"]
        gone = await c.call_tool("delete_memory", {"memory_id": item_id})
        left = await c.call_tool("get_memories", {})
        return added, found, ctx, gone, left

    added, found, ctx, gone, left = run(server, calls)
    assert not any(r.is_error for r in (added, found, ctx, gone, left))
    hit = found.structured_content["hits"][0]
    assert hit["text"] == "Alice: I adopted a puppy named Rex" and hit["provenance"] and hit["score"] > 0
    assert "Lisbon" in ctx.structured_content["prompt"] and ctx.structured_content["n_tokens"] <= 80
    assert [i["text"] for i in left.structured_content["items"]] == ["user: We moved to Lisbon in May"]


def test_add_memories_writes_several_messages_in_one_call_or_none_of_them(memory, server):
    async def calls(c):
        added = await c.call_tool("add_memories", {"messages": [
            {"text": "I adopted a dog named Rex", "timestamp": "2023-05-08T13:56:00", "metadata": {"topic": "pets"}},
            {"text": "What breed is he?", "speaker": "assistant"},
            {"text": "A beagle", "speaker": "Alice", "timestamp": 1683554400}], "policy": "all"})  # every message
        refused = await c.call_tool("add_memories", {"messages": [{"text": "a fine message"}, {"text": "   "}]})
        hostile = await c.call_tool("add_memories", {"messages": [{"text": "fine"}, {"text": "bad\u0000 one"}]})
        empty = await c.call_tool("add_memories", {"messages": []})
        unknown = await c.call_tool("add_memories", {"messages": [{"text": "hi", "mood": "glad"}]})
        return added, refused, hostile, empty, unknown

    added, *bad = run(server, calls)
    assert not added.is_error
    items = added.structured_content["items"]
    assert [i["text"] for i in items] == ["user: I adopted a dog named Rex", "assistant: What breed is he?",
                                          "Alice: A beagle"]
    assert items[0]["metadata"]["topic"] == "pets" and items[2]["event_time"] == 1683554400
    assert all(r.is_error for r in bad)
    assert "messages[1].text" in bad[1].content[0].text and "NUL" in bad[1].content[0].text
    assert [i.text for i in memory.get_all("alice")] == [i["text"] for i in items]  # the refused calls wrote nothing


def test_tools_act_only_for_the_served_user(memory, server):
    bob = memory.add({"speaker": "Bob", "text": "Bob keeps bees on the roof"}, user_id="bob")[0]

    async def calls(c):
        await c.call_tool("add_memory", {"text": "Alice paints"})
        return (await c.call_tool("search_memories", {"query": "bees on the roof", "k": 50}),
                await c.call_tool("get_memories", {"limit": 1000}),
                await c.call_tool("delete_memory", {"memory_id": bob.id}))

    found, listed, deleted = run(server, calls)
    assert all(h["id"] != bob.id for h in found.structured_content["hits"])
    assert {i["user_id"] for i in listed.structured_content["items"]} == {"alice"}
    assert deleted.is_error and "no item" in deleted.content[0].text
    assert memory.get(bob.id, "bob").text == bob.text


@pytest.mark.parametrize("tool, args, says", [
    ("add_memory", {"text": ""}, "text"),
    ("add_memory", {"text": "   "}, "text"),
    ("add_memory", {}, "text"),
    ("add_memory", {"text": 5}, "text"),
    ("add_memory", {"text": "hi", "timestamp": "the day after never"}, "timestamp"),
    ("search_memories", {"query": "x", "k": 0}, "k"),
    ("search_memories", {"query": "x", "k": "many"}, "k"),
    ("build_context", {"query": "x", "budget": -1}, "budget"),
    ("build_context", {"query": "x", "k": 0}, "k"),
    ("delete_memory", {"memory_id": "no-such-id"}, "no item"),
    ("get_memories", {"offset": -3}, "offset"),
])
def test_bad_input_is_an_error_result_and_the_server_goes_on(server, tool, args, says):
    async def calls(c):
        return await c.call_tool(tool, args), await c.call_tool("add_memory", {"text": "still here"})

    bad, good = run(server, calls)
    assert bad.is_error and says in bad.content[0].text
    assert not good.is_error


@pytest.mark.parametrize("tool, args, says", [
    ("add_memory", {"text": "hi", "timestamp": True}, "timestamp"),
    ("add_memory", {"text": "hi", "timestamp": False}, "timestamp"),
    ("add_memory", {"text": "hi", "timestamp": 10**309}, "timestamp"),
    ("search_memories", {"query": "x", "k": True}, "k"),
    ("build_context", {"query": "x", "budget": True}, "budget"),
    ("build_context", {"query": "x", "budget": 10**400}, "budget"),
    ("get_memories", {"limit": True}, "limit"),
    ("get_memories", {"offset": 2**63}, "offset"),
])
def test_booleans_are_not_numbers_and_huge_numbers_are_refused(memory, server, tool, args, says):
    async def calls(c):
        return await c.call_tool(tool, args)

    bad = run(server, calls)
    assert bad.is_error and says in bad.content[0].text, bad.content[0].text
    assert memory.get_all("alice") == []  # no memory dated 1970


@pytest.mark.multiprocess
def test_stdio_round_trip(tmp_path):
    params = StdioServerParameters(command=sys.executable, args=[
        "-m", "lightmem.cli", "mcp", "--store", str(tmp_path / "store"), "--user", "alice",
        "--encoder", "hashing", "--selector", "none"])

    async def calls(c):
        await c.call_tool("add_memory", {"text": "I play the cello", "speaker": "Alice"})
        return await c.call_tool("search_memories", {"query": "cello"}), await c.call_tool("delete_memory", {"memory_id": "x"})

    found, bad = run(params, calls)
    assert found.structured_content["hits"][0]["text"] == "Alice: I play the cello"
    assert bad.is_error


def test_metadata_is_kept_and_filters_searches_and_lists(server):
    async def calls(c):
        await c.call_tool("add_memory", {"text": "I walk the dog at seven", "metadata": {"topic": "pets", "rank": 2}})
        await c.call_tool("add_memory", {"text": "I walk to work at eight", "metadata": {"topic": "work", "rank": 5}})
        found = await c.call_tool("search_memories", {"query": "walk", "k": 5, "metadata": {"topic": "pets"}})
        listed = await c.call_tool("get_memories", {"metadata": {"rank": {"$gte": 3}}})
        bad = await c.call_tool("get_memories", {"metadata": {"rank": {"$near": 3}}})
        return found, listed, bad

    found, listed, bad = run(server, calls)
    assert [h["text"] for h in found.structured_content["hits"]] == ["user: I walk the dog at seven"]
    assert found.structured_content["hits"][0]["metadata"]["topic"] == "pets"
    assert [i["text"] for i in listed.structured_content["items"]] == ["user: I walk to work at eight"]
    assert bad.is_error and "unknown operator" in bad.content[0].text
