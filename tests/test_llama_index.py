"""lightmem's LlamaIndex memory block, in LlamaIndex's own ``Memory`` and a real ``ReActAgent`` (no network, no LLM).

LlamaIndex is imported by the tests that use it, not when the file is collected: importing it takes ~1.7 s, which
every test process would pay otherwise."""
from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

import pytest

from lightmem import AsyncMemory

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llama_index") is None,
                                reason="the llama-index extra: pip install 'lightmem-slm[llama-index]'")

FACT = "I live in Lisbon and my dog is called Rex."
QUESTION = "Where do I live and what is my dog called?"


def _memory(block: Any, session: str, token_limit: int = 30_000, insert: str = "system") -> Any:
    from llama_index.core.memory import Memory as LlamaMemory

    from lightmem.integrations.llama_index import token_counter

    # lightmem's tokenizer: LlamaIndex's default (tiktoken) downloads its vocabulary on first use
    return LlamaMemory.from_defaults(session_id=session, token_limit=token_limit, memory_blocks=[block],
                                     tokenizer_fn=token_counter(), token_flush_size=10, insert_method=insert)


def test_flushed_messages_are_saved_and_another_conversation_of_the_user_gets_them(memory):
    from llama_index.core.base.llms.types import ChatMessage

    from lightmem.integrations.llama_index import LightmemMemoryBlock

    alice = LightmemMemoryBlock(memory=memory, user_id="alice")
    chat = _memory(alice, "chat-1", token_limit=40)  # a short history: older messages are flushed to the blocks

    async def first_conversation() -> None:
        await chat.aput_messages([ChatMessage(role="system", content="Be brief."), ChatMessage(role="user", content=FACT),
                                  ChatMessage(role="assistant", content="Noted, Lisbon and Rex."),
                                  ChatMessage(role="user", content="Also, I work as a nurse at the city hospital."),
                                  ChatMessage(role="assistant", content="Noted.")])

    asyncio.run(first_conversation())
    saved = memory.get_all("alice")
    # the system message is not saved; "Noted, Lisbon and Rex." restates the fact (agent write policy): a turn only
    assert [m.text for m in saved][:1] == [f"user: {FACT}"] and not any("Noted" in m.text for m in saved)
    assert all(m.metadata["source"] == "llama_index" and m.metadata["session_id"] == "chat-1" for m in saved)

    later = _memory(LightmemMemoryBlock(memory=memory, user_id="alice"), "chat-2")
    bob = _memory(LightmemMemoryBlock(memory=memory, user_id="bob"), "chat-3")
    got = asyncio.run(later.aget(input=QUESTION))
    system = got[0]
    assert system.role == "system" and "<lightmem>" in system.content and "Lisbon" in system.content
    assert "### Memories" in system.content and "### Question" not in system.content  # the question is the chat's
    assert "Lisbon" not in str(asyncio.run(bob.aget(input=QUESTION)))  # bob's block reads bob's memories only


def test_the_block_reads_within_its_budget_and_is_empty_without_text_or_memories(memory):
    from llama_index.core.base.llms.types import ChatMessage, ImageBlock

    from lightmem.integrations.llama_index import LightmemMemoryBlock, token_counter

    block = LightmemMemoryBlock(memory=memory, user_id="alice", budget=60, context_options={"k": 1})
    assert asyncio.run(block.aget([ChatMessage(role="user", content=QUESTION)])) == ""  # nothing remembered yet
    memory.add([{"speaker": "user", "text": FACT}, {"speaker": "user", "text": "My sister Ana lives in Porto."}], "alice")
    text = asyncio.run(block.aget([ChatMessage(role="user", content="Where does my sister live?")]))
    assert text.startswith("### Memories") and "Porto" in text and "Lisbon" not in text  # k=1: the best one only
    assert token_counter()(text) and len(token_counter()(text)) <= 60
    image_only = ChatMessage(role="user", blocks=[ImageBlock(url="https://example.com/a.png")])
    assert asyncio.run(block.aget([image_only])) == "" and asyncio.run(block.aget([])) == ""


def test_turns_keep_user_and_assistant_text_only():
    from llama_index.core.base.llms.types import ChatMessage, ImageBlock, TextBlock

    from lightmem.integrations.llama_index import turns_of

    messages = [ChatMessage(role="system", content="rules"), ChatMessage(role="user", blocks=[
        TextBlock(text="Look at this"), ImageBlock(url="https://example.com/a.png")]),
        ChatMessage(role="assistant", content="", additional_kwargs={"tool_calls": [{"id": "1"}]}),
        ChatMessage(role="tool", content="42"), ChatMessage(role="assistant", content="It is a cat.",
                                                             additional_kwargs={"session_id": "s1"})]
    assert [(t["speaker"], t["text"], t.get("session_id")) for t in turns_of(messages)] == [
        ("user", "Look at this", None), ("assistant", "It is a cat.", "s1")]


def _recorder() -> Any:
    """A stand-in LLM that records every prompt and answers as a ReAct agent must: a thought, then the answer."""
    from llama_index.core.base.llms.types import CompletionResponse, CompletionResponseGen, LLMMetadata
    from llama_index.core.llms.custom import CustomLLM

    class Recorder(CustomLLM):
        prompts: list[str] = []

        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(model_name="recorder", is_chat_model=False)

        def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
            self.prompts.append(prompt)
            return CompletionResponse(text="Thought: I can answer without using any more tools.\nAnswer: Noted.")

        def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
            done = self.complete(prompt)
            yield CompletionResponse(text=done.text, delta=done.text)

    return Recorder(prompts=[])


def test_a_react_agent_of_a_later_conversation_is_given_what_an_earlier_one_saved(tmp_path):
    from llama_index.core.agent.workflow import ReActAgent

    from lightmem.integrations.llama_index import LightmemMemoryBlock

    async def go() -> tuple[list[str], Any]:
        # the background indexer on, as users get it: what was saved is found by its words before its vector
        async with AsyncMemory.open(tmp_path / "store", encoder="hashing", background_index=True) as memory:
            llm = _recorder()
            agent = ReActAgent(tools=[], llm=llm)
            block = LightmemMemoryBlock(memory=memory, user_id="alice", policy="all")  # every turn: the ReAct text too
            first = _memory(block, "chat-1")
            answer = await agent.run(user_msg=FACT, memory=first)
            await block.remember(await first.aget_all())  # save the whole conversation now, not at a flush
            # ReActAgent drops the system message of its chat history (its own ReAct header replaces it), where
            # LlamaIndex's Memory puts the blocks by default: with it, the blocks go into the user's message
            await agent.run(user_msg=QUESTION, memory=_memory(block, "chat-2", insert="user"))
            return llm.prompts, (answer, await memory.get_all("alice"))

    prompts, (answer, saved) = asyncio.run(go())
    assert "Noted." in str(answer)
    assert "Lisbon" not in prompts[0].split(FACT)[0]  # nothing remembered before the first conversation
    assert "<lightmem>" in prompts[-1] and "Lisbon" in prompts[-1]
    # the conversation as LlamaIndex kept it: the user's message, the agent's last message (its ReAct text)
    assert [m.text for m in saved][0] == f"user: {FACT}" and saved[1].text.startswith("assistant: ")
    assert len(saved) == 2 and saved[1].text.endswith("Noted.")
