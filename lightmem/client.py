"""Clients of ``lightmem serve``: ``Memory``'s methods over its HTTP API, from Python.

``MemoryClient(base_url, api_key)`` (blocking) and ``AsyncMemoryClient(base_url, api_key)`` (coroutines) have the
names, arguments, return types and exceptions of ``lightmem.Memory`` where the HTTP API carries them, so code written
for a local ``Memory`` runs against a server::

    from lightmem.client import MemoryClient

    with MemoryClient("http://127.0.0.1:8000", api_key="<alice key>") as memory:
        memory.add("I adopted a dog named Rex", user_id="alice")
        hits = memory.search("What is my dog called?", user_id="alice")      # [Hit], as Memory.search

They need only httpx (one ``httpx.Client`` / ``httpx.AsyncClient`` each: keep-alive connections), never the server
package. Both share one request and decode layer: each method is written once here as an
operation (a generator of HTTP requests that returns the result), which the blocking client runs with
``httpx.Client`` and the async one with ``httpx.AsyncClient``.

**Methods.** add, batch, put, get_by_key, search, build_context, get, get_all, update, archive, restore, delete,
delete_user, history, users; close (``aclose``) and the context managers. ``Memory``'s methods that the HTTP API
does not offer are left out: ``open``, ``add_turns``, ``flush``, ``pending``, ``consolidate``,
``wait_for_consolidation``, ``sources``, ``retrieve``, ``usage``, ``stats``, ``flush_index``, ``index_status`` and
``ltm_stats`` (the server runs its own indexer and consolidation; ``GET /healthz`` shows its indexer).

**Arguments the HTTP API does not carry** are left out of the signatures, so a call using one fails at once
instead of being ignored: ``add(context=...)``, ``search(stm=..., now=...)``, ``build_context(now=...)``
(``search``'s ``budget`` and ``threshold`` are keyword-only, since the arguments before them in ``Memory`` are missing). A message's ``caption`` and an add operation's ``context`` raise ``InvalidInputError``;
a message's own ``session_id`` must be the call's (the API takes one per request).

**Records rebuilt from the answers.** ``MemoryItem`` from a memory's JSON (``id, user_id, text, provenance, kind,
event_time, created_at, topic, entities, archived, superseded_by, metadata``); what the JSON lacks takes
``MemoryItem``'s defaults (``access_count=0``, ``utility=1.0``, ``valid_from``/``valid_to`` None, ``n_tokens=0``,
``keys=""``), and ``last_access``, which has none, is ``created_at``. A field a newer server adds to the answer
is taken when ``MemoryItem`` has it. ``Hit.item`` is built from a hit's ``id, text, provenance, event_time, kind``
(``user_id`` the caller's; ``created_at`` and ``last_access`` are ``event_time``; metadata, topic and entities
empty; ``hq=""``, ``row=None``): ``get`` reads a hit's memory whole. ``ComposedContext.memories`` holds one
``MemoryItem`` per id of the answer's ``memory_ids`` with only ``id`` and ``user_id`` set (text ``""``, times 0,
their text is in the prompt), in rank order with ``prompt_order`` as ``Memory.build_context`` gives them. ``HistoryEvent`` is whole.

**Where behaviour differs.** ``get_all`` reads pages of at most 1,000 memories (the server's bound) until ``limit``
or the end, so a listing of more is several requests, not one snapshot. ``history`` of an unknown id is ``[]``, as
``Memory.history`` (the server answers 404). An id or key holding ``/`` cannot be addressed in a URL path: an item
id (none has one) is ``ItemNotFoundError``, a key or a ``delete_user`` user id ``InvalidInputError``. ``users()``
needs an admin key. Calls are not retried: after ``ServerUnavailableError`` a write may or may not have been
applied (the message says what is known); an ``add`` whose messages carry their own ``id`` stores nothing twice
when sent again.

**Timeout and size.** ``timeout`` bounds each request whole, from connecting to the answer's last byte: httpx's
own timeout bounds each socket operation only, so a server sending a byte a second would never trip it. The blocking
client gives every connect, read and write of a request only what is left of its deadline (``_DeadlineBackend``);
the async one cancels the request at its deadline (``anyio.fail_after``). A paged ``get_all`` has a deadline per
page. Answers are read as they stream in: one larger than ``max_response_bytes`` (``DEFAULT_MAX_RESPONSE_BYTES``,
64 MiB; a full page of 1,000 memories is a few MB) is refused with ``ServerError`` once its ``Content-Length`` or
its bytes pass the cap, never read whole.

**Errors** are ``lightmem.errors``' classes, with the server's message and the answer's ``status_code``:
422 and 413 ``InvalidInputError``; 404 ``ItemNotFoundError``; 507 ``StoreFullError``; 503 ``StoreError``;
401 and 403 ``AuthError``; no answer (refused connection, dropped connection, timeout), 502 and 504
``ServerUnavailableError`` (a ``StoreError``) naming the URL; anything else (a 500, a route the server does not
have, an answer that is not JSON, that is nested past the parser's depth, that lacks a field or holds one of the
wrong type, or that is larger than ``max_response_bytes``) ``ServerError``, never the ``TypeError``, ``KeyError`` or
``RecursionError`` of decoding it.
"""
from __future__ import annotations

import dataclasses
import json
import math
import numbers
import time
from collections.abc import Generator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import date
from typing import Any, TypeVar
from urllib.parse import quote

