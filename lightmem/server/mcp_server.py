"""An MCP server (stdio) that gives an agent the memory of one user as tools."""
from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Annotated, Any, NoReturn, TypeVar

import anyio
import mcp_types as types
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lightmem import __version__
from lightmem.errors import InvalidInputError, ItemNotFoundError, StoreError
from lightmem.memory import Memory
from lightmem.server.schemas import (
    MAX_TURNS_PER_REQUEST,
    THRESHOLD_DOC,
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
    Threshold,
    Timestamp,
    WritePolicyName,
)
from lightmem.server.settings import open_memory
from lightmem.text import warm
from lightmem.validation import MAX_ID_CHARS, check_user_id

log = logging.getLogger(__name__)
# A tool call is a deliberate save: every message is written unless the caller asks for the agent policy.
POLICY_ARG = ("Which messages become memories: 'all' (the default: every one) or 'agent' (for saving your own exchange "
              "with the user: questions, pleasantries, your short answers and restatements of stored memories are "
              "kept as turns, not written as memories).")
T = TypeVar("T")
NonBlank = Annotated[str, Field(min_length=1, pattern=r"\S")]


# -- hostile text ------------------------------------------------------------------------------
def _problem(text: str, limit: int | None = None) -> str | None:
    """What makes ``text`` unfit for a store or an answer (a lone surrogate, NUL, over ``limit`` characters),
    said without the text itself; None when it is fine."""
    if limit is not None and len(text) > limit:  # first: a long text is not scanned
        return f"is {len(text):,} characters long, over the limit of {limit:,}"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (f"is not valid Unicode text: character {exc.start + 1} is a lone surrogate "
                f"(U+{ord(text[exc.start]):04X}), half of a pair; send the whole character")
    nul = text.find("\x00")
    if nul >= 0:
        return f"holds a NUL character (\\u0000) at character {nul + 1}, which a database cannot store as text; remove it"
    return None


def _label(name: object, limit: int = 60) -> str:
    """A name from the wire (a tool's, an argument's) fit for a log line or a message: ASCII, escaped, cut short."""
    text = name if isinstance(name, str) else repr(name)
    text = text.encode("ascii", "backslashreplace").decode("ascii")
    text = "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in text)
    return text if len(text) <= limit else text[:limit] + "..."


def _strings(where: str, value: object) -> Iterator[tuple[str, str]]:
    """Every string in a JSON value (object keys too) with where it is, e.g. ``stm[2]`` or ``a name in metadata``."""
    stack: list[tuple[str, object]] = [(where, value)]
    while stack:
        at, v = stack.pop()
        if isinstance(v, str):
            yield at, v
        elif isinstance(v, dict):
            for k, sub in reversed(list(v.items())):
                if isinstance(k, str):
                    yield f"a name in {at or 'the arguments'}", k
                stack.append((f"{at}.{_label(k, 40)}" if at else _label(k, 40), sub))
        elif isinstance(v, list):
            stack.extend((f"{at}[{i}]", sub) for i, sub in reversed(list(enumerate(v))))


def _refuse(tool: str, problem: str) -> NoReturn:
    log.warning("MCP tool %s refused a call: %s", _label(tool), problem)
    raise ToolError(problem)


# -- the tools ---------------------------------------------------------------------------------
class MessageArg(BaseModel):
    """One message of ``add_memories``: the arguments of ``add_memory``, as an object."""

    model_config = ConfigDict(extra="forbid")
    text: NonBlank = Field(description="What was said.")
    speaker: NonBlank = Field("user", description="Who said it: a name, 'user' or 'assistant'.")
    timestamp: Timestamp | None = Field(None, description="When it was said (ISO 8601, a date string, or Unix "
                                                          "seconds); defaults to now.")
    metadata: dict[str, Any] | None = Field(None, description="Fields kept with the memory, to filter on later.")


METADATA_FILTER = ("Only memories whose metadata passes: {'field': value} or {'field': {'$gte': value}} "
                   "($eq $ne $gt $gte $lt $lte).")

def create_mcp_server(memory: Memory, user_id: str) -> MCPServer:
    """Tools over ``memory`` that always act for ``user_id``: the agent cannot name another user.

    A bad argument or an unknown memory id comes back as an error result (``is_error``) with a
    message for the model to read; the server keeps running. Hostile text in any argument (a lone
    surrogate, NUL, a value over its bound) is an error result and a warning in the log, which names
    the tool and the problem, never the text; over stdio even a request the SDK cannot parse is answered
    (``LightMemMCPServer``).
    """
    user_id = check_user_id(user_id)
    server = LightMemMCPServer("lightmem", version=__version__, log_level="WARNING",
                               instructions=f"Long-term memory of the user {user_id!r}: remember what they say, "
                                            "search it before answering, build a prompt context within a token budget.")
    add_tools(server, memory, lambda: user_id, threading.Lock())
    return server


