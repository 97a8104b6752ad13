"""The HTTP API: one ``Memory`` per worker process, many agents and users, API keys scoped to users.

The app only talks to ``Memory``, so it serves whatever store backend ``memory_factory`` opens.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import lightmem
from lightmem import metadata_filter, tracing
from lightmem.async_memory import freeze_loaded
from lightmem.batch import MAX_TURNS_PER_REQUEST
from lightmem.batch import plan as plan_batch
from lightmem.batch import run as run_batch
from lightmem.errors import InvalidInputError, ItemNotFoundError, StoreError, StoreFullError, encodable
from lightmem.memory import Memory
from lightmem.server.auth import KeyRing, Principal
from lightmem.server.console import console_router
from lightmem.server.mcp_http import PATH as MCP_PATH
from lightmem.server.mcp_http import MCPEndpoint
from lightmem.server.schemas import (
    MAX_LIMIT,
    MAX_OFFSET,
    USER_DOC,
    AddRequest,
    BatchOut,
    BatchRequest,
    BatchResultOut,
    ContextOut,
    ContextRequest,
    DeletedOut,
    ErrorOut,
    HistoryEventOut,
    HistoryOut,
    HitOut,
    HitsOut,
    ItemsOut,
    MemoryOut,
    PutRequest,
    SearchRequest,
    UpdateRequest,
    UserDeletedOut,
    UserId,
    UsersOut,
)
from lightmem.text import warm

if TYPE_CHECKING:
    from lightmem.server.metrics import ServerMetrics

log = logging.getLogger(__name__)
DEFAULT_MAX_BODY_BYTES = 1 << 20


class _Literal(Convertor):
    """A path parameter taken whole, slashes and line breaks included: Starlette's ``path`` matches ``.*``, which
    stops at a line break, and its ``$`` matched before a trailing one, so ``/v1/users/alice%0A`` named ``alice``
    and ``/v1/keys/a%0Ab`` was a 404. An identifier from a caller is what it says (validation decides whether it is
    allowed)."""

    regex = r"[\s\S]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return str(value)


register_url_convertor("literal", _Literal())
MemoryFactory = Callable[[], Memory]

_bearer = HTTPBearer(auto_error=False, description="An API key from the server's keys file.")
QueryUser = Annotated[UserId, Query(description=USER_DOC)]


def create_app(memory_factory: MemoryFactory, keys: KeyRing, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               metrics: ServerMetrics | None = None) -> FastAPI:
    """The FastAPI app of ``lightmem serve``.

    Args:
        memory_factory: Opens the ``Memory`` this worker serves; called once, at startup (models
            load then), and the memory is closed at shutdown.
        keys: The API keys accepted and the users each may act for.
        max_body_bytes: Larger request bodies are refused with 413 before they are read whole.
        metrics: Prometheus metrics of this worker (``lightmem.server.metrics``); None: no metrics, no middleware.
    """

    mcp = MCPEndpoint(keys)  # MCP over Streamable HTTP, same keys and users (lightmem/server/mcp_http.py)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.memory = await run_in_threadpool(memory_factory)
        # What opening loaded (models, tokenizers, views) lives as long as the worker: out of the collector's reach, a
        # full collection, which holds every request of the worker, no longer walks it (as AsyncMemory.open does).
        freeze_loaded()
        try:
            async with mcp.serving(app.state.memory, app.state.memory_lock):
                yield
        finally:
            await run_in_threadpool(app.state.memory.close)

    # FastAPI's own OpenTelemetry spans and logs stay off: they carry the URL's user ids and a refused body's text.
    app = FastAPI(title="lightmem", version=lightmem.__version__, lifespan=lifespan,
                  telemetry={"tracing": False, "metrics": False, "logs": False},
                  description="Long-term memory for LLM agents. Every call names the user it acts for; "
                              "an API key acts only for the users the keys file gives it.")
    app.state.keys = keys
    # Memory makes no promise of thread safety (tokenizers, caches), so a worker runs one Memory call
    # at a time, off the event loop; more throughput comes from more workers (processes).
    app.state.memory_lock = threading.Lock()
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    if metrics is not None or tracing.enabled():  # outermost: a refused body is counted too
        from lightmem.server.metrics import Observe

        app.add_middleware(Observe, metrics=metrics)
    app.add_exception_handler(RequestValidationError, _malformed)
    app.add_exception_handler(StarletteHTTPException, _unreadable_body)
    app.add_exception_handler(InvalidInputError, _invalid)
    app.add_exception_handler(ItemNotFoundError, _not_found)
    app.add_exception_handler(StoreFullError, _store_full)
    app.add_exception_handler(StoreError, _store_unavailable)
    app.include_router(_routes())
    app.include_router(console_router(_public_index_status))  # the web console at /ui
    app.add_route(MCP_PATH, mcp, include_in_schema=False)  # any method: the MCP transport answers each
    return app


# -- auth and access to the memory ------------------------------------------------------------
def principal(request: Request, cred: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Principal:
    """The caller of a request: 401 unless it carries a known key as ``Authorization: Bearer KEY``."""
    found = request.app.state.keys.identify(cred.credentials) if cred is not None else None
    if found is None:
        log.info("401 %s %s: %s", request.method, request.url.path, "invalid key" if cred else "no key")
        raise HTTPException(401, "missing or invalid API key: send the header `Authorization: Bearer <key>`",
                            headers={"WWW-Authenticate": "Bearer"})
    return found


Caller = Annotated[Principal, Depends(principal)]


def authorize(caller: Principal, user_id: str) -> None:
    """403 unless the caller's key covers ``user_id`` (checked before the store is touched)."""
    if not caller.may_act_for(user_id):
        log.info("403: %s may not act for the user asked", caller.label)
        raise HTTPException(403, f"this API key may not act for user {user_id!r}")


