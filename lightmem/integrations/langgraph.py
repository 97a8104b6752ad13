"""LangGraph over lightmem: ``LightmemStore``, a LangGraph ``BaseStore``; the helpers that put ``build_context``'s
prompt into a graph's model call (``lightmem_model_node``); and ``lightmem_save_node``, which saves a graph's
conversation turns as the user's memories (``docs/integrations/langgraph.md``). The nodes read the user from the run's
``context`` (``context_schema``) or ``config["configurable"]["user_id"]``.

``LightmemStore(memory, user_index=1)`` serves anything with ``Memory``'s methods: a ``lightmem.Memory``, a
``lightmem.AsyncMemory``, or an HTTP client with the same surface, synchronous or asynchronous (a method that returns
an awaitable is awaited). The layout:

- **Namespace → user.** The namespace label at ``user_index`` names the lightmem user (1 by default: LangMem's
  ``("memories", user_id)``); a namespace too short to name one is refused (``InvalidNamespaceError``, a
  ``ValueError``) for ``put``, ``get`` and ``delete``. That label is always a literal user id, in every operation:
  ``"*"``, ``"%"``, ``"_"`` or ``"?"`` there name the user of that name and no other (as LangGraph's own stores read a
  search prefix literally), so an app that takes the user id from a request cannot be made to read other users.
- **One user per call.** A search or ``list_namespaces`` whose prefix stops before the user label (``("memories",)``,
  ``()``, a suffix alone) would reach every user of the store; it is refused (``InvalidNamespaceError``) unless the
  store was opened with ``all_users=True``, which goes through ``Memory.users()`` as LangGraph's stores go through
  all their namespaces (an admin tool's store, not one a graph serving users gets; over ``MemoryClient`` it needs an
  admin key). Within the named user, ``list_namespaces``' ``"*"`` at another label is LangGraph's wildcard.
- **Document → memory.** ``put(namespace, key, value)`` is ``Memory.put(<key string>, text, user, metadata)``: the key
  string (``"lg:"`` and the JSON of the namespace and key, or its SHA-256 when over 256 characters) is unique per
  user, so a second ``put`` replaces the memory (the old one erased). The metadata carries ``lg_ns`` (the namespace as
  ``{"0": label, "1": label, ...}``, so a prefix is a filter on its fields), ``lg_depth``, ``lg_key``, ``lg_value``
  (the value itself) and ``lg_created`` (when the key was first written). These ``lg_`` keys are reserved
  (``lightmem.validation.ADAPTER_METADATA``): only ``put`` under an ``lg:`` key writes them, no door's metadata (add,
  update, batch, HTTP, MCP) may write or change them, and the store reads only memories under ``lg:`` keys. The text
  lightmem indexes is the value at
  the index fields (``put(..., index=[...])``, else ``LightmemStore(index={"fields": [...]})``), else the value's
  ``"content"`` or ``"text"`` when it is a string, else the value as JSON.
- **Search.** With a query: lightmem's retrieval (``Memory.search``) under a metadata filter for the namespace prefix
  and the op's filter (``{"a": 1}`` → ``{"lg_value.a": 1}``; ``$eq $ne $gt $gte $lt $lte`` as LangGraph's stores take
  them), applied before ranking; a filter lightmem cannot express (a list, a key with a dot) is checked after
  retrieval on a larger candidate set, so such a search may return fewer than ``limit``. Without a query: the memories
  in write order (``Memory.get_all``), honouring ``limit`` and ``offset``.
- **Times.** ``Item.created_at`` is when the key was first written (kept across later ``put`` calls, as LangGraph's
  PostgreSQL store keeps it); ``updated_at`` is the current version's ``MemoryItem.created_at``. The memory's
  ``event_time`` is the time of the ``put`` (what lightmem's recency ranking reads).
- **Not carried:** TTL (``supports_ttl`` is False: ``put(..., ttl=...)`` raises ``NotImplementedError``),
  ``index=False`` (every memory is indexed by lightmem), LangGraph's ``index`` embeddings (``dims``/``embed``:
  lightmem embeds with its own encoder).
"""
from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import math
import re
import threading
import weakref
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from lightmem import write_policy
from lightmem.errors import ItemNotFoundError
from lightmem.integrations.calls import call_memory
from lightmem.memory import key_id

try:
    from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, SystemMessage
    from langchain_core.runnables import RunnableConfig, RunnableLambda
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        InvalidNamespaceError,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        get_text_at_path,
        tokenize_path,
        validate_op_namespace,
    )
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ImportError("lightmem.integrations.langgraph needs LangGraph and langchain-core: "
                      "pip install 'lightmem-slm[langgraph]'") from exc
