"""lightmem for LlamaIndex (``pip install 'lightmem-slm[llama-index]'``).

``LightmemMemoryBlock(memory=..., user_id=...)`` is a LlamaIndex *memory block* (``BaseMemoryBlock``), the long-term
part of ``llama_index.core.memory.Memory`` that LlamaIndex agents (``FunctionAgent``, ``ReActAgent``, ``AgentWorkflow``)
read before each model call:

- ``aget``: the memories relevant to the latest user message, packed by ``build_context`` within ``budget`` tokens;
  LlamaIndex's ``Memory`` puts the text in the system message, inside its memory-blocks template;
- ``aput``: the messages LlamaIndex's ``Memory`` moves out of its short-term chat history (once that history passes
  ``token_limit`` × ``chat_history_token_ratio`` tokens) are saved as conversation turns of the user, so any later
  conversation of the same user finds them. ``await block.remember(messages)`` saves messages at once.

``token_counter()`` is lightmem's prompt tokenizer as ``Memory.from_defaults(tokenizer_fn=...)``: LlamaIndex's default,
tiktoken, downloads its vocabulary the first time it is used, which fails on a machine without internet access.

``memory`` is anything with ``Memory``'s methods: a ``Memory`` or a ``MemoryClient`` (called on the event loop's
thread: each call blocks the loop for its length), or an ``AsyncMemory`` or ``AsyncMemoryClient`` (awaited).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock
from llama_index.core.memory import BaseMemoryBlock
from pydantic import Field

from lightmem import write_policy
from lightmem.integrations.calls import call_memory
from lightmem.retrieval.composer import ContextComposer

__all__ = ["LightmemMemoryBlock", "token_counter", "turns_of"]

SPEAKERS = {MessageRole.USER: "user", MessageRole.ASSISTANT: "assistant"}




def _text(message: ChatMessage) -> str:
    """The text blocks of a message (images, audio, documents and tool calls left out)."""
    return "\n".join(b.text for b in message.blocks if isinstance(b, TextBlock) and b.text.strip())


def turns_of(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """The conversation turns in ``messages``, as ``Memory.add`` takes them: the text of each user message (speaker
    ``user``) and assistant message (speaker ``assistant``), with the message's ``session_id`` (LlamaIndex's
    ``Memory`` sets it in ``additional_kwargs``) as the session. System and tool messages, and messages without
    text (an assistant's tool calls), are left out."""
    turns = []
    for message in messages:
        speaker, text = SPEAKERS.get(message.role), _text(message)
        if speaker is None or not text:
            continue
        turn: dict[str, Any] = {"speaker": speaker, "text": text, "metadata": {"source": "llama_index"}}
        session = message.additional_kwargs.get("session_id")
        if isinstance(session, str) and session:
            turn["session_id"] = session
        turns.append(turn)
    return turns


def token_counter(tokenizer: str | None = None) -> Callable[[str], list[int]]:
    """A ``tokenizer_fn`` for LlamaIndex's ``Memory`` (it counts ``len(tokenizer_fn(text))``): lightmem's prompt
    tokenizer (``tokenizer``: a packaged tokenizer's name, or a tokenizer file; None: the reader's), offline."""
    from lightmem.models.prompt_tokens import prompt_counter

    counter = prompt_counter(tokenizer)
    return lambda text: list(range(counter.count([text])[0]))  # LlamaIndex uses only the length


class LightmemMemoryBlock(BaseMemoryBlock[str]):
    """lightmem's memory of one user as a block of LlamaIndex's ``Memory``.

    Args:
        memory: A ``Memory``, ``AsyncMemory``, ``MemoryClient`` or ``AsyncMemoryClient``.
        user_id: Whose memories it reads and writes.
        budget: The most tokens of ``build_context``'s prompt, whose memories the block returns; None (the default):
            the memory's own default (``DEFAULT_BUDGET``, 600, unless the memory was opened with another).
        save: Save the messages LlamaIndex's ``Memory`` moves out of its short-term history; False to only read.
        policy: Which saved messages become memories: ``"agent"`` (the default; ``lightmem.write_policy``) or ``"all"``.
        context_options: More arguments of ``build_context`` (``filters``, ``k``).
        name: The block's name, the tag LlamaIndex's template wraps its text in (default ``lightmem``).
        priority: LlamaIndex's truncation order; 0 (the default) is never truncated: ``budget`` already bounds it.
    """

    name: str = Field(default="lightmem", description="The name of the memory block.")
    memory: Any = Field(description="A lightmem Memory, AsyncMemory, MemoryClient or AsyncMemoryClient.")
    user_id: str = Field(description="Whose memories the block reads and writes.")
    budget: int | None = Field(default=None, gt=0, description="The most tokens of build_context's prompt; None: the memory's default (lightmem.retrieval.composer.DEFAULT_BUDGET).")
    save: bool = Field(default=True, description="Save the messages flushed from the short-term history.")
    policy: Any = Field(default="agent", description="Which saved messages become memories (lightmem.write_policy): "
                        "'agent' leaves out questions, pleasantries, answers and restatements; 'all' writes every one.")
    context_options: dict[str, Any] = Field(default_factory=dict, description="More arguments of build_context.")

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        write_policy.check(self.policy)  # a mistyped name fails here, not at the first save

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        """The memories relevant to the latest user message (the latest message when none is the user's), as
        ``build_context`` packs them; "" when there is no text to ask with or nothing is remembered."""
        messages = messages or []
        texts = [_text(m) for m in messages if m.role == MessageRole.USER] or [_text(m) for m in messages[-1:]]
        query = next((t for t in reversed(texts) if t), "")
        if not query:
            return ""
        composed = await call_memory(self.memory, "build_context", query, self.user_id, budget=self.budget,
                               **self.context_options)
        if not composed.memories:
            return ""
        # The prompt is the memories, then the question, which LlamaIndex's chat history already holds.
        return composed.prompt.split(f"\n{ContextComposer.QUESTION}\n", 1)[0].strip()

    async def _aput(self, messages: list[ChatMessage]) -> None:
        if self.save:
            await self.remember(messages)

    async def remember(self, messages: Sequence[ChatMessage]) -> list[Any]:
        """Save the user and assistant text of ``messages`` as the user's memories now; returns the items written."""
        turns = turns_of(messages)
        return await call_memory(self.memory, "add", turns, self.user_id, policy=self.policy) if turns else []