@contextmanager
def memory_of(request: Request) -> Iterator[Memory]:
    with request.app.state.memory_lock:
        yield request.app.state.memory


# -- routes (sync functions: FastAPI runs them in its threadpool) -------------------------------
_ERRORS = {
    401: "No key, or not a key of the keys file.",
    403: "The key may not act for this user.",
    404: "This user has no such memory.",
    413: "The request body is over the server's limit.",
    422: "A malformed or invalid request: `message` names each bad field.",
}


def _errors(*codes: int) -> dict[int | str, dict]:
    """The OpenAPI entries of the error answers a route gives, so clients (and fuzzers) know them."""
    return {code: {"model": ErrorOut, "description": _ERRORS[code]} for code in codes}


def _routes() -> APIRouter:
    r = APIRouter()
    write, read, item = _errors(401, 403, 413, 422), _errors(401, 403, 422), _errors(401, 403, 404, 422)

    @r.get("/healthz", tags=["ops"])
    def healthz(request: Request) -> dict[str, Any]:
        """Liveness; this worker's per-user in-memory views (count, estimated MiB, ceiling, hits, misses,
        evictions): what an operator watches to size ``--cache-mb``; and its background indexer (backlog of
        memories stored but not yet embedded, items per second, lags)."""
        memory = request.app.state.memory
        return {"status": "ok", "version": lightmem.__version__, "views": memory.store.cache_stats(),
                "index": _public_index_status(memory.index_status())}

    @r.post("/v1/memories", status_code=201, tags=["memories"], responses=write)
    def add(body: AddRequest, caller: Caller, request: Request) -> ItemsOut:
        """Remember messages; answers once the turns and their items are committed."""
        authorize(caller, body.user_id)
        msgs = [m.model_dump(exclude_none=True) for m in body.messages]
        # A long turn's text analysis (stemming words never seen) runs here, outside the worker's lock: other
        # users' requests are answered meanwhile, and the write inside the lock finds the stems cached.
        warm([m.text for m in body.messages if len(m.text) <= request.app.state.memory.max_turn_chars])
        with memory_of(request) as memory:
            items = memory.add(msgs, user_id=body.user_id, session_id=body.session_id, policy=body.policy)
        return ItemsOut(items=[MemoryOut.of(i) for i in items])

    @r.post("/v1/search", tags=["memories"], responses=write)
    def search(body: SearchRequest, caller: Caller, request: Request) -> HitsOut:
        authorize(caller, body.user_id)
        filters = body.filters.model_dump(exclude_none=True) if body.filters else None
        with memory_of(request) as memory:
            hits = memory.search(body.query, body.user_id, k=body.k, filters=filters, budget=body.budget,
                                 threshold=body.threshold)
        return HitsOut(hits=[HitOut.of(h) for h in hits])

    @r.post("/v1/context", tags=["memories"], responses=write)
    def context(body: ContextRequest, caller: Caller, request: Request) -> ContextOut:
        """A prompt: query > recent turns (``stm``) > memories, within ``budget`` tokens."""
        authorize(caller, body.user_id)
        filters = body.filters.model_dump(exclude_none=True) if body.filters else None
        with memory_of(request) as memory:
            ctx = memory.build_context(body.query, body.user_id, stm=body.stm, budget=body.budget, k=body.k,
                                       filters=filters)
        return ContextOut.of(ctx)

    @r.get("/v1/memories", tags=["memories"], responses=read)
    def list_items(user_id: QueryUser, caller: Caller, request: Request,
                   limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 100, offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
                   include_archived: bool = False,
                   metadata: Annotated[str | None, Query(description='A metadata filter as JSON, e.g. {"topic": "sport", '
                                                                     '"rank": {"$gte": 3}} (as in search filters).')] = None
                   ) -> ItemsOut:
        authorize(caller, user_id)
        spec = None if metadata is None else metadata_filter.loads(metadata, "query parameter metadata")
        with memory_of(request) as memory:
            items = memory.get_all(user_id, include_archived=include_archived, limit=limit, offset=offset, metadata=spec)
        return ItemsOut(items=[MemoryOut.of(i) for i in items])

    @r.get("/v1/memories/{item_id}", tags=["memories"], responses=item)
    def get(item_id: str, user_id: QueryUser, caller: Caller, request: Request) -> MemoryOut:
        authorize(caller, user_id)
        with memory_of(request) as memory:
            return MemoryOut.of(memory.get(item_id, user_id, include_archived=True))

    @r.patch("/v1/memories/{item_id}", tags=["memories"], responses=_errors(401, 403, 404, 413, 422))
    def update(item_id: str, body: UpdateRequest, user_id: QueryUser, caller: Caller, request: Request) -> MemoryOut:
        """Change a memory's text (re-embedded), topic or metadata. A new text replaces the old one for
        good (the history keeps the event, not the text) unless ``keep_history`` is true."""
        authorize(caller, user_id)
        fields = body.model_dump(exclude_none=True)
        with memory_of(request) as memory:
            return MemoryOut.of(memory.update(item_id, user_id, **fields))

    @r.delete("/v1/memories/{item_id}", tags=["memories"], responses=item)
    def delete(item_id: str, user_id: QueryUser, caller: Caller, request: Request) -> DeletedOut:
        """Erase a memory: its text, the texts of its history and its source turns no other memory cites."""
        authorize(caller, user_id)
        with memory_of(request) as memory:
            removed = memory.delete(item_id, user_id)
        return DeletedOut(id=item_id, removed=removed)

    @r.post("/v1/batch", tags=["memories"], responses=_errors(401, 403, 404, 413, 422))
    def batch(body: BatchRequest, caller: Caller, request: Request) -> BatchOut:
        """Adds, updates and deletions, up to 1,000, in order, with at most 2,000 turns and changed memories in all
        (an add counts its turns). Every operation is checked and authorized before the
        first write (a bad one: 422 or 403 naming its index, nothing written). Each commits on its own with a status
        per operation, or with ``atomic`` all together or none (the first error answers, naming its index)."""
        for i, op in enumerate(body.ops):
            if not caller.may_act_for(op.user_id):
                log.info("403: %s may not act for the user of a batch operation", caller.label)
                raise HTTPException(403, f"ops[{i}]: this API key may not act for user {op.user_id!r}")
        ops = [op.model_dump(exclude_none=True) for op in body.ops]
        memory = request.app.state.memory
        # every operation checked before the first write, and the work of all of them bounded as POST /v1/memories'
        # turns are (an atomic batch holds the worker until it commits); the store is not read
        planned = plan_batch(memory, ops, max_turns=MAX_TURNS_PER_REQUEST)
        warm([m["text"] for op in ops if op["op"] == "add" for m in op["messages"]])  # checked: none is over the limit
        try:  # the lock per operation: other requests go between the operations of a batch that is not atomic
            results = run_batch(memory, planned, atomic=body.atomic, each=lambda: memory_of(request))
        except ItemNotFoundError as exc:
            if getattr(exc, "op_index", None) is None:
                raise
            raise ItemNotFoundError(f"ops[{exc.op_index}]: {exc.args[0] if exc.args else exc}; nothing of the "
                                    "atomic batch was written") from exc
        return BatchOut(results=[BatchResultOut.of(r) for r in results])

    @r.put("/v1/keys/{key:literal}", tags=["keys"], responses=_errors(401, 403, 413, 422))
    def put(key: Annotated[str, Path(min_length=1, max_length=256)], body: PutRequest, user_id: QueryUser,
            caller: Caller, request: Request) -> MemoryOut:
        """Write the memory ``key`` names for the user: a new one, or in place of the one it named (erased)."""
        authorize(caller, user_id)
        with memory_of(request) as memory:
            return MemoryOut.of(memory.put(key, body.text, user_id, metadata=body.metadata, timestamp=body.timestamp))

    @r.get("/v1/keys/{key:literal}", tags=["keys"], responses=item)
    def get_by_key(key: Annotated[str, Path(min_length=1, max_length=256)], user_id: QueryUser, caller: Caller,
                   request: Request) -> MemoryOut:
        authorize(caller, user_id)
        with memory_of(request) as memory:
            return MemoryOut.of(memory.get_by_key(key, user_id))

    @r.post("/v1/memories/{item_id}/archive", tags=["memories"], responses=item)
    def archive(item_id: str, user_id: QueryUser, caller: Caller, request: Request) -> MemoryOut:
        """Hide a memory from search without deleting it (``restore`` brings it back)."""
        authorize(caller, user_id)
        with memory_of(request) as memory:
            return MemoryOut.of(memory.archive(item_id, user_id))

    @r.post("/v1/memories/{item_id}/restore", tags=["memories"], responses=item)
    def restore(item_id: str, user_id: QueryUser, caller: Caller, request: Request) -> MemoryOut:
        authorize(caller, user_id)
        with memory_of(request) as memory:
            return MemoryOut.of(memory.restore(item_id, user_id))

    @r.get("/v1/users", tags=["users"], responses=_errors(401, 403))
    def users(caller: Caller, request: Request) -> UsersOut:
        """Every user the store holds (admin keys only)."""
        if caller.users is not None:
            raise HTTPException(403, "only an admin key may list the users")
        with memory_of(request) as memory:
            return UsersOut(users=memory.users())

    @r.get("/v1/memories/{item_id}/history", tags=["memories"], responses=item)
    def history(item_id: str, user_id: QueryUser, caller: Caller, request: Request) -> HistoryOut:
        authorize(caller, user_id)
        with memory_of(request) as memory:
            events = memory.history(item_id, user_id)
        if not events:  # the same answer for an id that never existed and one of another user
            raise ItemNotFoundError(f"user {user_id!r} has no item {item_id!r}")
        return HistoryOut(id=item_id, events=[HistoryEventOut.of(e) for e in events])

    @r.delete("/v1/users/{user_id:literal}", tags=["users"], responses=read)
    def delete_user(user_id: Annotated[UserId, Path(description=USER_DOC)], caller: Caller, request: Request) -> UserDeletedOut:
        """Erase everything of a user: turns, memories and history."""
        authorize(caller, user_id)
        with memory_of(request) as memory:
            removed = memory.delete_user(user_id)
        return UserDeletedOut(user_id=user_id, removed=removed)

    return r