try:  # where LangGraph keeps a run's Runtime (its ``context``) in a node's config; ``get_runtime()`` reads it there too
    from langgraph._internal._constants import CONFIG_KEY_RUNTIME as _RUNTIME_KEY
except ImportError:  # pragma: no cover - another LangGraph layout: the key's value since 0.6
    _RUNTIME_KEY = "__pregel_runtime"

__all__ = ["LightmemStore", "lightmem_context", "alightmem_context", "context_messages", "acontext_messages",
           "lightmem_model_node", "lightmem_save_node", "turns_of"]

MAX_KEY_CHARS = 256  # lightmem's identifier bound (lightmem.validation.MAX_ID_CHARS)
MAX_CONDITIONS = 32  # lightmem.metadata_filter.MAX_CONDITIONS
MAX_K = 1000  # lightmem.validation.MAX_K
_FIELD = re.compile(r"[A-Za-z0-9_\-]{1,64}")  # one segment of a metadata filter's dotted field
_OPS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")

# A call: (method name, positional arguments, keyword arguments). The store's operations are generators that yield
# calls and receive their results (or their exceptions), so one implementation serves a sync and an async memory.
_Call = tuple[str, tuple[Any, ...], dict[str, Any]]
_Plan = Generator[_Call, Any, Any]

# One lock per synchronous memory: a ``Memory`` takes one call at a time (LangGraph runs parallel nodes on threads).
_LOCKS: weakref.WeakKeyDictionary[Any, threading.Lock] = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def _lock_for(memory: Any) -> threading.Lock:
    with _LOCKS_GUARD:
        try:
            lock = _LOCKS.get(memory)
            if lock is None:
                lock = _LOCKS[memory] = threading.Lock()
            return lock
        except TypeError:  # not weak-referenceable: a lock of its own per caller
            return threading.Lock()


def _is_async(memory: Any) -> bool:
    return inspect.iscoroutinefunction(getattr(memory, "put", None))


