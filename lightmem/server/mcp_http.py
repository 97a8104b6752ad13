"""MCP over Streamable HTTP at ``/mcp`` of ``lightmem serve``: the stdio tools, for the users an API key covers.

Every request carries ``Authorization: Bearer <key>`` from the server's keys file (the keys of ``/v1``); without a
known key it is answered 401 before the MCP SDK reads it. Each tool takes one more argument than over stdio,
``user_id``, the user the call acts for: it must be one of the key's users (any user for an admin key), and may be
left out when the key covers exactly one user. A call for another user is an error result, and nothing runs.

The transport is stateless (no ``Mcp-Session-Id``; every POST is answered on its own, as JSON), so any worker of any
replica answers any request, and the tools are the stdio server's own (``mcp_server.add_tools``): each argument is
checked exactly as over stdio, and the Memory calls take the worker's lock, as the ``/v1`` routes do.
"""
from __future__ import annotations

import functools
import inspect
import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Annotated, Any

from fastapi.responses import JSONResponse
from fastapi.security.utils import get_authorization_scheme_param
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import Field
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from lightmem import __version__
from lightmem.errors import InvalidInputError
from lightmem.memory import Memory
from lightmem.server.auth import KeyRing, Principal
from lightmem.server.mcp_server import add_tools
from lightmem.server.schemas import UserId
from lightmem.validation import check_user_id

log = logging.getLogger(__name__)
PATH = "/mcp"
USER_ARG = ("The user whose memories these are; one of the users your API key covers. It may be left out when the "
            "key covers exactly one user.")
UNAUTHORIZED = "missing or invalid API key: send the header `Authorization: Bearer <key>`"

# Per request and per tool call, never process-wide: the endpoint sets the caller for the request's task, and the
# SDK runs the request's messages in the context they came with (its tools' threads get a copy of it).
_caller: ContextVar[Principal | None] = ContextVar("lightmem_mcp_caller", default=None)
_acting: ContextVar[str] = ContextVar("lightmem_mcp_user")


def acting_user(tool: str, user_id: str | None) -> str:
    """The user a call of ``tool`` acts for: ``user_id`` (or the key's only user when it is None), once checked as
    any user id is and found among the caller's users.

    Raises:
        ToolError: no caller (not reached through ``MCPEndpoint``), no ``user_id`` where the key covers several
            users, a malformed ``user_id``, or one the key does not cover (the message names only that user).
    """
    caller = _caller.get()
    if caller is None:
        raise ToolError(UNAUTHORIZED)
    if user_id is None:
        if caller.users is None or len(caller.users) != 1:
            raise ToolError("name the user this call acts for: pass user_id (this API key covers more than one user)")
        (user_id,) = caller.users
    try:
        user_id = check_user_id(user_id)
    except InvalidInputError as exc:
        raise ToolError(str(exc)) from exc
    if not caller.may_act_for(user_id):  # the check of /v1's routes (app.authorize), before the store is touched
        log.info("MCP tool %s refused: %s may not act for the user asked", tool, caller.label)
        raise ToolError(f"this API key may not act for user {user_id!r}")
    return user_id


def _taking_user_id(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (a stdio tool) with one more keyword argument, ``user_id``, whose user it acts for once allowed."""
    signature = inspect.signature(fn, eval_str=True)
    user = inspect.Parameter("user_id", inspect.Parameter.KEYWORD_ONLY, default=None,
                             annotation=Annotated[UserId | None, Field(description=USER_ARG)])

    def tool(*, user_id: str | None = None, **arguments: Any) -> Any:
        token = _acting.set(acting_user(fn.__name__, user_id))
        try:
            return fn(**arguments)
        finally:
            _acting.reset(token)

    functools.update_wrapper(tool, fn)  # its name and docstring: the tool's name and description
    tool.__signature__ = signature.replace(parameters=[*signature.parameters.values(), user])  # type: ignore[attr-defined]
    return tool


class _NamedUserServer(MCPServer):
    """An ``MCPServer`` each of whose tools takes the user it acts for as the argument ``user_id``."""

    def add_tool(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        super().add_tool(_taking_user_id(fn), *args, **kwargs)


def create_http_mcp_server(memory: Memory, lock: threading.Lock) -> MCPServer:
    """The stdio server's tools over ``memory``, each acting for the user its call names (``acting_user``).

    Args:
        memory: The worker's Memory.
        lock: The worker's Memory lock, which the ``/v1`` routes take too.
    """
    server = _NamedUserServer("lightmem", version=__version__, log_level="WARNING",
                              instructions="Long-term memory of the users your API key covers (each tool's user_id): "
                                           "remember what they say, search it before answering, build a prompt "
                                           "context within a token budget.")
    add_tools(server, memory, _acting.get, lock)
    return server


class MCPEndpoint:
    """The ASGI app at ``/mcp``: 401 without a known key, else the MCP server's stateless Streamable HTTP transport,
    with the key's principal set for the tools (``acting_user``).

    Args:
        keys: The server's API keys (those of ``/v1``).
    """

    def __init__(self, keys: KeyRing) -> None:
        self._keys = keys
        self._handle: ASGIApp | None = None

    @asynccontextmanager
    async def serving(self, memory: Memory, lock: threading.Lock) -> AsyncIterator[None]:
        """Answer MCP requests over ``memory`` while the context is open (inside the app's lifespan)."""
        server = create_http_mcp_server(memory, lock)
        # The Host and Origin checks guard a server without credentials against DNS rebinding; here every request
        # needs a key that a rebinding page does not have, and a hosted server answers under names of its own.
        server.streamable_http_app(stateless_http=True, json_response=True,
                                   transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
        manager = server.session_manager
        async with manager.run():
            self._handle = manager.handle_request
            try:
                yield
            finally:
                self._handle = None

    def _caller(self, scope: Scope) -> Principal | None:
        scheme, key = get_authorization_scheme_param(Headers(scope=scope).get("authorization"))
        return self._keys.identify(key) if scheme.lower() == "bearer" and key else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        caller = self._caller(scope)
        if caller is None:
            log.info("401 %s %s: %s", scope.get("method"), PATH,
                     "invalid key" if Headers(scope=scope).get("authorization") else "no key")
            response = JSONResponse({"detail": UNAUTHORIZED}, status_code=401, headers={"WWW-Authenticate": "Bearer"})
            await response(scope, receive, send)
            return
        if self._handle is None:  # only between the app's start and its lifespan's, or after its shutdown began
            await JSONResponse({"detail": "the MCP endpoint is not serving yet"}, status_code=503)(scope, receive, send)
            return
        token = _caller.set(caller)
        try:
            await self._handle(scope, receive, send)
        finally:
            _caller.reset(token)