def _public_index_status(status: dict[str, Any]) -> dict[str, Any]:
    """The indexer's status for ``/healthz``, which answers without a key: ``last_error`` says only the kind of
    error (its exception class, e.g. ``StoreFullError``), never its message, which may name the store's
    filesystem path (a full disk) or a database host; the worker's log has the whole message."""
    error = status.get("last_error")
    if isinstance(error, str):
        kind = error.split(":", 1)[0].strip()
        status = {**status, "last_error": kind if kind.isidentifier() else "error (see the server log)"}
    return status


# -- errors ------------------------------------------------------------------------------------
async def _malformed(request: Request, exc: RequestValidationError) -> JSONResponse:
    """422 with the standard error list and one line naming each bad field."""
    errors = exc.errors()
    where = "; ".join(_describe(e) for e in errors)
    # Not the input: it may be memory text. A location may hold a name from the body (an unknown field's), and a lone
    # surrogate in it, which no answer can encode: escaped, as every lightmem error message escapes it.
    detail = [{k: [_encodable(p) for p in v] if k == "loc" else _encodable(v) for k, v in e.items()
               if k in ("loc", "msg", "type")} for e in errors]
    return JSONResponse({"detail": detail, "message": encodable(f"malformed request: {where}")}, status_code=422)


def _encodable(value: Any) -> Any:
    return encodable(value) if isinstance(value, str) else value