import anyio
import httpcore
import httpx

from lightmem.errors import (
    InvalidInputError,
    ItemNotFoundError,
    LightMemError,
    StoreError,
    StoreFullError,
    shown,
)
from lightmem.timeutil import parse_timestamp
from lightmem.types import ComposedContext, Filters, HistoryEvent, Hit, ItemKind, MemoryItem
from lightmem.validation import check_id, check_threshold, message_list

__all__ = ["MemoryClient", "AsyncMemoryClient", "AuthError", "ServerUnavailableError", "ServerError"]

T = TypeVar("T")
DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_RESPONSE_BYTES = 64 * 2**20  # the largest answer read (a full page of get_all is a few MB)
PAGE = 1000  # the most memories one GET /v1/memories returns (the server's MAX_LIMIT)


# -- errors ------------------------------------------------------------------------------------
class AuthError(LightMemError):
    """401: no key or an unknown one; 403: the key may not act for this user (or list users)."""


class ServerUnavailableError(StoreError):
    """No answer from the server: the connection was refused or dropped, or the call ran past its timeout."""


class ServerError(LightMemError):
    """An answer the client cannot read as the API's: a 500 (a bug of the server), a route it does not have
    (another service at ``base_url``, or an older server), a body that is not JSON."""


# -- the shared layer: requests, answers, records ----------------------------------------------
@dataclass(frozen=True)
class _Request:
    method: str
    path: str  # its variable segments quoted (_segment)
    params: dict[str, Any] | None = None
    body: Any = None  # JSON-ready, or None for no body

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


# An operation: yields the requests it needs, is sent each answer's JSON (or thrown its error), returns the result.
Op = Generator[_Request, Any, T]
_WRITE = {"POST", "PUT", "PATCH", "DELETE"}
_STATUS = {422: InvalidInputError, 413: InvalidInputError, 404: ItemNotFoundError, 507: StoreFullError,
           503: StoreError, 401: AuthError, 403: AuthError, 502: ServerUnavailableError, 504: ServerUnavailableError}


class _Base:
    """What both clients share: the address, the key, and turning a request into httpx's and an answer back."""

    def __init__(self, base_url: str, api_key: str, timeout: float | None = DEFAULT_TIMEOUT,
                 headers: Mapping[str, str] | None = None,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES) -> None:
        try:
            scheme = httpx.URL(base_url).scheme if isinstance(base_url, str) else None
        except httpx.InvalidURL:
            scheme = None
        if scheme not in ("http", "https"):
            raise InvalidInputError(f"base_url must be an http(s) address such as 'http://127.0.0.1:8000', got "
                                    f"{shown(base_url)}")
        if not isinstance(api_key, str) or not api_key.strip():
            raise InvalidInputError("api_key must be one of the server's API keys (a non-empty string)")
        if isinstance(max_response_bytes, bool) or not isinstance(max_response_bytes, int) or max_response_bytes < 1:
            raise InvalidInputError(f"max_response_bytes must be a positive whole number of bytes, got "
                                    f"{shown(max_response_bytes)}")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self._options = {"base_url": self.base_url, "timeout": timeout,
                         # identity: the body is read raw and counted as it arrives, so that a compressed answer
                         # cannot expand past max_response_bytes inside one decompressed chunk
                         "headers": {**(headers or {}), "Accept-Encoding": "identity", "Authorization": f"Bearer {api_key}"}}

    def __repr__(self) -> str:  # never the key
        return f"{type(self).__name__}({self.base_url!r})"

    def _args(self, request: _Request) -> dict[str, Any]:
        args: dict[str, Any] = {"method": request.method, "url": request.path, "params": request.params}
        if request.body is not None:
            args["content"] = _dumps(request.body, "the request")
            args["headers"] = {"Content-Type": "application/json"}
        return args

    def _began(self, request: _Request, response: httpx.Response) -> bytearray:
        """An empty buffer for the answer's body, once its declared length is within ``max_response_bytes``."""
        length = response.headers.get("Content-Length", "")
        if length.isdigit() and int(length) > self.max_response_bytes:
            raise self._too_large(request, response)
        coding = response.headers.get("Content-Encoding", "identity").strip().lower()
        if coding not in ("", "identity"):  # asked for identity: a compressed answer is not read at all
            raise _error(ServerError, f"{request} at {self.base_url}: the answer ({response.status_code}) came "
                                      f"compressed ({coding[:40]!r}) although the client asked for none; it was not read",
                         response.status_code)
        return bytearray()

    def _took(self, request: _Request, response: httpx.Response, body: bytearray, chunk: bytes) -> None:
        """``chunk`` added to ``body``, or ``ServerError`` once the answer passes ``max_response_bytes``."""
        body += chunk
        if len(body) > self.max_response_bytes:
            raise self._too_large(request, response)

    def _too_large(self, request: _Request, response: httpx.Response) -> ServerError:
        return _error(ServerError, f"{request} at {self.base_url}: the answer ({response.status_code}) is larger than "
                                   f"max_response_bytes ({self.max_response_bytes:,} bytes) and was not read: ask for "
                                   "less (a smaller limit or k), or give the client a larger max_response_bytes",
                      response.status_code)

    def _step(self, op: Op[T], answer: Any, error: LightMemError | None,
              last: tuple[_Request, int] | None) -> tuple[_Request | None, T | None]:
        """The operation's next request (and None), or (None and) its result. ``last``: the request and the status
        of the answer it is decoding, None before the first. An answer the operation cannot decode (a list where an
        object belongs, a missing key, a field of the wrong type) is ``ServerError``, as a body that is not JSON."""
        try:
            return op.throw(error) if error is not None else op.send(answer), None
        except StopIteration as done:
            return None, done.value
        except LightMemError:
            raise
        except Exception as exc:
            if last is None:  # before any request: the caller's arguments, as they are
                raise
            request, status = last
            raise _error(ServerError, f"{request} at {self.base_url}: the answer ({status}) is not the API's "
                                      f"({type(exc).__name__}: {str(exc)[:200]}): is base_url the address of "
                                      "`lightmem serve`, as new as this client?", status) from exc

    def _answer(self, request: _Request, response: httpx.Response, body: bytes | bytearray) -> Any:
        """The answer's JSON, or the exception its status stands for, with the server's message."""
        try:
            data = json.loads(body) if body else None
        except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
            data = None
        if response.is_success:
            if data is None:
                raise _error(ServerError, f"{request} at {self.base_url}: the answer ({response.status_code}) is not "
                                          "JSON: is base_url the address of `lightmem serve`?", response.status_code)
            return data
        message = _message(data) or response.reason_phrase or f"HTTP {response.status_code}"
        if response.status_code == 404 and message == "Not Found":  # the router's answer, not a missing memory
            raise _error(ServerError, f"{request} at {self.base_url}: 404, no such route: is base_url the address of "
                                      "`lightmem serve`, as new as this client?", 404)
        kind = _STATUS.get(response.status_code, ServerError)
        if kind is ServerError or kind is ServerUnavailableError:
            message = f"{request} at {self.base_url}: {response.status_code} {message}"
        raise _error(kind, message, response.status_code)

    def _unavailable(self, request: _Request, exc: httpx.HTTPError) -> ServerUnavailableError:
        if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)):
            what, sent = "could not be reached", "nothing was sent"
        elif isinstance(exc, httpx.TimeoutException):
            what, sent = f"did not answer within {self.timeout} s", "it may still be working on it"
        else:
            what, sent = "dropped the connection", "no answer came"
        if request.method in _WRITE and sent != "nothing was sent":
            sent += "; whether the write was applied is unknown (read it back, or send it again)"
        return _error(ServerUnavailableError, f"the lightmem server at {self.base_url} {what} ({request}: "
                                              f"{type(exc).__name__}: {str(exc) or 'no detail'}); {sent}", None)