def add_tools(server: MCPServer, memory: Memory, user_of: Callable[[], str], lock: threading.Lock) -> None:
    """Register the memory tools on ``server``: each call acts for ``user_of()``, read in the call's own thread.

    Over stdio ``user_of`` returns the one user of the server; over HTTP (``lightmem.server.mcp_http``) the user
    the call named, once its key was checked. ``lock`` serialises the Memory calls (tools run in worker threads).
    """
    long, short = memory.max_turn_chars, MAX_ID_CHARS  # a text, query or recent turn is at most a turn; a name an id

    def check(tool: str, **args: tuple[object, int]) -> None:
        """Refuse hostile text in any string of ``args`` (name: (value, longest allowed)) before Memory sees it."""
        for name, (value, limit) in args.items():
            for where, text in _strings(name, value):
                problem = _problem(text, limit)
                if problem is not None:
                    _refuse(tool, f"argument {where!r} {problem}")

    def call(tool: str, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
        try:
            with lock:
                return fn(*args, **kwargs)
        except (InvalidInputError, ItemNotFoundError) as exc:
            log.info("MCP tool %s refused a call: %s", tool, exc)
            raise ToolError(str(exc)) from exc
        except StoreError as exc:  # a full disk, a corrupt store: say so
            log.error("MCP tool %s failed: %s", tool, exc)
            raise ToolError(str(exc)) from exc

    @server.tool()
    def add_memory(
        text: Annotated[NonBlank, Field(description="What was said, e.g. 'I adopted a dog named Rex.'")],
        speaker: Annotated[NonBlank, Field(description="Who said it: a name, 'user' or 'assistant'.")] = "user",
        timestamp: Annotated[Timestamp | None, Field(description="When it was said (ISO 8601, a date string, "
                                                                 "or Unix seconds); defaults to now.")] = None,
        metadata: Annotated[dict[str, Any] | None, Field(description="Fields kept with the memory, to filter on "
                                                                     "later, e.g. {'topic': 'pets'}.")] = None,
        policy: Annotated[WritePolicyName, Field(description=POLICY_ARG)] = "all",
    ) -> ItemsOut:
        """Remember one message of the conversation. Returns the memories written."""
        return write("add_memory", [MessageArg(text=text, speaker=speaker, timestamp=timestamp, metadata=metadata)],
                     lambda i: "", policy)

    @server.tool()
    def add_memories(
        messages: Annotated[list[MessageArg], Field(min_length=1, max_length=MAX_TURNS_PER_REQUEST, description=(
            "The messages, oldest first, e.g. [{'speaker': 'user', 'text': 'I adopted a dog named Rex.'}, "
            f"{{'speaker': 'assistant', 'text': 'Congratulations!'}}]; at most {MAX_TURNS_PER_REQUEST:,}."))],
        policy: Annotated[WritePolicyName, Field(description=POLICY_ARG)] = "all",
    ) -> ItemsOut:
        """Remember several messages at once (a message and its reply, a stretch of conversation), oldest first.
        They are written together: all of them or, when one is refused, none. Returns the memories written."""
        return write("add_memories", messages, lambda i: f"messages[{i}].", policy)

    def write(tool: str, messages: list[MessageArg], where: Callable[[int], str], policy: str) -> ItemsOut:
        """Check each message's text (``where(i)``: its arguments' prefix in a refusal), then add them in one call."""
        for i, m in enumerate(messages):
            at = where(i)
            check(tool, **{f"{at}text": (m.text, long), f"{at}speaker": (m.speaker, short),
                           f"{at}timestamp": (m.timestamp, short)})
        warm([m.text for m in messages])  # the texts' analysis outside the lock: other tool calls are not held behind it
        items = call(tool, memory.add, [m.model_dump(exclude_none=True) for m in messages], user_id=user_of(),
                     policy=policy)
        return ItemsOut(items=[MemoryOut.of(i) for i in items])

    @server.tool()
    def search_memories(
        query: Annotated[NonBlank, Field(description="What to look for, as a question or keywords.")],
        k: Annotated[K, Field(description="How many memories to return.")] = 5,
        metadata: Annotated[dict[str, Any] | None, Field(description=METADATA_FILTER)] = None,
        threshold: Annotated[Threshold | None, Field(description=THRESHOLD_DOC.replace("422", "an error"))] = None,
    ) -> HitsOut:
        """Find the memories most relevant to a query, best first, with their scores and source turns. With a
        threshold (0: some evidence), only memories scoring above it, so there may be fewer than k, or none."""
        check("search_memories", query=(query, long))
        filters = {"metadata": metadata} if metadata is not None else None
        return HitsOut(hits=[HitOut.of(h) for h in call("search_memories", memory.search, query, user_of(), k=k,
                                                          filters=filters, threshold=threshold)])

    @server.tool()
    def get_memories(
        limit: Annotated[Limit, Field(description="At most this many memories.")] = 50,
        offset: Annotated[Offset, Field(description="Skip this many first.")] = 0,
        metadata: Annotated[dict[str, Any] | None, Field(description=METADATA_FILTER)] = None,
    ) -> ItemsOut:
        """List the stored memories, oldest first."""
        items = call("get_memories", memory.get_all, user_of(), limit=limit, offset=offset, metadata=metadata)
        return ItemsOut(items=[MemoryOut.of(i) for i in items])

    @server.tool()
    def delete_memory(memory_id: Annotated[NonBlank, Field(description="The id of a memory, from another tool's result.")]
                      ) -> DeletedOut:
        """Forget one memory for good: its text, its history's texts and the messages only it came from."""
        check("delete_memory", memory_id=(memory_id, short))
        return DeletedOut(id=memory_id, removed=call("delete_memory", memory.delete, memory_id, user_of()))

    @server.tool()
    def build_context(
        query: Annotated[NonBlank, Field(description="The question the context is for.")],
        budget: Annotated[Budget | None, Field(description="Prompt budget in tokens; defaults to the memory's.")] = None,
        stm: Annotated[list[str] | None, Field(description="Recent turns of the conversation, oldest first.")] = None,
        k: Annotated[K | None, Field(description="Pack the best k memories; by default the best fill the budget.")] = None,
    ) -> ContextOut:
        """Compose a prompt: the query, then recent turns, then the best memories, within the token budget."""
        check("build_context", query=(query, long), stm=(stm, long))
        return ContextOut.of(call("build_context", memory.build_context, query, user_of(), stm=stm or (), budget=budget,
                                  k=k))


# -- stdio: every request answered ---------------------------------------------------------------
class LightMemMCPServer(MCPServer):
    """``MCPServer`` whose stdio transport answers every request, even one the SDK cannot read.

    The SDK's stdio transport parses each line with pydantic's JSON parser, which refuses a lone surrogate
    escape (``"\\ud800"``, valid JSON that Python's ``json`` reads) as invalid JSON; it hands the parse error
    to the session, which drops it with a debug log line: the client waits forever for an answer. Here
    such an item is answered (``_answer_unreadable``), and an answer that cannot be encoded as UTF-8 JSON is
    replaced by an error for the same request instead of ending the server (``_EncodableWrites``).
    """

    async def run_stdio_async(self) -> None:
        async with stdio_server() as (read_stream, write_stream):
            writes = _EncodableWrites(write_stream)
            await self._lowlevel_server.run(_AnsweringReads(read_stream, writes), writes,
                                            self._lowlevel_server.create_initialization_options())


def _unreadable_message(exc: Exception) -> tuple[Any, str]:
    """The JSON value of a line the SDK could not read as a JSON-RPC message (``None`` if it is not JSON), and
    why it could not (never the line itself)."""
    if not isinstance(exc, ValidationError):
        return None, f"unreadable ({type(exc).__name__})"
    errors = exc.errors()
    for e in errors:  # the line itself did not parse: a lone surrogate, NaN, garbage, nesting too deep
        if e["type"] == "json_invalid" and isinstance(e.get("input"), str):
            where = _label(e.get("ctx", {}).get("error", "decode error"), 80)  # e.g. "... at line 1 column 60"
            try:
                return json.loads(e["input"]), f"not JSON the MCP SDK reads ({where})"
            except (ValueError, RecursionError):
                return None, f"not valid JSON ({where})"
    for e in errors:  # valid JSON but not JSON-RPC: a union member's "missing" error carries the whole object
        if e["type"] == "missing" and isinstance(e.get("input"), dict):
            return e["input"], "not a valid JSON-RPC message"
    return [], "not a valid JSON-RPC message"


def _error(rid: str | int | None, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=rid, error=types.ErrorData(code=code, message=message))


def _answer_unreadable(exc: Exception) -> types.JSONRPCMessage | None:
    """The answer to a line the SDK could not read: for a ``tools/call`` whose arguments hold hostile text,
    an error result naming the argument and the problem (as the tool would answer it); for another request,
    a JSON-RPC error; for a line that is not JSON, a parse error (``id`` null); for a notification, none.
    Each is logged as a warning that names the tool or method and the problem, not the text. Never raises."""
    try:
        msg, why = _unreadable_message(exc)
        if msg is None:
            log.warning("MCP: a message that is %s was answered with a parse error", why)
            return _error(None, types.PARSE_ERROR, f"Parse error: the message is {why}")
        if not isinstance(msg, dict):
            log.warning("MCP: a message that is not a JSON-RPC object was refused")
            return _error(None, types.INVALID_REQUEST, "Invalid request: send one JSON-RPC object per line")
        rid, method, params = msg.get("id"), msg.get("method"), msg.get("params")
        if isinstance(rid, bool) or not isinstance(rid, (int, str)):
            rid = None
        if method == "tools/call" and isinstance(params, dict):
            tool, name = _label(params.get("name")), params.get("name")
            problem = next((f"argument {w!r} {p}" for w, s in _strings("", params.get("arguments"))
                            if (p := _problem(s)) is not None), None)
            if problem is None and isinstance(name, str) and (p := _problem(name)) is not None:
                problem = f"the tool name {p}"
            problem = problem or f"the request is {why}"
            log.warning("MCP tool %s refused a call: %s", tool, problem)
            if rid is None:  # a notification gets no answer; a request whose id is no id, an error without one
                return None if "id" not in msg else _error(None, types.INVALID_REQUEST, f"Invalid request: {problem}")
            return types.JSONRPCResponse(jsonrpc="2.0", id=rid, result={
                "content": [{"type": "text", "text": f"Error executing tool {tool}: {problem}"}], "isError": True})
        found = next(((w, p) for w, s in _strings("", params) if (p := _problem(s)) is not None), None)
        problem = f"parameter {found[0]!r} {found[1]}" if found else f"the message is {why}"
        log.warning("MCP message %s refused: %s", _label(method), problem)
        if "id" not in msg or "method" not in msg:
            return None  # a notification, or a response of the client: no answer
        return _error(rid, types.INVALID_PARAMS if found else types.INVALID_REQUEST, f"{_label(method)}: {problem}")
    except Exception:  # noqa: BLE001 - answering must not end the server
        log.exception("MCP: could not answer an unreadable message")
        return _error(None, types.INVALID_REQUEST, "Invalid request: unreadable message")


class _AnsweringReads:
    """The transport's read stream, less the items it could not parse: each is answered on ``writes`` instead
    of reaching the session (which drops it unanswered)."""

    def __init__(self, inner: Any, writes: Any) -> None:
        self._inner, self._writes = inner, writes

    @property
    def last_context(self) -> Any:  # the sender's context, for the session (see mcp.shared._context_streams)
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            answer = _answer_unreadable(item)
            if answer is not None:
                try:
                    await self._writes.send(SessionMessage(answer))
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    log.debug("MCP: the client left before an answer to an unreadable message")

    def __aiter__(self) -> "_AnsweringReads":
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    def close(self) -> None:
        self._inner.close()

    async def __aenter__(self) -> "_AnsweringReads":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _EncodableWrites:
    """The transport's write stream, checking first that each message encodes as UTF-8 JSON: one that does
    not (a lone surrogate in a result) would end the transport's writer, and the server with it; it is
    replaced by an error answer to the same request."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def send(self, item: SessionMessage) -> None:
        try:
            item.message.model_dump_json(by_alias=True, exclude_unset=True).encode("utf-8")
        except (ValueError, UnicodeError) as exc:  # PydanticSerializationError is a ValueError
            rid = getattr(item.message, "id", None)
            log.warning("MCP: an answer to request %s could not be encoded as UTF-8 JSON (%s); sent an error instead",
                        _label(rid), type(exc).__name__)
            if rid is None:
                return
            item = SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=rid, error=types.ErrorData(
                code=types.INTERNAL_ERROR, message="the answer holds text that cannot be encoded as UTF-8")))
        await self._inner.send(item)

    def clone(self) -> "_EncodableWrites":
        return _EncodableWrites(self._inner.clone())

    def close(self) -> None:
        self._inner.close()

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> "_EncodableWrites":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def run_stdio(store: str, user_id: str, encoder: str | None = None, selector: str = "trained") -> None:
    """Serve the memory of ``user_id`` in ``store`` over stdin/stdout until the client closes it."""
    user_id = check_user_id(user_id)
    with open_memory(store, encoder, selector) as memory:
        create_mcp_server(memory, user_id).run("stdio")