def _describe(error: dict) -> str:
    if error["type"] == "json_invalid":
        return f"the body is not valid JSON ({error.get('ctx', {}).get('error', 'decode error')} at character {error['loc'][-1]})"
    return f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}"


async def _unreadable_body(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    """422, like any malformed request, for a body FastAPI cannot decode (its 400); others unchanged."""
    if exc.status_code != 400:
        return await http_exception_handler(request, exc)
    why = {UnicodeDecodeError: "not UTF-8 text", RecursionError: "nested too deep"}.get(type(exc.__cause__), "unreadable")
    message = f"malformed request: the body is not valid JSON ({why})"
    return JSONResponse({"detail": message, "message": message}, status_code=422)


async def _invalid(request: Request, exc: InvalidInputError) -> JSONResponse:
    return JSONResponse({"detail": str(exc), "message": str(exc)}, status_code=422)


async def _not_found(request: Request, exc: ItemNotFoundError) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=404)


async def _store_full(request: Request, exc: StoreFullError) -> JSONResponse:
    """507 Insufficient Storage: nothing of the request was stored; the same request succeeds once space is freed."""
    log.error("507 %s %s: %s", request.method, request.url.path, exc)
    return JSONResponse({"detail": str(exc)}, status_code=507)


async def _store_unavailable(request: Request, exc: StoreError) -> JSONResponse:
    """503: the store cannot serve this (read-only, corrupt...), which no change to the request fixes; an
    operator must (the message says how), so it is not a 500 (a bug) and clients may retry later."""
    log.error("503 %s %s: %s", request.method, request.url.path, exc)
    return JSONResponse({"detail": str(exc)}, status_code=503)


class BodyLimit:
    """413 for a request body over ``max_bytes``: at once from Content-Length, else as chunks arrive."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    def _refusal(self) -> JSONResponse:
        return JSONResponse({"detail": f"request body over the server's limit of {self.max_bytes} bytes"}, status_code=413)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self._refusal()(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:  # raised inside the body read: FastAPI answers it as an HTTPException
                    raise HTTPException(413, f"request body over the server's limit of {self.max_bytes} bytes")
            return message

        await self.app(scope, counted, send)
