"""The OpenAI Agents SDK's side of tests/test_openai_agents.py, imported by its tests when they run (importing the SDK
takes ~1.8 s, which collecting the tests would otherwise make every test process pay).

The SDK ships no public fake model: ``ScriptedModel`` is a minimal ``agents.models.interface.Model`` that records the
instructions and input of every call and answers with the next scripted output.
"""
from __future__ import annotations

import json

import agents
from agents import Agent, RunConfig, Runner, SQLiteSession, function_tool
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from lightmem.integrations.openai_agents import (
    ITEM_KIND,
    PART_CHARS,
    LightmemSession,
    lightmem_input_filter,
    lightmem_instructions,
)

__all__ = ["ITEM_KIND", "PART_CHARS", "Agent", "LightmemSession", "RunConfig", "Runner", "SQLiteSession", "ScriptedModel",
           "call_tool", "fetch_page", "lightmem_input_filter", "lightmem_instructions", "say"]

agents.set_tracing_disabled(True)


def say(text: str, n: int = 1) -> list:
    return [ResponseOutputMessage(id=f"msg_{n}", type="message", role="assistant", status="completed",
                                  content=[ResponseOutputText(type="output_text", text=text, annotations=[])])]


def call_tool(name: str, arguments: str, n: int = 1) -> list:
    return [ResponseFunctionToolCall(id=f"fc_{n}", call_id=f"call_{n}", type="function_call", name=name,
                                     arguments=arguments, status="completed")]


class ScriptedModel(Model):
    """Answers with ``script``'s outputs in turn (the last one again when it runs out); records what it was sent."""

    def __init__(self, script: list[list]) -> None:
        self.script, self.calls = list(script), []

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs, tracing,
                           *, previous_response_id=None, conversation_id=None, prompt=None, **_):
        self.calls.append({"instructions": system_instructions, "input": json.loads(json.dumps(input, default=str))})
        output = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    async def stream_response(self, *args, **kwargs):  # pragma: no cover - the tests run without streaming
        raise NotImplementedError
        yield


@function_tool
def fetch_page(url: str) -> str:
    """Fetch a page (a long one, so that its history item is stored in several parts)."""
    return f"<page of {url}> " + "lorem ipsum \"quoted\" \\ é " * (3 * PART_CHARS // 25)