class LightmemStore(BaseStore):
    """A LangGraph ``BaseStore`` over a lightmem memory (the module's docstring gives the layout).

    Args:
        memory: A ``Memory``, an ``AsyncMemory`` or a client with their methods (``put``, ``get_by_key``, ``get_all``,
            ``search``, ``delete``, ``users``); the store does not close it.
        user_index: Position of the namespace label that names the user (``("memories", user_id)``: 1).
        index: LangGraph's ``IndexConfig``; only ``fields`` is read (the value paths whose text lightmem indexes).
        candidates: For a search with a filter checked after retrieval, how many candidates per wanted result.
        all_users: Let a search or listing whose prefix stops before the user label read every user of the store
            (LangGraph's semantics for a store of one trusted caller); False (the default) refuses it, so each call
            reaches the one user its namespace names.

    ``batch`` runs the operations in order, each seeing the ones before it. Over an asynchronous memory, ``batch`` runs
    them on an event loop of its own (call ``abatch``, ``aget`` ... from a coroutine); over a synchronous one,
    ``abatch`` runs ``batch`` on a thread.
    """

    supports_ttl = False

    def __init__(self, memory: Any, user_index: int = 1, *, index: Mapping[str, Any] | None = None,
                 candidates: int = 4, all_users: bool = False) -> None:
        if isinstance(user_index, bool) or not isinstance(user_index, int) or user_index < 0:
            raise ValueError(f"user_index must be a whole number >= 0, got {user_index!r}")
        if not isinstance(all_users, bool):
            raise ValueError(f"all_users must be True or False, got {all_users!r}")
        if isinstance(candidates, bool) or not isinstance(candidates, int) or candidates < 1:
            raise ValueError(f"candidates must be a whole number >= 1, got {candidates!r}")
        missing = [m for m in ("put", "get_by_key", "get_all", "search", "delete") if not callable(getattr(memory, m, None))]
        if missing:
            raise TypeError(f"LightmemStore needs a memory with Memory's methods; {type(memory).__name__} lacks {missing}")
        self.memory = memory
        self.user_index = user_index
        self.candidates = candidates
        self.all_users = all_users
        fields = list((index or {}).get("fields") or [])
        self.index_config = dict(index) if index else None
        self._fields = [(f, tokenize_path(f)) for f in fields if f != "$"]
        self._is_async = _is_async(memory)
        self._lock = None if self._is_async else _lock_for(memory)

    # -- BaseStore ---------------------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        if self._is_async:
            return _run_coroutine(self.abatch(ops))
        self._check(ops)
        return [self._drive(self._plan(op)) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        if not self._is_async:
            return await asyncio.to_thread(self.batch, ops)
        self._check(ops)
        return [await self._adrive(self._plan(op)) for op in ops]

    # -- drivers: run a plan's calls on the memory -------------------------------------------------
    def _drive(self, plan: _Plan) -> Any:
        send, error = None, None
        while True:
            try:
                name, args, kwargs = plan.throw(error) if error is not None else plan.send(send)
            except StopIteration as stop:
                return stop.value
            send, error = None, None
            try:
                with self._lock:
                    send = getattr(self.memory, name)(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - handed to the plan, which re-raises what it does not expect
                error = exc

    async def _adrive(self, plan: _Plan) -> Any:
        send, error = None, None
        while True:
            try:
                name, args, kwargs = plan.throw(error) if error is not None else plan.send(send)
            except StopIteration as stop:
                return stop.value
            send, error = None, None
            try:
                send = getattr(self.memory, name)(*args, **kwargs)
                if inspect.isawaitable(send):
                    send = await send
            except Exception as exc:  # noqa: BLE001 - see _drive
                error = exc

    # -- validation --------------------------------------------------------------------------------
    def _check(self, ops: list[Op]) -> None:
        """Every op checked before the first runs (LangGraph's label rules, the user label, TTL)."""
        for op in ops:
            if not isinstance(op, (GetOp, PutOp, SearchOp, ListNamespacesOp)):
                raise ValueError(f"Unknown operation type: {type(op)}")
            validate_op_namespace(op)
            if isinstance(op, PutOp):
                if not op.namespace:
                    raise InvalidNamespaceError("Namespace cannot be empty.")
                if op.namespace[0] == "langgraph":
                    raise InvalidNamespaceError(f'Root label for namespace cannot be "langgraph". Got: {op.namespace}')
                if op.ttl is not None:
                    raise NotImplementedError("TTL is not supported by LightmemStore: lightmem keeps a memory until it "
                                              "is deleted; set ttl=None")
                if op.value is not None and not isinstance(op.value, Mapping):
                    raise ValueError(f"a stored value must be a dict, got {type(op.value).__name__}")
            if isinstance(op, (GetOp, PutOp)):
                self._user(op.namespace)
            if isinstance(op, SearchOp):
                _check_window(op.limit, op.offset)
                if op.query is not None and not isinstance(op.query, str):
                    raise ValueError(f"query must be a string, got {type(op.query).__name__}")
                if op.filter is not None and not isinstance(op.filter, Mapping):
                    raise ValueError(f"filter must be a dict, got {type(op.filter).__name__}")
                self._reach(tuple(op.namespace_prefix), "search")
            if isinstance(op, ListNamespacesOp):
                _check_window(op.limit, op.offset)
                self._reach(_list_prefix(op), "list_namespaces")

    def _reach(self, prefix: tuple[str, ...], what: str) -> None:
        """Refuse a prefix that stops before the user label, unless the store reads every user (``all_users``)."""
        if len(prefix) <= self.user_index and not self.all_users:
            raise InvalidNamespaceError(
                f"{what} with the namespace prefix {prefix} would reach every user: LightmemStore(user_index="
                f"{self.user_index}) reads the user from label {self.user_index}, so name the user (e.g. ('memories', "
                "user_id)), or open LightmemStore(memory, all_users=True) for a store that may read every user's")

    def _user(self, namespace: tuple[str, ...]) -> str:
        if len(namespace) <= self.user_index:
            raise InvalidNamespaceError(
                f"namespace {namespace} is too short to name a user: LightmemStore(user_index={self.user_index}) reads "
                f"the user from label {self.user_index} (e.g. ('memories', user_id))")
        user = namespace[self.user_index]
        if not user.strip() or len(user) > MAX_KEY_CHARS:
            raise InvalidNamespaceError(f"namespace label {self.user_index} ({user!r}) does not name a user: "
                                        f"a user id is not blank and at most {MAX_KEY_CHARS} characters")
        return user

    # -- the operations as plans -------------------------------------------------------------------
    def _plan(self, op: Op) -> _Plan:
        if isinstance(op, GetOp):
            return self._get(op)
        if isinstance(op, PutOp):
            return self._put(op) if op.value is not None else self._delete(op)
        if isinstance(op, SearchOp):
            return self._search(op)
        return self._list_namespaces(op)

    def _get(self, op: GetOp) -> _Plan:
        user = self._user(op.namespace)
        try:
            found = yield "get_by_key", (_key_string(op.namespace, op.key), user), {}
        except ItemNotFoundError:
            return None
        return _to_item(found, Item)

    def _put(self, op: PutOp) -> _Plan:
        user, value = self._user(op.namespace), dict(op.value)
        key = _key_string(op.namespace, op.key)
        try:
            old = yield "get_by_key", (key, user), {}
            created = _meta(old).get("lg_created", _field(old, "created_at"))
        except ItemNotFoundError:
            created = None
        metadata = {"lg_ns": {str(i): label for i, label in enumerate(op.namespace)}, "lg_depth": len(op.namespace),
                    "lg_key": op.key, "lg_value": value}
        if created is not None:
            metadata["lg_created"] = created
        yield "put", (key, self._text(value, op.index), user), {"metadata": metadata}
        return None

    def _delete(self, op: PutOp) -> _Plan:
        user = self._user(op.namespace)
        try:  # the item id of a key is lightmem's key_id (the same over HTTP: the server's Memory.put made it)
            yield "delete", (key_id(user, _key_string(op.namespace, op.key)), user), {}
        except ItemNotFoundError:
            pass
        return None

    def _users(self, path: Sequence[str]) -> _Plan:
        """The users a namespace prefix reaches: the one its user label names, literally (``"*"`` names the user
        ``*``); every user only for a prefix that stops before that label, which ``_check`` lets through under
        ``all_users`` only."""
        if len(path) > self.user_index:
            return [path[self.user_index]]
        if not self.all_users:  # _check refused it; kept here so that no path reaches every user by mistake
            raise InvalidNamespaceError(f"namespace prefix {tuple(path)} does not name a user")
        users = yield "users", (), {}
        return list(users)

    def _search(self, op: SearchOp) -> _Plan:
        prefix = tuple(op.namespace_prefix)
        if len(prefix) > self.user_index and not prefix[self.user_index].strip():
            return []
        pushed = _namespace_conditions(prefix, self.user_index)
        value_conditions, exact = _value_conditions(op.filter or {})
        room = MAX_CONDITIONS - len(pushed)
        if len(value_conditions) > room:
            value_conditions, exact = value_conditions[:room], False
        for field, cond_op, v in value_conditions:
            pushed.setdefault(field, {})[cond_op] = v
        post = None if exact else (op.filter or None)
        if op.limit == 0:
            return []
        users = yield from self._users(prefix)
        want = op.offset + op.limit
        found: list[tuple[float | None, Any]] = []
        if op.query:
            k = min(MAX_K, want if post is None else max(want * self.candidates, want + 20))
            for user in users:
                hits = yield "search", (op.query, user), {"k": k, "filters": {"metadata": pushed}}
                for hit in list(hits)[:k]:
                    item = _field(hit, "item")
                    if "lg_key" not in _meta(item):  # a client's hit carries no metadata: read the memory whole
                        try:
                            item = yield "get", (_field(item, "id"), user), {}
                        except ItemNotFoundError:
                            continue  # deleted meanwhile
                    found.append((_field(hit, "score"), item))
            found = [(s, it) for s, it in found if post is None or _matches(_meta(it).get("lg_value"), post)]
            if len(users) > 1:  # one user's hits keep lightmem's order; several users' are merged by score
                found.sort(key=lambda pair: -(pair[0] or 0.0))
        else:
            single = len(users) == 1 and post is None
            for user in users:
                items = yield "get_all", (user,), {
                    "limit": op.limit if single else (want if post is None else None),
                    "offset": op.offset if single else 0, "metadata": pushed}
                found += [(None, it) for it in items if post is None or _matches(_meta(it).get("lg_value"), post)]
            if single:
                return [item for _, it in found if (item := _to_item(it, SearchItem)) is not None]
            found.sort(key=lambda pair: _field(pair[1], "created_at"))
        return [item for score, it in found[op.offset:want] if (item := _to_item(it, SearchItem, score)) is not None]

    def _list_namespaces(self, op: ListNamespacesOp) -> _Plan:
        conditions = tuple(op.match_conditions or ())
        prefix = _list_prefix(op)
        users = yield from self._users(prefix)
        pushed: dict[str, Any] = {"lg_depth": {"$gte": max(1, len(prefix))}}
        pushed.update({f"lg_ns.{i}": label for i, label in enumerate(prefix) if label != "*" and i != self.user_index})
        namespaces: set[tuple[str, ...]] = set()
        for user in users:
            items = yield "get_all", (user,), {"metadata": pushed}
            namespaces.update(ns for it in items if (ns := _namespace(_meta(it))) is not None)
        out = [ns for ns in namespaces if all(_does_match(c, ns) for c in conditions)]
        if op.max_depth is not None:
            out = list({ns[:op.max_depth] for ns in out})
        return sorted(out)[op.offset:op.offset + op.limit]

    # -- text ----------------------------------------------------------------------------------------
    def _text(self, value: dict[str, Any], index: Any) -> str:
        """What lightmem indexes: the index fields' text, else ``content``/``text``, else the value as JSON."""
        fields = [(f, tokenize_path(f)) for f in index if f != "$"] if isinstance(index, list) else self._fields
        texts = [t for _, path in fields for t in get_text_at_path(value, path) if t and t.strip()]
        if texts:
            return "\n".join(texts)
        for name in ("content", "text"):
            if isinstance(value.get(name), str) and value[name].strip():
                return value[name]
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


# -- the mapping between LangGraph's documents and lightmem's memories -----------------------------------
def _key_string(namespace: Sequence[str], key: str) -> str:
    """The lightmem key of a namespace and key: unique per user, at most 256 characters, ASCII without NUL or ``/``
    (which the HTTP API cannot carry in a URL path; JSON may write it ``\\u002f``)."""
    text = "lg:" + json.dumps([*namespace, key], separators=(",", ":")).replace("/", "\\u002f")
    if len(text) <= MAX_KEY_CHARS:
        return text
    return "lg:sha256:" + hashlib.sha256(text.encode("ascii")).hexdigest()


def _field(obj: Any, name: str) -> Any:
    """An attribute of a lightmem object, or the key of its JSON form (a client may hand back either)."""
    return obj[name] if isinstance(obj, Mapping) else getattr(obj, name)


def _meta(item: Any) -> dict[str, Any]:
    return _field(item, "metadata") or {}


def _namespace(meta: Mapping[str, Any]) -> tuple[str, ...] | None:
    ns, depth = meta.get("lg_ns"), meta.get("lg_depth")
    if not isinstance(ns, Mapping) or not isinstance(depth, int):
        return None
    try:
        return tuple(ns[str(i)] for i in range(depth))
    except KeyError:
        return None


def _time(seconds: Any) -> datetime:
    if isinstance(seconds, str):
        return datetime.fromisoformat(seconds)
    return datetime.fromtimestamp(float(seconds), tz=timezone.utc)


def _list_prefix(op: ListNamespacesOp) -> tuple[str, ...]:
    """The longest prefix condition of a ``list_namespaces`` (``()`` when it has none)."""
    prefixes = [tuple(c.path) for c in op.match_conditions or () if c.match_type == "prefix"]
    return max(prefixes, key=len) if prefixes else ()


def _to_item(memory_item: Any, cls: type[Item], score: float | None = None) -> Item | None:
    meta = _meta(memory_item)
    namespace = _namespace(meta)
    if namespace is None or "lg_key" not in meta or not str(meta.get("key", "")).startswith("lg:"):
        return None  # not a memory this adapter wrote (its put, under an "lg:" key)
    updated = _field(memory_item, "created_at")
    created = meta.get("lg_created", updated)
    value = dict(meta.get("lg_value") or {})
    if cls is SearchItem:
        return SearchItem(namespace=namespace, key=meta["lg_key"], value=value, created_at=_time(created),
                          updated_at=_time(updated), score=None if score is None else float(score))
    return Item(value=value, key=meta["lg_key"], namespace=namespace, created_at=_time(created), updated_at=_time(updated))


def _namespace_conditions(prefix: Sequence[str], user_index: int) -> dict[str, Any]:
    """The metadata filter of a namespace prefix (the user label is the partition, not a filter)."""
    out: dict[str, Any] = {"lg_depth": {"$gte": max(1, len(prefix))}}
    out.update({f"lg_ns.{i}": {"$eq": label} for i, label in enumerate(prefix) if i != user_index})
    return out


def _scalar(value: Any, op: str) -> bool:
    """Whether lightmem's metadata filter compares ``value`` with ``op`` as LangGraph's stores do."""
    if isinstance(value, bool) or value is None:
        return op in ("$eq", "$ne")
    if isinstance(value, int):
        return abs(value) < 2**63
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, str) and "\x00" not in value and op in ("$eq", "$ne")  # LangGraph orders numbers only


def _value_conditions(spec: Mapping[str, Any], path: str = "lg_value") -> tuple[list[tuple[str, str, Any]], bool]:
    """LangGraph's filter on a value as lightmem conditions ``(field, op, value)``, and whether they say all of it
    (False: a part only a check after retrieval can say, a list or a key that is not a field name)."""
    out: list[tuple[str, str, Any]] = []
    exact = True
    for key, want in spec.items():
        if not isinstance(key, str) or not _FIELD.fullmatch(key) or path.count(".") >= 7:
            exact = False
            continue
        field = f"{path}.{key}"
        if isinstance(want, Mapping) and any(isinstance(k, str) and k.startswith("$") for k in want):
            for op, v in want.items():
                if op in _OPS and _scalar(v, op):
                    out.append((field, op, v))
                else:
                    exact = False
        elif isinstance(want, Mapping):
            if not want:
                exact = False  # {} asks that the field be an object: no condition says it
            inner, inner_exact = _value_conditions(want, field)
            out += inner
            exact = exact and inner_exact
        elif _scalar(want, "$eq"):
            out.append((field, "$eq", want))
        else:
            exact = False
    return out, exact


def _matches(value: Any, spec: Mapping[str, Any]) -> bool:
    """LangGraph's filter on a value, as its in-memory store applies it."""
    if not isinstance(value, Mapping):
        return False
    return all(_compare(value.get(k), v) for k, v in spec.items())


def _compare(have: Any, want: Any) -> bool:
    if isinstance(want, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in want):
            return all(_apply(have, op, v) for op, v in want.items())
        return isinstance(have, Mapping) and all(_compare(have.get(k), v) for k, v in want.items())
    if isinstance(want, (list, tuple)):
        return isinstance(have, (list, tuple)) and len(have) == len(want) and all(map(_compare, have, want))
    return have == want


def _apply(have: Any, op: str, want: Any) -> bool:
    if op == "$eq":
        return have == want
    if op == "$ne":
        return have != want
    if op not in _OPS:
        raise ValueError(f"Unsupported operator: {op}")
    try:
        a, b = float(have), float(want)
    except (TypeError, ValueError):
        return False
    return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]


