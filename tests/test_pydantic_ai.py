"""lightmem's Pydantic AI capability, run by a real ``Agent`` over ``FunctionModel`` (no network, no LLM)."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, RunContext  # noqa: E402
from pydantic_ai.messages import ModelResponse, TextPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

from lightmem import AsyncMemory  # noqa: E402
from lightmem.integrations.pydantic_ai import LightmemMemory, turns_of  # noqa: E402

FACT = "I live in Lisbon and my dog is called Rex."
QUESTION = "Where do I live and what is my dog called?"


class Recorder:
    """A ``FunctionModel`` function that records the instructions of every request and answers "Noted."."""

    def __init__(self) -> None:
        self.instructions: list[str | None] = []

    def __call__(self, messages, info: AgentInfo) -> ModelResponse:
        self.instructions.append(info.instructions)
        return ModelResponse(parts=[TextPart("Noted.")])


@dataclass
class Deps:
    user_id: str


def test_the_second_run_sees_the_first_runs_fact_and_another_user_does_not(memory):
    seen = Recorder()
    agent = Agent(FunctionModel(seen), deps_type=Deps, instructions="Be brief.",
                  capabilities=[LightmemMemory(memory, lambda ctx: ctx.deps.user_id)])
    first = agent.run_sync(FACT, deps=Deps("alice"))
    agent.run_sync(QUESTION, deps=Deps("alice"))  # a new conversation: no message history
    agent.run_sync(QUESTION, deps=Deps("bob"))
    assert first.output == "Noted."
    before, alice, bob = seen.instructions
    assert before == f"Be brief.\n\n### Question\n{FACT}"  # nothing remembered yet: the prompt is the question
    assert alice.startswith("Be brief.\n\n### Memories") and "Lisbon" in alice and "Rex" in alice
    assert alice.endswith(f"\n### Question\n{QUESTION}")  # build_context's prompt closes the instructions
    assert "Lisbon" not in bob and "Rex" not in bob
    # what was saved: alice's fact, none of bob's; under the agent write policy (the capability's default) the
    # questions and the model's "Noted." are stored as turns, not as memories
    texts = [m.text for m in memory.get_all("alice")]
    assert texts == [f"user: {FACT}"]
    assert memory.get_all("bob") == [] and len(memory.store.turns("bob")) == 2
    assert all(m.metadata["source"] == "pydantic_ai" for m in memory.get_all("alice"))


def test_instructions_and_remember_without_capabilities_over_async_memory(memory):
    seen = Recorder()

    async def scenario():
        async with AsyncMemory(memory) as amem:
            alice = LightmemMemory(amem, "alice", budget=300, session_id="chat-1")
            agent = Agent(FunctionModel(seen), instructions=alice.instructions)
            result = await agent.run(FACT)
            written = await alice.remember(result)
            assert [m.text for m in written] == [f"user: {FACT}"]  # "Noted." is a turn, not a memory
            assert await alice.remember(result) == []  # the same turns are stored once
            await agent.run(QUESTION)
            bob = Agent(FunctionModel(seen))

            @bob.instructions
            async def memories(ctx: RunContext[None]) -> str | None:
                return await LightmemMemory(amem, "bob").instructions(ctx)

            await bob.run(QUESTION)
            return await amem.get_all("alice")

    saved = asyncio.run(scenario())
    assert [m.metadata["session_id"] for m in saved] == ["chat-1"]
    _, alice, bob = seen.instructions
    assert "Lisbon" in alice and alice.endswith(f"### Question\n{QUESTION}")
    assert bob is None or "Lisbon" not in bob


def test_turns_leave_out_tools(memory):
    def model(messages, info):
        if len(messages) == 1:
            from pydantic_ai.messages import ToolCallPart
            return ModelResponse(parts=[ToolCallPart("lookup", {"q": "x"}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("The answer is 42.")])

    agent = Agent(FunctionModel(model), capabilities=[LightmemMemory(memory, "alice", policy="all")])

    @agent.tool_plain
    def lookup(q: str) -> str:
        return "secret tool output"

    result = agent.run_sync("What is the answer?")
    assert [t["speaker"] for t in turns_of(result.new_messages())] == ["user", "assistant"]
    assert [m.text for m in memory.get_all("alice")] == ["user: What is the answer?", "assistant: The answer is 42."]
