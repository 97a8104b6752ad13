"""lightmem for Pydantic AI (``pip install 'lightmem-slm[pydantic-ai]'``).

``LightmemMemory(memory, user_id)`` is a Pydantic AI *capability* (``Agent(..., capabilities=[...])`` or per run,
``agent.run(..., capabilities=[...])``), the extension point Pydantic AI documents for memory systems. It

- adds instructions: ``build_context``'s prompt for the run's user prompt (at most ``budget`` tokens), computed before
  the run's first model request;
- after each run, saves the run's user prompts and the model's text answers to lightmem as conversation turns
  (speaker ``user``/``assistant``), so that the next run, in any conversation of the same user, finds them.

Without capabilities, the same two halves are ``LightmemMemory.instructions`` (pass it as ``Agent(instructions=...)``
or register it with ``@agent.instructions``) and ``await LightmemMemory.remember(result)``.

``memory`` is anything with ``Memory``'s methods: a ``Memory`` or a ``MemoryClient`` (called on the event loop's
thread: each call blocks the loop for its length), or an ``AsyncMemory`` or ``AsyncMemoryClient`` (awaited).
"""
from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime
from typing import Any, Union

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart

from lightmem import write_policy
from lightmem.integrations.calls import call_memory

__all__ = ["LightmemMemory", "turns_of"]

UserId = Union[str, Callable[[RunContext[Any]], str]]




def _prompt_text(content: Any) -> str:
    """The text of a user prompt: a string, or the strings of a sequence of user content (images, audio, documents
    and other binary content left out)."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "\n".join(c for c in content if isinstance(c, str) and c.strip())
    return ""


def turns_of(messages: Sequence[ModelMessage]) -> list[dict[str, Any]]:
    """The conversation turns in ``messages``, as ``Memory.add`` takes them: each user prompt (speaker ``user``) and
    the text of each model response (speaker ``assistant``), with an id made from the run id and the position (adding
    the same messages twice stores them once). Tool calls and returns, system prompts, instructions, thinking and
    non-text content are left out."""
    turns, unnamed = [], uuid.uuid4().hex[:12]  # the run id of messages that carry none
    for i, message in enumerate(messages):
        if isinstance(message, ModelRequest):
            texts = [("user", _prompt_text(p.content), p.timestamp) for p in message.parts if isinstance(p, UserPromptPart)]
        elif isinstance(message, ModelResponse):
            text = "\n".join(p.content for p in message.parts if isinstance(p, TextPart) and p.content.strip())
            texts = [("assistant", text, message.timestamp)]
        else:
            continue
        for j, (speaker, text, ts) in enumerate(texts):
            if not text.strip():
                continue
            run = getattr(message, "run_id", None) or unnamed
            turn: dict[str, Any] = {"speaker": speaker, "text": text, "id": f"pai-{run}-{i}-{j}",
                                    "metadata": {"source": "pydantic_ai"}}
            if isinstance(ts, datetime):
                turn["timestamp"] = ts.timestamp()
            conversation = getattr(message, "conversation_id", None)
            if conversation:
                turn["session_id"] = conversation
            turns.append(turn)
    return turns


@dataclass
class LightmemMemory(AbstractCapability[Any]):
    """lightmem's memory as a Pydantic AI capability: instructions from ``build_context``, turns saved after each run.

    Args:
        memory: A ``Memory``, ``AsyncMemory``, ``MemoryClient`` or ``AsyncMemoryClient``.
        user_id: Whose memories: a user id, or a function of the run's ``RunContext`` that returns one (for an agent
            that serves many users: ``lambda ctx: ctx.deps.user_id``).
        budget: The most tokens of ``build_context``'s prompt; None (the default): the memory's own default
            (``DEFAULT_BUDGET``, 600, unless the memory was opened with another).
        save: Save each run's turns when it ends (the capability's ``after_run``); False to only read.
        session_id: The session the saved turns belong to; by default the run's conversation id.
        context_options: More arguments of ``build_context`` (``filters``, ``k``, ``stm``).
        policy: Which saved turns become memories (``lightmem.write_policy``): ``"agent"`` (the default) leaves out
            questions, pleasantries, answers and restatements; ``"all"`` writes every turn.
    """

    memory: Any
    user_id: UserId
    budget: int | None = None
    save: bool = True
    session_id: str | None = None
    context_options: dict[str, Any] = field(default_factory=dict)
    policy: Any = "agent"
    _: KW_ONLY
    id: str | None = "lightmem"

    def __post_init__(self) -> None:
        write_policy.check(self.policy)  # a mistyped name fails here, not at the first save

    def _user(self, ctx: RunContext[Any] | None) -> str:
        if callable(self.user_id):
            if ctx is None:
                raise ValueError("user_id is a function of the run context: pass user_id= to name the user")
            return self.user_id(ctx)
        return self.user_id

    # -- the capability ------------------------------------------------------------------------
    def get_instructions(self) -> Any:
        return self.instructions

    async def after_run(self, ctx: RunContext[Any], *, result: Any) -> Any:
        if self.save:
            await self.remember(result, user_id=self._user(ctx))
        return result

    # -- the halves, usable without capabilities -------------------------------------------------
    async def instructions(self, ctx: RunContext[Any]) -> str | None:
        """``build_context``'s prompt for the run's user prompt (the last user prompt of the history when the run has
        none); None when there is no text to ask with."""
        query = _prompt_text(ctx.prompt)
        if not query.strip():
            prompts = [t["text"] for t in turns_of(ctx.messages) if t["speaker"] == "user"]
            query = prompts[-1] if prompts else ""
        if not query.strip():
            return None
        composed = await call_memory(self.memory, "build_context", query, self._user(ctx), budget=self.budget,
                               **self.context_options)
        return composed.prompt

    async def remember(self, result: Any, user_id: str | None = None, session_id: str | None = None) -> list[Any]:
        """Save the conversation turns of a run (an ``AgentRunResult``, or a list of messages such as its
        ``new_messages()``) as the user's memories; returns the items written."""
        messages = result.new_messages() if hasattr(result, "new_messages") else list(result)
        turns = turns_of(messages)
        if not turns:
            return []
        session = session_id or self.session_id
        if session is not None:
            turns = [{**t, "session_id": session} for t in turns]
        return await call_memory(self.memory, "add", turns, user_id or self._user(None), policy=self.policy)