def _error(kind: type[LightMemError], message: str, status: int | None) -> Any:
    exc = kind(message)
    exc.status_code = status  # type: ignore[attr-defined]
    return exc


def _message(data: Any) -> str:
    """The server's sentence: ``message`` (422: every bad field in one line), else ``detail``."""
    if not isinstance(data, Mapping):
        return ""
    if isinstance(data.get("message"), str):
        return data["message"]
    detail = data.get("detail")
    if isinstance(detail, str) or detail is None:
        return detail or ""
    try:
        return json.dumps(detail)
    except (TypeError, ValueError, RecursionError):  # nested deeper than the encoder goes
        return ""


def _dumps(value: Any, what: str) -> bytes:
    """Standard JSON (no NaN), or ``InvalidInputError`` as ``Memory`` raises for what it cannot store."""
    try:
        return json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:  # UnicodeEncodeError is a ValueError
        raise InvalidInputError(f"{what} must be JSON-serialisable with finite numbers and valid Unicode "
                                f"({str(exc)[:120]})") from exc


def _segment(value: object, what: str, user_id: str | None = None) -> str:
    """``value`` quoted as one URL path segment. A key or a user id may hold ``/`` (their routes take the rest of
    the path); an item id holding one names no memory (none has one)."""
    value = check_id(value, what)
    if "/" in value and what == "item_id":
        raise ItemNotFoundError(f"user {user_id!r} has no item {value!r}")
    quoted = quote(value, safe="")
    return quoted.replace(".", "%2E") if set(value) == {"."} else quoted  # "." and ".." are no path steps


def _time(value: Any) -> Any:
    """A timestamp as JSON carries it: a datetime or date as Unix seconds, a numpy number as a float."""
    if isinstance(value, date):
        return parse_timestamp(value)
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, int, float)):
        return float(value)
    return value


_ITEM_FIELDS = {f.name for f in dataclasses.fields(MemoryItem)}
_NUMBER, _OPTIONAL_NUMBER, _OPTIONAL_STR = (int, float), (int, float, type(None)), (str, type(None))
# The JSON type of each MemoryItem field an answer may carry: anything else is an answer that is not the API's.
_ITEM_TYPES: dict[str, tuple[type, ...]] = {
    "id": (str,), "user_id": (str,), "text": (str,), "keys": (str,), "kind": _OPTIONAL_STR, "topic": _OPTIONAL_STR,
    "superseded_by": _OPTIONAL_STR, "provenance": (list, type(None)), "entities": (list, type(None)),
    "metadata": (dict, type(None)), "archived": (bool,), "access_count": (int,), "n_tokens": (int,),
    "created_at": _NUMBER, "event_time": _NUMBER, "last_access": _NUMBER, "utility": _NUMBER,
    "valid_from": _OPTIONAL_NUMBER, "valid_to": _OPTIONAL_NUMBER, "updated_at": _OPTIONAL_NUMBER}