def _does_match(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """LangGraph's prefix/suffix match of a namespace, ``"*"`` matching any label."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path))
    else:
        raise ValueError(f"Unsupported match type: {condition.match_type}")
    return all(p == "*" or n == p for n, p in pairs)


def _check_window(limit: Any, offset: Any) -> None:
    for name, v in (("limit", limit), ("offset", offset)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} must be a whole number >= 0, got {v!r}")


def _run_coroutine(coro: Any) -> Any:
    """Run a coroutine from synchronous code: refused on a thread whose event loop is running (it would block it)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise RuntimeError("LightmemStore over an asynchronous memory: call the store's async methods (aget, aput, asearch, "
                       "abatch) from a coroutine, or its sync methods from a thread without a running event loop")


# -- build_context in a graph's model call -------------------------------------------------------------
def lightmem_context(memory: Any, user_id: str, query: str, budget: int | None = None, **options: Any) -> str:
    """``memory.build_context(query, user_id, budget=budget, **options).prompt``: the memories for ``query`` packed with
    it into at most ``budget`` tokens (a synchronous memory; ``alightmem_context`` serves both)."""
    if _is_async(memory):
        raise TypeError("an asynchronous memory: use `await alightmem_context(...)`")
    with _lock_for(memory):
        return _prompt(memory.build_context(query, user_id, budget=budget, **options))


async def alightmem_context(memory: Any, user_id: str, query: str, budget: int | None = None, **options: Any) -> str:
    """``lightmem_context`` from a coroutine: awaits an asynchronous memory, runs a synchronous one on a thread."""
    if _is_async(memory):
        return _prompt(await memory.build_context(query, user_id, budget=budget, **options))
    return await asyncio.to_thread(lightmem_context, memory, user_id, query, budget, **options)


def _prompt(context: Any) -> str:
    return context["prompt"] if isinstance(context, Mapping) else context.prompt


def _message_text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return " ".join(part if isinstance(part, str) else str(part.get("text", "")) for part in content
                    if isinstance(part, str) or (isinstance(part, Mapping) and part.get("type") == "text"))


def _last_human(messages: Sequence[AnyMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            return _message_text(message).strip()
    return ""


def context_messages(messages: Sequence[AnyMessage], memory: Any, user_id: str, *, query: str | None = None,
                     budget: int | None = None, **options: Any) -> list[AnyMessage]:
    """``[SystemMessage(lightmem_context(...)), *messages]``: the query defaults to the last human message's text
    (no human message and no query: the messages unchanged)."""
    query = _last_human(messages) if query is None else query
    if not query.strip():
        return list(messages)
    return [SystemMessage(lightmem_context(memory, user_id, query, budget, **options)), *messages]


async def acontext_messages(messages: Sequence[AnyMessage], memory: Any, user_id: str, *, query: str | None = None,
                            budget: int | None = None, **options: Any) -> list[AnyMessage]:
    """``context_messages`` from a coroutine."""
    query = _last_human(messages) if query is None else query
    if not query.strip():
        return list(messages)
    return [SystemMessage(await alightmem_context(memory, user_id, query, budget, **options)), *messages]


UserId = str | Callable[[Mapping[str, Any], RunnableConfig], str] | None
SessionId = str | Callable[[Mapping[str, Any], RunnableConfig], str | None] | None


def _context_user(config: RunnableConfig) -> Any:
    """The ``user_id`` of the run's ``Runtime.context`` (``graph.invoke(..., context=...)`` under a graph built with
    ``context_schema``): a field of a dataclass or pydantic model, or the key of a mapping (a TypedDict); None when the
    run has no context or its context names no user."""
    runtime = ((config or {}).get("configurable") or {}).get(_RUNTIME_KEY)
    context = getattr(runtime, "context", None)
    if context is None:
        return None
    if isinstance(context, Mapping):
        return context.get("user_id")
    return getattr(context, "user_id", None)


def _user_of(user_id: UserId, state: Mapping[str, Any], config: RunnableConfig, node: str = "lightmem_model_node") -> str:
    """The user a node serves: ``user_id`` when given (a string, or a function of the state and config), else the run's
    ``context.user_id`` and ``config["configurable"]["user_id"]``, which must agree when both are given. A literal id:
    no pattern, no default user."""
    if callable(user_id):
        user = user_id(state, config)
    elif user_id is not None:
        user = user_id
    else:
        from_context = _context_user(config)
        from_config = ((config or {}).get("configurable") or {}).get("user_id")
        if from_context is not None and from_config is not None and from_context != from_config:
            raise ValueError(f"{node}: two users for one run: the run's context names user_id={from_context!r}, "
                             f"config['configurable'] names user_id={from_config!r}; give one of them, or the same id")
        user = from_context if from_context is not None else from_config
        if user is None:
            raise ValueError(f"{node}: no user: pass user_id=..., or invoke the graph with context=<your "
                             "context_schema>(user_id=...) or config={'configurable': {'user_id': ...}}")
    if not isinstance(user, str):
        raise ValueError(f"{node}: a user id is a string, got {type(user).__name__} ({user!r})")
    return user


def lightmem_model_node(model: Any, memory: Any, *, user_id: UserId = None, budget: int | None = None,
                        messages_key: str = "messages", **options: Any) -> RunnableLambda:
    """A graph node that calls ``model`` with ``build_context``'s prompt as a ``SystemMessage`` before the state's
    messages, and returns ``{messages_key: [the model's answer]}``.

    ``user_id``: a string, a function of ``(state, config)``, or ``None`` (the default) for the run's user: the
    ``user_id`` of its ``context`` (``StateGraph(State, context_schema=Context)`` and ``graph.invoke(...,
    context=Context(user_id=...))``; a dataclass, TypedDict or pydantic model with a ``user_id`` field) or
    ``config["configurable"]["user_id"]``; both given and different: ``ValueError``. The id is literal.
    ``budget``: None (the default) is the memory's own (``lightmem.retrieval.composer.DEFAULT_BUDGET``, 600 tokens).
    The node runs under ``invoke`` and ``ainvoke`` alike (an asynchronous memory under ``ainvoke`` only).
    """

    def call(state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        messages = context_messages(state[messages_key], memory, _user_of(user_id, state, config), budget=budget, **options)
        return {messages_key: [model.invoke(messages, config)]}

    async def acall(state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        messages = await acontext_messages(state[messages_key], memory, _user_of(user_id, state, config), budget=budget,
                                           **options)
        return {messages_key: [await model.ainvoke(messages, config)]}

    return RunnableLambda(call, afunc=acall, name="lightmem_model")


# -- the graph's turns into lightmem -------------------------------------------------------------------
def _turn_id(message: BaseMessage, position: int, speaker: str, text: str, session_id: str | None) -> str:
    """A turn's id, the same each time the same message is saved: ``lg-`` and the message's id (``add_messages``, the
    reducer of ``MessagesState``, gives every message one); for a message without one, a hash of the session, its
    position and its text."""
    mid = message.id
    if isinstance(mid, str) and mid.strip():
        return f"lg-{mid}" if len(mid) <= MAX_KEY_CHARS - 3 else "lg-sha256:" + hashlib.sha256(mid.encode()).hexdigest()
    seed = json.dumps([session_id, position, speaker, text], ensure_ascii=False)
    return "lg-h:" + hashlib.sha256(seed.encode()).hexdigest()[:32]


def turns_of(messages: Sequence[AnyMessage], session_id: str | None = None) -> list[dict[str, Any]]:
    """The conversation turns of a graph's messages, as ``Memory.add`` takes them: each ``HumanMessage``'s text
    (speaker ``user``) and each ``AIMessage``'s text (speaker ``assistant``; its tool calls left out), with a stable
    id (``_turn_id``: saving the same messages twice stores them once). System, tool and other messages, and
    messages without text, are left out."""
    turns: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, message in enumerate(messages):
        if isinstance(message, HumanMessage):
            speaker = "user"
        elif isinstance(message, AIMessage):
            speaker = "assistant"
        else:
            continue
        text = _message_text(message)
        if not text.strip():
            continue
        tid = _turn_id(message, i, speaker, text, session_id)
        if tid in seen:  # one message twice in the list: one turn
            continue
        seen.add(tid)
        turn: dict[str, Any] = {"speaker": speaker, "text": text, "id": tid, "metadata": {"source": "langgraph"}}
        if session_id is not None:
            turn["session_id"] = session_id
        turns.append(turn)
    return turns


def _session_of(session_id: SessionId, state: Mapping[str, Any], config: RunnableConfig) -> str | None:
    if callable(session_id):
        return session_id(state, config)
    if session_id is not None:
        return session_id
    thread = ((config or {}).get("configurable") or {}).get("thread_id")
    return None if thread is None else str(thread)


def lightmem_save_node(memory: Any, *, user_id: UserId = None, session_id: SessionId = None,
                       policy: str | None = "agent", messages_key: str = "messages") -> RunnableLambda:
    """A graph node that saves the conversation turns of the state's messages (``turns_of``) as the user's memories,
    ``memory.add(turns, user, session_id=..., policy=policy)``, and changes no state (it returns ``{}``).

    Put it after the model node (``model -> save``): each run then saves the human messages and the model's answers
    that are not stored yet; the turns already stored (the same message ids) are skipped, so a state that carries the
    whole thread (a checkpointer) is saved once, however many runs replay it.

    ``user_id``: as ``lightmem_model_node``'s (``None``: the run's ``context.user_id`` or
    ``config["configurable"]["user_id"]``, which must agree). ``session_id``: a string, a function of ``(state,
    config)``, or ``None`` (the default) for ``config["configurable"]["thread_id"]`` (no thread: the memory's default).
    ``policy``: ``Memory.add``'s: ``"agent"`` (the default) keeps what is worth remembering and leaves out question-only
    turns, pleasantries, answers to questions and near-duplicates; ``"all"`` or ``None`` stores every turn.
    The node runs under ``invoke`` and ``ainvoke`` alike (an asynchronous memory under ``ainvoke`` only).
    """

    write_policy.check(policy)  # a mistyped name fails when the graph is built, not at its first save

    def plan(state: Mapping[str, Any], config: RunnableConfig) -> tuple[str, list[dict[str, Any]], str | None]:
        user = _user_of(user_id, state, config, "lightmem_save_node")
        session = _session_of(session_id, state, config)
        return user, turns_of(state[messages_key], session), session

    def call(state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        if _is_async(memory):
            raise TypeError("lightmem_save_node over an asynchronous memory: run the graph with `await graph.ainvoke(...)`")
        user, turns, session = plan(state, config)
        if turns:
            with _lock_for(memory):
                memory.add(turns, user, session_id=session, policy=policy)
        return {}

    async def acall(state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        if not _is_async(memory):
            return await asyncio.to_thread(call, state, config)
        user, turns, session = plan(state, config)
        if turns:
            await call_memory(memory, "add", turns, user, session_id=session, policy=policy)
        return {}

    return RunnableLambda(call, afunc=acall, name="lightmem_save")
