"""An MCP server (stdio) that gives an agent the memory of one user as tools."""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Annotated, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from lightmem.errors import InvalidInputError, ItemNotFoundError, StoreError
from lightmem.memory import Memory
from lightmem.messages import check_user_id
from lightmem.server.schemas import (
    Budget,
    ContextOut,
    DeletedOut,
    HitOut,
    HitsOut,
    ItemsOut,
    K,
    Limit,
    MemoryOut,
    Offset,
    Timestamp,
)
from lightmem.server.settings import open_memory
from lightmem.text import warm

T = TypeVar("T")
NonBlank = Annotated[str, Field(min_length=1, pattern=r"\S")]


def create_mcp_server(memory: Memory, user_id: str) -> MCPServer:
    """Tools over ``memory`` that always act for ``user_id``: the agent cannot name another user.

    A bad argument or an unknown memory id comes back as an error result (``is_error``) with a
    message for the model to read; the server keeps running.
    """
    user_id = check_user_id(user_id)
    server = MCPServer("lightmem", log_level="WARNING",
                       instructions=f"Long-term memory of the user {user_id!r}: remember what they say, "
                                    "search it before answering, build a prompt context within a token budget.")
    lock = threading.Lock()  # one Memory call at a time: tools run in worker threads

    def call(fn: Callable[..., T], *args: object, **kwargs: object) -> T:
        try:
            with lock:
                return fn(*args, **kwargs)
        except (InvalidInputError, ItemNotFoundError, StoreError) as exc:  # a full disk, a corrupt store: say so
            raise ToolError(str(exc)) from exc

    @server.tool()
    def add_memory(
        text: Annotated[NonBlank, Field(description="What was said, e.g. 'I adopted a dog named Rex.'")],
        speaker: Annotated[NonBlank, Field(description="Who said it: a name, 'user' or 'assistant'.")] = "user",
        timestamp: Annotated[Timestamp | None, Field(description="When it was said (ISO 8601, a date string, "
                                                                 "or Unix seconds); defaults to now.")] = None,
    ) -> ItemsOut:
        """Remember one message of the conversation. Returns the memories written."""
        msg = {"speaker": speaker, "text": text, **({"timestamp": timestamp} if timestamp is not None else {})}
        if len(text) <= memory.max_turn_chars:
            warm([text])  # a long text's analysis outside the lock: other tool calls are not held behind it
        return ItemsOut(items=[MemoryOut.of(i) for i in call(memory.add, msg, user_id=user_id)])

    @server.tool()
    def search_memories(
        query: Annotated[NonBlank, Field(description="What to look for, as a question or keywords.")],
        k: Annotated[K, Field(description="How many memories to return.")] = 5,
    ) -> HitsOut:
        """Find the memories most relevant to a query, best first, with their scores and source turns."""
        return HitsOut(hits=[HitOut.of(h) for h in call(memory.search, query, user_id, k=k)])

    @server.tool()
    def get_memories(
        limit: Annotated[Limit, Field(description="At most this many memories.")] = 50,
        offset: Annotated[Offset, Field(description="Skip this many first.")] = 0,
    ) -> ItemsOut:
        """List the stored memories, oldest first."""
        return ItemsOut(items=[MemoryOut.of(i) for i in call(memory.get_all, user_id, limit=limit, offset=offset)])

    @server.tool()
    def delete_memory(memory_id: Annotated[NonBlank, Field(description="The id of a memory, from another tool's result.")]
                      ) -> DeletedOut:
        """Forget one memory for good: its text, its history's texts and the messages only it came from."""
        return DeletedOut(id=memory_id, removed=call(memory.delete, memory_id, user_id))

    @server.tool()
    def build_context(
        query: Annotated[NonBlank, Field(description="The question the context is for.")],
        budget: Annotated[Budget | None, Field(description="Prompt budget in tokens; defaults to the memory's.")] = None,
        stm: Annotated[list[str] | None, Field(description="Recent turns of the conversation, oldest first.")] = None,
    ) -> ContextOut:
        """Compose a prompt: the query, then recent turns, then the best memories, within the token budget."""
        return ContextOut.of(call(memory.build_context, query, user_id, stm=stm or (), budget=budget))

    return server


def run_stdio(store: str, user_id: str, encoder: str | None = None, selector: str = "trained") -> None:
    """Serve the memory of ``user_id`` in ``store`` over stdin/stdout until the client closes it."""
    user_id = check_user_id(user_id)
    with open_memory(store, encoder, selector) as memory:
        create_mcp_server(memory, user_id).run("stdio")