def _typed(value: Any, types: tuple[type, ...], what: str) -> Any:
    """``value`` if JSON gave it one of ``types`` (a bool is no number), else ``TypeError`` (``_step``: ServerError)."""
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        raise TypeError(f"{what} is {type(value).__name__}, not {' or '.join(t.__name__ for t in types)}")
    return value


def _strings(value: Any, what: str) -> list[str]:
    return [_typed(v, (str,), f"an element of {what}") for v in _typed(value, (list,), what)]


def _item(data: Mapping[str, Any], user_id: str | None = None) -> MemoryItem:
    """A ``MemoryItem`` from a memory's JSON (``MemoryOut``): its fields, ``MemoryItem``'s defaults for the rest."""
    _typed(data, (dict,), "a memory")
    kw = {k: _typed(v, _ITEM_TYPES.get(k, (object,)), k) for k, v in data.items() if k in _ITEM_FIELDS}
    kw.setdefault("user_id", user_id)
    kw.setdefault("text", "")
    kw.setdefault("event_time", 0.0)
    kw.setdefault("created_at", kw["event_time"])
    kw.setdefault("last_access", kw["created_at"])
    _typed(kw["user_id"], (str,), "user_id")
    kw["provenance"] = _strings(kw.get("provenance") or [], "provenance")
    if kw.get("entities") is not None:
        _strings(kw["entities"], "entities")
    for key in ("metadata", "entities"):  # null: the default (an empty dict, list)
        if kw.get(key) is None:
            kw.pop(key, None)
    kw["kind"] = ItemKind(kw.get("kind") or ItemKind.EPISODIC.value)
    return MemoryItem(**kw)


def _hit(data: Mapping[str, Any], user_id: str) -> Hit:
    item = _item({k: v for k, v in _typed(data, (dict,), "a hit").items() if k not in ("score", "scores")}, user_id)
    scores = {_typed(k, (str,), "a score's name"): float(_typed(v, _NUMBER, "a score"))
              for k, v in _typed(data.get("scores") or {}, (dict,), "scores").items()}
    return Hit(item=item, scores=scores, score=float(_typed(data["score"], _NUMBER, "score")))


def _context(data: Mapping[str, Any], user_id: str) -> ComposedContext:
    _typed(data, (dict,), "the context")
    if isinstance(data.get("memories"), list):  # a server that sends the memories whole
        memories = tuple(_item(m, user_id) for m in data["memories"])
    else:
        memories = tuple(_item({"id": i}, user_id) for i in _strings(data.get("memory_ids", []), "memory_ids"))
    counts = {k: _typed(data[k], (int,), k) for k in ("n_tokens", "budget", "stm_turns_kept", "dropped_memories")}
    ranked = _strings(data.get("ranked_ids") or [], "ranked_ids")
    order: tuple[int, ...] = ()
    if ranked and sorted(ranked) == sorted(m.id for m in memories):  # memory_ids in prompt order, these by rank
        at = {m.id: i for i, m in enumerate(memories)}
        memories, order = tuple(memories[at[i]] for i in ranked), tuple(ranked.index(m.id) for m in memories)
    return ComposedContext(prompt=_typed(data["prompt"], (str,), "prompt"), memories=memories, prompt_order=order, **counts)


def _counts(data: Any) -> dict[str, int]:
    """``removed``: the counts a delete erased, by what they counted."""
    return {_typed(k, (str,), "a count's name"): _typed(v, (int,), k)
            for k, v in _typed(data, (dict,), "removed").items()}


def _result(data: Mapping[str, Any]) -> dict[str, Any]:
    """A batch operation's result as ``Memory.batch`` gives it: only its own fields, memories as ``MemoryItem``."""
    out = {k: v for k, v in _typed(data, (dict,), "a batch result").items() if v is not None}
    if "items" in out:
        out["items"] = [_item(i) for i in out["items"]]
    if "item" in out:
        out["item"] = _item(out["item"])
    return out


# -- messages: Memory.add's shapes, as the server's Message objects ------------------------------
_TEXT, _SPEAKER, _ID, _CAPTION = ("text", "content"), ("speaker", "role", "name"), ("turn_id", "id", "dia_id"), \
    ("caption", "blip_caption")
_KNOWN = {*_TEXT, *_SPEAKER, *_ID, *_CAPTION, "timestamp", "session_id", "metadata"}


def _first(msg: Mapping[str, Any], keys: Sequence[str]) -> Any:
    return next((msg[k] for k in keys if msg.get(k) is not None), None)


def _messages(messages: Any, timestamp: Any, session_id: str | None) -> tuple[Any, str | None]:
    """``Memory.add``'s messages (a string, a dict, a list of them) as ``POST /v1/memories``' ``messages``, and
    the request's session. What the server validates (types, emptiness, bounds) is left to it: it names the field."""
    messages = message_list(messages)
    out, sessions = [], {session_id} - {None}
    for i, msg in enumerate(messages):
        if isinstance(msg, str):
            msg = {"text": msg}
        if not isinstance(msg, Mapping):
            raise InvalidInputError(f"message {i} must be a string or a dict, got {type(msg).__name__}")
        if _first(msg, _CAPTION) is not None:
            raise InvalidInputError(f"message {i}: the HTTP API carries no image caption; put it in the text")
        if msg.get("session_id") is not None:
            sessions.add(msg["session_id"])
        meta = msg.get("metadata")
        extra = {k: v for k, v in msg.items() if k not in _KNOWN}
        if extra:
            meta = {**extra, **meta} if isinstance(meta, Mapping) else {**extra} if meta is None else meta
        speaker = _first(msg, _SPEAKER)
        if isinstance(speaker, str) and not speaker.strip():  # as Memory: a blank speaker is the default one
            speaker = None
        turn = {"speaker": speaker or "user", "text": _first(msg, _TEXT),
                "timestamp": _time(msg["timestamp"] if msg.get("timestamp") is not None else timestamp),
                "id": _first(msg, _ID), "metadata": dict(meta) if isinstance(meta, Mapping) else meta}
        out.append({k: v for k, v in turn.items() if v is not None})
    if len(sessions) > 1:
        raise InvalidInputError(f"the messages name several sessions ({sorted(map(str, sessions))}); the HTTP API "
                                "takes one session_id per call: add each session's messages in a call of its own")
    return out, next(iter(sessions), None)


