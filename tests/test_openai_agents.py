"""lightmem's OpenAI Agents SDK adapter, run by the SDK's own ``Runner`` with a scripted model (no network, no LLM).

The SDK and the test helpers that need it (``ScriptedModel``, a minimal ``Model`` that records what it is sent) are in
``_openai_agents_kit.py``, which each test imports when it runs: collecting this file imports nothing of the SDK.
"""
from __future__ import annotations

import asyncio
import importlib.util
import json

import pytest

from lightmem import AsyncMemory

pytestmark = pytest.mark.skipif(importlib.util.find_spec("agents") is None,
                                reason="the openai-agents extra: pip install 'lightmem-slm[openai-agents]'")

FACT = "I live in Lisbon and my dog is called Rex."
QUESTION = "Where do I live and what is my dog called?"


def run(coro):
    return asyncio.run(coro)


def test_a_fact_reaches_a_new_session_of_the_same_user_only(memory):
    from _openai_agents_kit import (
        ITEM_KIND,
        Agent,
        LightmemSession,
        Runner,
        ScriptedModel,
        lightmem_instructions,
        say,
    )

    model = ScriptedModel([say("Noted.")])
    agent = Agent(name="assistant", model=model,
                  instructions=lightmem_instructions(memory, lambda ctx: ctx.context["user"], base="Be brief."))

    async def scenario():
        await Runner.run(agent, FACT, session=LightmemSession("alice-1", memory, "alice"), context={"user": "alice"})
        await Runner.run(agent, QUESTION, session=LightmemSession("alice-2", memory, "alice"), context={"user": "alice"})
        await Runner.run(agent, QUESTION, session=LightmemSession("bob-1", memory, "bob"), context={"user": "bob"})

    run(scenario())
    _, alice, bob = model.calls
    assert alice["instructions"].startswith("Be brief.\n\n") and "Lisbon" in alice["instructions"] and "Rex" in alice["instructions"]
    assert alice["instructions"].endswith(f"\n### Question\n{QUESTION}")  # build_context's prompt closes them
    assert "Lisbon" not in bob["instructions"] and "Rex" not in bob["instructions"]
    # the new session's history starts empty: the fact came from memory, not from the other session's items
    assert [i.get("content") for i in alice["input"]] == [QUESTION]
    # the fact became alice's memory (speaker, session) and none of bob's; the history records are archived. Under the
    # agent write policy (the session's default) the reply "Noted." and the question are turns, not memories.
    texts = {(m.metadata.get("speaker"), m.metadata.get("session_id")): m.text for m in memory.get_all("alice")}
    assert texts == {("user", "alice-1"): f"user: {FACT}"}
    assert all("Lisbon" not in m.text for m in memory.get_all("bob", include_archived=True))
    assert all(m.metadata.get("oa_kind") != ITEM_KIND for m in memory.get_all("alice"))
    assert all(h.item.metadata.get("oa_kind") != ITEM_KIND for h in memory.search(FACT, "alice", k=50))


def two_runs(session, memory_model_script):
    from _openai_agents_kit import Agent, Runner, ScriptedModel, fetch_page

    model = ScriptedModel(memory_model_script)
    agent = Agent(name="assistant", model=model, instructions="Be brief.", tools=[fetch_page])

    async def scenario():
        await Runner.run(agent, FACT, session=session)
        await Runner.run(agent, [{"role": "user", "content": [{"type": "input_text", "text": "Read example.org"}]}],
                         session=session)
        return await session.get_items(), await session.get_items(limit=2), await session.get_items(limit=0)

    return run(scenario()), model


def script():
    from _openai_agents_kit import call_tool, say

    return [say("Noted.", 1), call_tool("fetch_page", json.dumps({"url": "https://example.org"}), 2), say("Done: it is lorem ipsum.", 3)]


def test_history_round_trips_as_sqlite_session_keeps_it(memory):
    from _openai_agents_kit import PART_CHARS, LightmemSession, SQLiteSession

    (ours, ours_tail, ours_none), ours_model = two_runs(LightmemSession("s", memory, "alice", policy="all"), script())
    (ref, ref_tail, ref_none), ref_model = two_runs(SQLiteSession("s"), script())
    assert ours == ref and ours_tail == ref_tail and ours_none == ref_none == []
    assert [c["input"] for c in ours_model.calls] == [c["input"] for c in ref_model.calls]  # the model saw the same
    kinds = [i.get("type", "message") for i in ours]
    assert kinds == ["message", "message", "message", "function_call", "function_call_output", "message"]
    assert len(json.dumps(ours[4])) > 2 * PART_CHARS  # the tool output was kept in several parts, whole
    # a new session object over the same id reads the same history and appends after it
    again = LightmemSession("s", memory, "alice")
    assert run(again.get_items()) == ref
    run(again.add_items([{"role": "user", "content": "one more"}]))
    assert run(LightmemSession("s", memory, "alice").get_items())[-1] == {"role": "user", "content": "one more"}
    # the tool's output is history, not a memory: only the text turns were remembered
    assert {m.text for m in memory.get_all("alice")} == {f"user: {FACT}", "assistant: Noted.", "user: Read example.org",
                                                         "assistant: Done: it is lorem ipsum.", "user: one more"}


def test_pop_and_clear(memory):
    from _openai_agents_kit import LightmemSession, SQLiteSession

    session, ref = LightmemSession("s", memory, "alice"), SQLiteSession("s")
    items = [{"role": "user", "content": FACT}, {"role": "assistant", "content": "Noted."},
             {"role": "user", "content": "My sister is Ana."}]

    async def scenario():
        for s in (session, ref):
            await s.add_items(items[:2])
            await s.add_items(items[2:])
        assert await session.pop_item() == await ref.pop_item() == items[2]
        assert await session.get_items() == await ref.get_items() == items[:2]
        assert "Ana" not in str([m.text for m in memory.get_all("alice", include_archived=True)])  # erased with it
        await session.clear_session()
        await ref.clear_session()
        assert await session.get_items() == await ref.get_items() == []
        assert await session.pop_item() is None
        assert f"user: {FACT}" in [m.text for m in memory.get_all("alice")]  # the memories outlive the history
        await session.add_items(items[:1])
        await session.clear_session(forget=True)
        assert memory.get_all("alice", include_archived=True) == []

    run(scenario())


def test_async_memory_and_the_input_filter(memory):
    from _openai_agents_kit import (
        Agent,
        LightmemSession,
        RunConfig,
        Runner,
        ScriptedModel,
        lightmem_input_filter,
        say,
    )

    model = ScriptedModel([say("Noted.")])
    agent = Agent(name="assistant", model=model, instructions="Be brief.")

    async def scenario():
        amem = AsyncMemory(memory)
        config = RunConfig(call_model_input_filter=lightmem_input_filter(amem, lambda context: context["user"]))
        try:
            await Runner.run(agent, FACT, session=LightmemSession("a1", amem, "alice"), context={"user": "alice"},
                             run_config=config)
            await Runner.run(agent, QUESTION, session=LightmemSession("a2", amem, "alice"), context={"user": "alice"},
                             run_config=config)
            await Runner.run(agent, QUESTION, session=LightmemSession("b1", amem, "bob"), context={"user": "bob"},
                             run_config=config)
            return await LightmemSession("a1", amem, "alice").get_items()
        finally:
            await amem.aclose()

    history = run(scenario())
    assert [i.get("content") for i in history[:1]] == [FACT] and len(history) == 2
    _, alice, bob = model.calls
    assert alice["instructions"].startswith("Be brief.\n\n") and "Lisbon" in alice["instructions"]
    assert "Lisbon" not in bob["instructions"]