def _filters(filters: Filters | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Search filters as the API's ``filters`` object (keys set to None left out, as ``Filters`` leaves them)."""
    if filters is None:
        return None
    if isinstance(filters, Filters):
        filters = {f.name: getattr(filters, f.name) for f in dataclasses.fields(Filters)}
        if filters["metadata"]:
            by_key: dict[str, dict[str, Any]] = {}
            for key, op, value in filters["metadata"]:
                by_key.setdefault(key, {})[op] = value
            filters["metadata"] = by_key
    if not isinstance(filters, Mapping):
        raise InvalidInputError(f"filters must be a dict or Filters, got {type(filters).__name__}")
    out = {k: v for k, v in filters.items() if v is not None}
    for key in ("time_from", "time_to"):
        if key in out:
            out[key] = _time(out[key])
    for key in ("kinds", "tags"):
        if isinstance(out.get(key), (tuple, set, frozenset)):
            out[key] = [getattr(v, "value", v) for v in out[key]]
    return out


def _dropped(value: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if v is not None}


# -- the operations: Memory's methods as requests (one place for both clients) --------------------
def _add(messages: Any, user_id: str, timestamp: Any, session_id: str | None, policy: str | None) -> Op[list[MemoryItem]]:
    msgs, session = _messages(messages, timestamp, session_id)
    if policy is not None and not isinstance(policy, str):  # a policy object runs in the server's process only;
        raise InvalidInputError(f"policy must be a policy's name over HTTP, got {shown(policy)}")  # names: the server checks
    data = yield _Request("POST", "/v1/memories", body=_dropped({"user_id": user_id, "messages": msgs,
                                                                   "session_id": session, "policy": policy}))
    return [_item(i) for i in _typed(data["items"], (list,), "items")]


def _batch(ops: Any, user_id: str | None, atomic: bool) -> Op[list[dict[str, Any]]]:
    if isinstance(ops, (str, bytes, Mapping)) or not isinstance(ops, Sequence):
        raise InvalidInputError(f"ops must be a list of operations, got {type(ops).__name__}")
    if not ops:
        raise InvalidInputError("ops is empty: give at least one operation")
    body = []
    for i, op in enumerate(ops):
        if not isinstance(op, Mapping):
            body.append(op)  # the server names what is wrong with it, and its index
            continue
        op = dict(op)
        if op.get("user_id") is None and user_id is not None:
            op["user_id"] = user_id
        if op.get("op") == "add":
            if op.pop("context", None):
                raise InvalidInputError(f"ops[{i}] (add): the HTTP API carries no context")
            try:
                op["messages"], session = _messages(op.get("messages"), op.pop("timestamp", None), op.get("session_id"))
            except InvalidInputError as exc:
                raise InvalidInputError(f"ops[{i}] (add): {exc}") from exc
            op = _dropped({**op, "session_id": session})
        body.append(op)
    data = yield _Request("POST", "/v1/batch", body={"ops": body, "atomic": atomic})
    return [_result(r) for r in _typed(data["results"], (list,), "results")]


def _put(key: str, text: str, user_id: str, metadata: Mapping[str, Any] | None, timestamp: Any) -> Op[MemoryItem]:
    body = _dropped({"text": text, "metadata": None if metadata is None else dict(metadata), "timestamp": _time(timestamp)})
    data = yield _Request("PUT", f"/v1/keys/{_segment(key, 'key')}", {"user_id": user_id}, body)
    return _item(data)


def _get_by_key(key: str, user_id: str) -> Op[MemoryItem]:
    return _item((yield _Request("GET", f"/v1/keys/{_segment(key, 'key')}", {"user_id": user_id})))


def _search(query: str, user_id: str, k: int | None, filters: Any, budget: int | None,
            threshold: float | None) -> Op[list[Hit]]:
    threshold = check_threshold(threshold, -math.inf, math.inf)  # a number here; its range is the server's (422)
    body = _dropped({"user_id": user_id, "query": query, "k": k, "filters": _filters(filters), "budget": budget,
                     "threshold": threshold})
    data = yield _Request("POST", "/v1/search", body=body)
    return [_hit(h, user_id) for h in _typed(data["hits"], (list,), "hits")]


def _build_context(query: str, user_id: str, stm: Sequence[str], budget: int | None, k: int | None,
                   filters: Any) -> Op[ComposedContext]:
    if isinstance(stm, str):
        raise InvalidInputError("stm must be a list of recent turns, got a single string; wrap it in a list")
    body = _dropped({"user_id": user_id, "query": query, "stm": list(stm), "budget": budget, "k": k,
                     "filters": _filters(filters)})
    return _context((yield _Request("POST", "/v1/context", body=body)), user_id)


def _item_path(item_id: str, user_id: str, tail: str = "") -> str:
    return f"/v1/memories/{_segment(item_id, 'item_id', user_id)}{tail}"


def _get(item_id: str, user_id: str, include_archived: bool) -> Op[MemoryItem]:
    item = _item((yield _Request("GET", _item_path(item_id, user_id), {"user_id": user_id})))
    if item.archived and not include_archived:  # the server answers archived memories too
        raise _error(ItemNotFoundError, f"user {user_id!r} has no item {item_id!r}", None)
    return item


def _get_all(user_id: str, include_archived: bool, limit: int | None, offset: int,
             metadata: Mapping[str, Any] | None) -> Op[list[MemoryItem]]:
    params: dict[str, Any] = {"user_id": user_id, "include_archived": include_archived}
    if metadata is not None:
        params["metadata"] = _dumps(metadata, "metadata").decode("utf-8")
    paged = limit is None or (isinstance(limit, int) and not isinstance(limit, bool) and limit > PAGE)
    if not paged:  # one request; the server checks the numbers
        data = yield _Request("GET", "/v1/memories", {**params, "limit": limit, "offset": offset})
        return [_item(i) for i in _typed(data["items"], (list,), "items")]
    items: list[MemoryItem] = []
    while limit is None or len(items) < limit:
        size = PAGE if limit is None else min(PAGE, limit - len(items))
        data = yield _Request("GET", "/v1/memories", {**params, "limit": size, "offset": offset + len(items)})
        page = [_item(i) for i in _typed(data["items"], (list,), "items")]
        items += page
        if len(page) < size:
            break
    return items


def _update(item_id: str, user_id: str, text: str | None, keep_history: bool, fields: dict[str, Any]) -> Op[MemoryItem]:
    body = {**({} if text is None else {"text": text}), "keep_history": keep_history, **fields}
    return _item((yield _Request("PATCH", _item_path(item_id, user_id), {"user_id": user_id}, body)))


def _archive(item_id: str, user_id: str, archived: bool) -> Op[MemoryItem]:
    tail = "/archive" if archived else "/restore"
    return _item((yield _Request("POST", _item_path(item_id, user_id, tail), {"user_id": user_id})))


def _delete(item_id: str, user_id: str) -> Op[dict[str, int]]:
    return _counts((yield _Request("DELETE", _item_path(item_id, user_id), {"user_id": user_id}))["removed"])


def _delete_user(user_id: str) -> Op[dict[str, int]]:
    return _counts((yield _Request("DELETE", f"/v1/users/{_segment(user_id, 'user_id')}"))["removed"])


def _history(item_id: str, user_id: str) -> Op[list[HistoryEvent]]:
    try:
        data = yield _Request("GET", _item_path(item_id, user_id, "/history"), {"user_id": user_id})
    except ItemNotFoundError:  # the server's answer for no events; Memory.history returns none
        return []
    return [HistoryEvent(item_id=_typed(data["id"], (str,), "id"), event=_typed(e["event"], (str,), "event"),
                         old_text=_typed(e.get("old_text"), _OPTIONAL_STR, "old_text"),
                         new_text=_typed(e.get("new_text"), _OPTIONAL_STR, "new_text"),
                         at=_typed(e["at"], _NUMBER, "at")) for e in _typed(data["events"], (list,), "events")]


def _users() -> Op[list[str]]:
    return _strings((yield _Request("GET", "/v1/users"))["users"], "users")


# -- the deadline of a blocking call --------------------------------------------------------------
# httpx's timeout bounds each socket operation, not a call: a server that sends one byte a second never trips it.
# The blocking client sets the monotonic time its call must end by here, and the network backend below gives every
# connect, read and write of the call only the time left (the async client cancels the call instead: fail_after).
_DEADLINE: ContextVar[float | None] = ContextVar("lightmem_client_deadline", default=None)


def _left(timeout: float | None, late: type[Exception]) -> float | None:
    """The socket operation's timeout: httpx's own, cut to what is left of the call's; ``late`` once none is."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise late("the call ran past its timeout")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream:
    """An ``httpcore`` network stream whose every operation ends by the call's deadline."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> _DeadlineStream:
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname,
                                                      _left(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend:
    """An ``httpcore`` network backend whose connections are ``_DeadlineStream``s."""

    def __init__(self, backend: httpcore.NetworkBackend) -> None:
        self._backend = backend

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> _DeadlineStream:
        return _DeadlineStream(self._backend.connect_tcp(host, port, _left(timeout, httpcore.ConnectTimeout),
                                                         local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> _DeadlineStream:
        return _DeadlineStream(self._backend.connect_unix_socket(path, _left(timeout, httpcore.ConnectTimeout),
                                                                 socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def _with_deadlines(client: httpx.Client) -> httpx.Client:
    """``client`` with ``_DeadlineBackend`` under each of its transports (the direct one and any proxy's from the
    environment). httpx has no argument for a network backend: each ``HTTPTransport`` keeps httpcore's connection
    pool in ``_pool``, whose ``_network_backend`` opens every connection (httpx 0.18 to 0.28; a test fails if not)."""
    for transport in (client._transport, *client._mounts.values()):
        pool = getattr(transport, "_pool", None)
        if pool is not None and hasattr(pool, "_network_backend"):
            pool._network_backend = _DeadlineBackend(pool._network_backend)
    return client


# -- the two clients ------------------------------------------------------------------------------
class MemoryClient(_Base):
    """``Memory``'s methods over the HTTP API of ``lightmem serve`` (the module's docstring says what differs).

    Args:
        base_url: The server's address, e.g. ``http://127.0.0.1:8000`` (a path prefix behind a proxy is kept).
        api_key: One of the server's API keys; each call acts only for the users the key covers.
        timeout: Seconds each request of a call may take in all, from connecting to the answer's last byte (a
            ``get_all`` of more than 1,000 memories is several requests); past it, ``ServerUnavailableError``.
            None for no limit.
        headers: More headers to send with every request.
        max_response_bytes: The largest answer read (``DEFAULT_MAX_RESPONSE_BYTES``, 64 MiB): a larger one is
            refused with ``ServerError`` as it streams in, never read whole.

    Connections are kept alive between calls; ``close()`` (or ``with``) ends them.
    """

    def __init__(self, base_url: str, api_key: str, timeout: float | None = DEFAULT_TIMEOUT,
                 headers: Mapping[str, str] | None = None,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES) -> None:
        super().__init__(base_url, api_key, timeout, headers, max_response_bytes)
        self._http = _with_deadlines(httpx.Client(**self._options))

    def _run(self, op: Op[T]) -> T:
        answer: Any = None
        error: LightMemError | None = None
        last: tuple[_Request, int] | None = None
        while True:
            request, result = self._step(op, answer, error, last)
            if request is None:
                return result  # type: ignore[return-value]
            try:
                (answer, status), error = self._send(request), None
                last = (request, status)
            except LightMemError as exc:
                answer, error, last = None, exc, (request, getattr(exc, "status_code", None) or 0)

    def _send(self, request: _Request) -> tuple[Any, int]:
        """The answer's JSON and status, read as it streams in, by the call's deadline and within the size cap."""
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        token = _DEADLINE.set(deadline)
        try:
            with self._http.stream(**self._args(request)) as response:
                body = self._began(request, response)
                for chunk in response.iter_raw():
                    self._took(request, response, body, chunk)
                    if deadline is not None and time.monotonic() > deadline:  # as the backend does, per chunk
                        raise httpx.ReadTimeout("the answer ran past the call's timeout")
        except httpx.HTTPError as exc:  # TransportError: refused, dropped, timed out
            raise self._unavailable(request, exc) from exc
        finally:
            _DEADLINE.reset(token)
        return self._answer(request, response, body), response.status_code

    def add(self, messages: str | Mapping[str, Any] | Sequence[str | Mapping[str, Any]], user_id: str,
            timestamp: object = None, session_id: str | None = None, *, policy: str | None = None) -> list[MemoryItem]:
        """``Memory.add``: the memories written (none for turns already stored), once committed; ``policy`` by
        name (``"all"``, ``"agent"``)."""
        return self._run(_add(messages, user_id, timestamp, session_id, policy))

    def batch(self, ops: Sequence[Mapping[str, Any]], user_id: str | None = None, atomic: bool = False) -> list[dict[str, Any]]:
        """``Memory.batch`` (``POST /v1/batch``): one ``{"index", "op", "status", ...}`` per operation."""
        return self._run(_batch(ops, user_id, atomic))

    def put(self, key: str, text: str, user_id: str, metadata: Mapping[str, Any] | None = None,
            timestamp: object = None) -> MemoryItem:
        """``Memory.put``: write the memory ``key`` names for the user, in place of the one it named."""
        return self._run(_put(key, text, user_id, metadata, timestamp))

    def get_by_key(self, key: str, user_id: str) -> MemoryItem:
        return self._run(_get_by_key(key, user_id))

    def search(self, query: str, user_id: str, k: int | None = None,
               filters: Filters | Mapping[str, Any] | None = None, *, budget: int | None = None,
               threshold: float | None = None) -> list[Hit]:
        """``Memory.search`` (no ``stm`` nor ``now``: the API has none); ``threshold``: only hits scoring above it."""
        return self._run(_search(query, user_id, k, filters, budget, threshold))

    def build_context(self, query: str, user_id: str, stm: Sequence[str] = (), budget: int | None = None,
                      k: int | None = None, filters: Filters | Mapping[str, Any] | None = None) -> ComposedContext:
        """``Memory.build_context`` (no ``now``: the server's clock); ``memories`` hold their ids only."""
        return self._run(_build_context(query, user_id, stm, budget, k, filters))

    def get(self, item_id: str, user_id: str, include_archived: bool = False) -> MemoryItem:
        return self._run(_get(item_id, user_id, include_archived))

    def get_all(self, user_id: str, include_archived: bool = False, limit: int | None = None, offset: int = 0,
                metadata: Mapping[str, Any] | None = None) -> list[MemoryItem]:
        """``Memory.get_all``, in pages of at most 1,000 memories."""
        return self._run(_get_all(user_id, include_archived, limit, offset, metadata))

    def update(self, item_id: str, user_id: str, text: str | None = None, keep_history: bool = False,
               **fields: Any) -> MemoryItem:
        """``Memory.update``: ``text`` (re-embedded), ``topic``, ``metadata``."""
        return self._run(_update(item_id, user_id, text, keep_history, fields))

    def archive(self, item_id: str, user_id: str) -> MemoryItem:
        return self._run(_archive(item_id, user_id, True))

    def restore(self, item_id: str, user_id: str) -> MemoryItem:
        return self._run(_archive(item_id, user_id, False))

    def delete(self, item_id: str, user_id: str) -> dict[str, int]:
        """``Memory.delete``: the counts erased."""
        return self._run(_delete(item_id, user_id))

    def delete_user(self, user_id: str) -> dict[str, int]:
        return self._run(_delete_user(user_id))

    def history(self, item_id: str, user_id: str) -> list[HistoryEvent]:
        return self._run(_history(item_id, user_id))

    def users(self) -> list[str]:
        """Every user the store holds (an admin key only: else ``AuthError``)."""
        return self._run(_users())

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> MemoryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncMemoryClient(_Base):
    """``MemoryClient``'s methods as coroutines, over one ``httpx.AsyncClient`` (same arguments, same results,
    same errors, the same ``timeout`` from connecting to the last byte and ``max_response_bytes``).
    ``await client.aclose()``, or ``async with AsyncMemoryClient(...) as memory``."""

    def __init__(self, base_url: str, api_key: str, timeout: float | None = DEFAULT_TIMEOUT,
                 headers: Mapping[str, str] | None = None,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES) -> None:
        super().__init__(base_url, api_key, timeout, headers, max_response_bytes)
        self._http = httpx.AsyncClient(**self._options)

    async def _run(self, op: Op[T]) -> T:
        answer: Any = None
        error: LightMemError | None = None
        last: tuple[_Request, int] | None = None
        while True:
            request, result = self._step(op, answer, error, last)
            if request is None:
                return result  # type: ignore[return-value]
            try:
                (answer, status), error = await self._send(request), None
                last = (request, status)
            except LightMemError as exc:
                answer, error, last = None, exc, (request, getattr(exc, "status_code", None) or 0)

    async def _send(self, request: _Request) -> tuple[Any, int]:
        """The answer's JSON and status, read as it streams in, within the call's timeout and the size cap."""
        try:
            with anyio.fail_after(self.timeout):  # cancels the whole request (asyncio or trio) at its deadline
                async with self._http.stream(**self._args(request)) as response:
                    body = self._began(request, response)
                    async for chunk in response.aiter_raw():
                        self._took(request, response, body, chunk)
        except TimeoutError as exc:
            raise self._unavailable(request, httpx.TimeoutException("the call ran past its timeout")) from exc
        except httpx.HTTPError as exc:
            raise self._unavailable(request, exc) from exc
        return self._answer(request, response, body), response.status_code

    async def add(self, messages: str | Mapping[str, Any] | Sequence[str | Mapping[str, Any]], user_id: str,
                  timestamp: object = None, session_id: str | None = None, *, policy: str | None = None) -> list[MemoryItem]:
        return await self._run(_add(messages, user_id, timestamp, session_id, policy))

    async def batch(self, ops: Sequence[Mapping[str, Any]], user_id: str | None = None,
                    atomic: bool = False) -> list[dict[str, Any]]:
        return await self._run(_batch(ops, user_id, atomic))

    async def put(self, key: str, text: str, user_id: str, metadata: Mapping[str, Any] | None = None,
                  timestamp: object = None) -> MemoryItem:
        return await self._run(_put(key, text, user_id, metadata, timestamp))

    async def get_by_key(self, key: str, user_id: str) -> MemoryItem:
        return await self._run(_get_by_key(key, user_id))

    async def search(self, query: str, user_id: str, k: int | None = None,
                     filters: Filters | Mapping[str, Any] | None = None, *, budget: int | None = None,
                     threshold: float | None = None) -> list[Hit]:
        return await self._run(_search(query, user_id, k, filters, budget, threshold))

    async def build_context(self, query: str, user_id: str, stm: Sequence[str] = (), budget: int | None = None,
                            k: int | None = None, filters: Filters | Mapping[str, Any] | None = None) -> ComposedContext:
        return await self._run(_build_context(query, user_id, stm, budget, k, filters))

    async def get(self, item_id: str, user_id: str, include_archived: bool = False) -> MemoryItem:
        return await self._run(_get(item_id, user_id, include_archived))

    async def get_all(self, user_id: str, include_archived: bool = False, limit: int | None = None, offset: int = 0,
                      metadata: Mapping[str, Any] | None = None) -> list[MemoryItem]:
        return await self._run(_get_all(user_id, include_archived, limit, offset, metadata))

    async def update(self, item_id: str, user_id: str, text: str | None = None, keep_history: bool = False,
                     **fields: Any) -> MemoryItem:
        return await self._run(_update(item_id, user_id, text, keep_history, fields))

    async def archive(self, item_id: str, user_id: str) -> MemoryItem:
        return await self._run(_archive(item_id, user_id, True))

    async def restore(self, item_id: str, user_id: str) -> MemoryItem:
        return await self._run(_archive(item_id, user_id, False))

    async def delete(self, item_id: str, user_id: str) -> dict[str, int]:
        return await self._run(_delete(item_id, user_id))

    async def delete_user(self, user_id: str) -> dict[str, int]:
        return await self._run(_delete_user(user_id))

    async def history(self, item_id: str, user_id: str) -> list[HistoryEvent]:
        return await self._run(_history(item_id, user_id))

    async def users(self) -> list[str]:
        return await self._run(_users())

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncMemoryClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
