"""lightmem for the OpenAI Agents SDK (``pip install 'lightmem-slm[openai-agents]'``).

- ``LightmemSession(session_id, memory, user_id)``: the SDK's ``Session`` protocol (``get_items``, ``add_items``,
  ``pop_item``, ``clear_session``) kept in lightmem. Every history item is stored exactly (its JSON in the metadata of
  an archived memory of the user, tagged with the session: never found by a search, listed by ``get_all``), and the
  user's and the assistant's text turns also become the user's memories (speaker ``user``/``assistant``, the session id),
  which a later run, in any session of the same user, finds.
- ``lightmem_instructions(memory, user_id, base)``: dynamic ``instructions`` for an ``Agent``: ``base`` followed by
  ``build_context``'s prompt for the run's last user message. ``lightmem_input_filter`` does the same as a
  ``RunConfig(call_model_input_filter=...)``, for agents whose instructions are not yours to change.

``memory`` is anything with ``Memory``'s methods: a ``Memory`` or a ``MemoryClient`` (called on the event loop's
thread: each call blocks the loop for its length), or an ``AsyncMemory`` or ``AsyncMemoryClient`` (awaited).
"""
from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Union

from agents.memory import SessionSettings
from agents.memory.session_settings import resolve_session_limit
from agents.run_config import CallModelData, ModelInputData
from agents.run_context import RunContextWrapper

from lightmem import write_policy
from lightmem.errors import InvalidInputError, ItemNotFoundError
from lightmem.integrations.calls import call_memory

__all__ = ["LightmemSession", "lightmem_instructions", "lightmem_input_filter", "last_user_text", "ITEM_KIND"]

ITEM_KIND = "openai_agents.item"  # metadata["oa_kind"] of a memory that holds (part of) a session's history item
# A history item's JSON is cut into parts of at most this many (ASCII) characters: escaped inside the metadata's JSON,
# a part stays under lightmem's 64 KiB bound on a memory's metadata.
PART_CHARS = 30_000
PAGE = 1_000  # memories per get_all call (the HTTP API's largest page)
DEFAULT_BASE = "You are a helpful assistant."

UserId = Union[str, Callable[[RunContextWrapper[Any]], str]]
log = logging.getLogger(__name__)




def _text_of(content: Any) -> str:
    """The text of a message's ``content``: a string, or the text parts of a list (images, files and audio left out)."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = [p.get("text") for p in content if isinstance(p, Mapping) and p.get("type") in ("input_text", "output_text")]
        return "\n".join(t for t in parts if isinstance(t, str) and t.strip())
    return ""


def _turn_of(item: Any) -> tuple[str, str] | None:
    """``(speaker, text)`` of a user's or the assistant's message item with text; None for any other item (tool
    calls and their outputs, reasoning, system and developer messages, a message with no text)."""
    if not isinstance(item, Mapping) or item.get("type", "message") != "message":
        return None
    role = item.get("role")
    if role not in ("user", "assistant"):
        return None
    text = _text_of(item.get("content"))
    return (role, text) if text.strip() else None


def last_user_text(items: Sequence[Any] | str | None) -> str | None:
    """The text of the last user message in ``items`` (a run's input: a string or a list of input items)."""
    if isinstance(items, str):
        return items if items.strip() else None
    for item in reversed(list(items or ())):
        turn = _turn_of(item)
        if turn is not None and turn[0] == "user":
            return turn[1]
    return None


def _summary(item: Any) -> str:
    """A short readable line for the memory that holds an item (the item itself is in its metadata)."""
    turn = _turn_of(item)
    if turn is not None:
        line = f"{turn[0]}: {turn[1]}"
    elif isinstance(item, Mapping):
        line = " ".join(str(item.get(k)) for k in ("type", "role", "name") if isinstance(item.get(k), str)) or "item"
    else:
        line = "item"
    line = " ".join(line.split())
    return line[:200] or "item"


class LightmemSession:
    """The SDK's ``Session`` protocol over lightmem: a session's history, and the user's memories from its turns.

    Args:
        session_id: The conversation's id (as for ``SQLiteSession``).
        memory: A ``Memory``, ``AsyncMemory``, ``MemoryClient`` or ``AsyncMemoryClient``.
        user_id: Whose memories the turns become (and in whose partition the history is kept: ``delete_user`` erases it).
        session_settings: The SDK's ``SessionSettings`` (``limit``: how many latest items ``get_items`` returns).
        remember: Also write the user's and the assistant's text turns as memories (the default).
        policy: Which of those turns become memories (``lightmem.write_policy``): ``"agent"`` (the default) leaves out
            questions, pleasantries, answers and restatements of stored memories; ``"all"`` writes every one.

    History items are stored one memory per item (more for an item over ``PART_CHARS`` of JSON), archived so that no
    search returns them, written by ``put`` under the key ``oa/<session hash>/<seq>/<nonce>/<part>`` with ``metadata``
    ``{"oa_kind": ITEM_KIND, "oa_session", "oa_seq", "oa_nonce", "oa_part", "oa_parts", "oa_json"}``; ``get_items``
    lists them with ``get_all(include_archived=True, metadata=...)``, keeps those under this session's keys, and returns
    the items in the order they were added. The ``oa_`` keys are reserved (``lightmem.validation.ADAPTER_METADATA``):
    no door's metadata (add, update, batch, HTTP, MCP) may write or change them, so a caller cannot inject a history
    item through metadata. ``session_id`` and ``user_id`` are literal ids: ``"*"`` or ``"%"`` name a session or a user
    of that name, never several. ``pop_item`` also erases the memories its turn became (found by their source turn
    id); ``clear_session`` erases the history and keeps the memories (``clear_session(forget=True)`` erases both).
    """

    def __init__(self, session_id: str, memory: Any, user_id: str, session_settings: SessionSettings | None = None,
                 remember: bool = True, policy: str = "agent") -> None:
        if not isinstance(session_id, str) or not session_id.strip():
            raise ValueError("session_id must be a non-empty string")
        if not isinstance(user_id, str) or not user_id.strip():
            raise ValueError("user_id must be a non-empty string naming whose memories these are")
        self.session_id, self.memory, self.user_id = session_id, memory, user_id
        self.session_settings = session_settings if session_settings is not None else SessionSettings()
        self.remember, self.policy = remember, write_policy.check(policy)
        self._tag = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        self._seen_seq = 0  # every record of this session this instance has seen has a smaller or equal seq

    # -- the records ---------------------------------------------------------------------------
    def _filter(self, **more: Any) -> dict[str, Any]:
        return {"oa_kind": ITEM_KIND, "oa_session": self.session_id, **more}

    async def _records(self, min_seq: int | None = None) -> list[Any]:
        """This session's memories that hold history items (with ``oa_seq >= min_seq``): those ``add_items`` put under
        this session's keys (no door but ``put`` of an ``oa/`` key writes ``oa_*`` metadata: ``ADAPTER_METADATA``)."""
        records = await self._list(self._filter(**({"oa_seq": {"$gte": min_seq}} if min_seq else {})))
        own = f"oa/{self._tag}/"
        return [r for r in records if str(r.metadata.get("key", "")).startswith(own)]

    async def _list(self, spec: Mapping[str, Any]) -> list[Any]:
        """Every memory of the user (archived ones included) whose metadata passes ``spec``, page by page."""
        out: list[Any] = []
        while True:
            page = await call_memory(self.memory, "get_all", self.user_id, include_archived=True, limit=PAGE,
                               offset=len(out), metadata=dict(spec))
            out.extend(page)
            if len(page) < PAGE:
                return out

    @staticmethod
    def _assemble(records: Sequence[Any]) -> list[tuple[tuple[int, str], list[Any], Any]]:
        """``(order, records, item)`` per history item, oldest first; an item missing a part (a write cut short) or
        whose JSON does not parse is left out, as ``SQLiteSession`` leaves out a row it cannot decode."""
        groups: dict[tuple[int, str], list[Any]] = {}
        for rec in records:
            meta = rec.metadata
            groups.setdefault((int(meta["oa_seq"]), str(meta.get("oa_nonce", ""))), []).append(rec)
        out = []
        for order in sorted(groups):
            recs = sorted(groups[order], key=lambda r: int(r.metadata.get("oa_part", 0)))
            parts = int(recs[0].metadata.get("oa_parts", 1))
            if [int(r.metadata.get("oa_part", 0)) for r in recs] != list(range(parts)):
                continue
            try:
                item = json.loads("".join(r.metadata["oa_json"] for r in recs))
            except (KeyError, TypeError, ValueError):
                continue
            out.append((order, recs, item))
        return out

    async def _next_seq(self) -> int:
        """One more than the largest seq this session's history holds (read from the store, so that several
        ``LightmemSession`` objects over one session, in one process or many, append after each other)."""
        records = await self._records(self._seen_seq)
        top = max((int(r.metadata["oa_seq"]) for r in records), default=self._seen_seq)
        return max(top, self._seen_seq) + 1

    # -- the Session protocol ------------------------------------------------------------------
    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The session's history, oldest first; with ``limit`` (or ``session_settings.limit``), the latest ``limit``
        items (0: none; a negative limit: all, as ``SQLiteSession`` answers)."""
        limit = resolve_session_limit(limit, self.session_settings)
        if limit == 0:
            return []
        items = [item for _, _, item in self._assemble(await self._records())]
        return items[-limit:] if limit is not None and limit > 0 else items

    async def add_items(self, items: list[Any]) -> None:
        """Append ``items`` to the history; their user and assistant text turns also become the user's memories."""
        if not items:
            return
        dumped = [json.dumps(item, separators=(",", ":")) for item in items]  # a non-JSON item fails before any write
        seq = await self._next_seq()
        turns = []
        for item, text in zip(items, dumped):
            nonce = uuid.uuid4().hex[:12]
            parts = [text[i:i + PART_CHARS] for i in range(0, len(text), PART_CHARS)] or [""]
            for i, part in enumerate(parts):
                key = f"oa/{self._tag}/{seq:019d}/{nonce}/{i}"
                meta = self._filter(oa_seq=seq, oa_nonce=nonce, oa_part=i, oa_parts=len(parts), oa_json=part)
                rec = await call_memory(self.memory, "put", key, _summary(item), self.user_id, metadata=meta)
                await call_memory(self.memory, "archive", rec.id, self.user_id)  # history, not a memory to search
            self._seen_seq = seq
            turn = _turn_of(item) if self.remember else None
            if turn is not None:  # its memories are found again by this turn id (their provenance), not by metadata
                turns.append({"speaker": turn[0], "text": turn[1], "id": self._turn_id(seq, nonce)})
            seq += 1
        if turns:
            try:
                await call_memory(self.memory, "add", turns, self.user_id, session_id=self.session_id, policy=self.policy)
            except InvalidInputError as exc:  # e.g. a turn over the memory's max_turn_chars: the history has it
                log.warning("lightmem: session %r: turns kept in the history but not remembered: %s", self.session_id, exc)

    async def pop_item(self) -> Any | None:
        """Remove the latest history item and return it (None when the history is empty); the memories its turn
        became are erased with it (the SDK pops to rewind a run it retries)."""
        assembled = self._assemble(await self._records())
        if not assembled:
            return None
        (seq, nonce), records, item = assembled[-1]
        for rec in records:
            await self._delete(rec.id)
        for mem in await self._remembered(self._turn_id(seq, nonce)):
            await self._delete(mem.id)
        return item

    async def clear_session(self, forget: bool = False) -> None:
        """Erase the session's history; with ``forget=True``, also the memories its turns became."""
        for rec in await self._records():
            await self._delete(rec.id)
        if forget:
            for mem in await self._remembered(f"oa-{self._tag}-"):
                await self._delete(mem.id)

    def _turn_id(self, seq: int, nonce: str) -> str:
        return f"oa-{self._tag}-{seq}-{nonce}"

    async def _remembered(self, turn_id: str) -> list[Any]:
        """The memories this session's turns became whose source turn ids start with ``turn_id`` (a whole id, or
        the session's ``oa-<tag>-``): the session's memories (``session_id``) by their provenance."""
        mems = await self._list({"session_id": self.session_id})
        return [m for m in mems if any(t == turn_id or (turn_id.endswith("-") and t.startswith(turn_id))
                                       for t in m.provenance)]

    async def _delete(self, item_id: str) -> None:
        try:
            await call_memory(self.memory, "delete", item_id, self.user_id)
        except ItemNotFoundError:  # already gone (another session object popped it): nothing to erase
            pass

    # -- the hook ------------------------------------------------------------------------------
    def instructions(self, base: str = DEFAULT_BASE, budget: int | None = None) -> Callable[..., Any]:
        """``lightmem_instructions`` for this session's memory and user."""
        return lightmem_instructions(self.memory, self.user_id, base=base, budget=budget)


def _user_of(user_id: UserId, wrapper: RunContextWrapper[Any]) -> str:
    return user_id(wrapper) if callable(user_id) else user_id


def lightmem_instructions(memory: Any, user_id: UserId, base: str = DEFAULT_BASE, budget: int | None = None,
                          **context_options: Any) -> Callable[[RunContextWrapper[Any], Any], Any]:
    """Dynamic ``instructions`` for an ``Agent``: ``base``, a blank line, then ``build_context``'s prompt (at most
    ``budget`` tokens) for the last user message of the turn's input; ``base`` alone when there is none.

    ``user_id`` is a user id, or a function of the run's ``RunContextWrapper`` that returns one (for an agent that
    serves many users: ``lambda ctx: ctx.context.user_id``). ``context_options`` go to ``build_context``
    (``filters``, ``k``, ``stm``).
    """
    async def instructions(ctx: RunContextWrapper[Any], agent: Any) -> str:
        query = last_user_text(getattr(ctx, "turn_input", None))
        if not query:
            return base
        composed = await call_memory(memory, "build_context", query, _user_of(user_id, ctx), budget=budget, **context_options)
        return f"{base}\n\n{composed.prompt}" if base else composed.prompt

    return instructions


def lightmem_input_filter(memory: Any, user_id: str | Callable[[Any], str], budget: int | None = None,
                          **context_options: Any) -> Callable[[CallModelData[Any]], Any]:
    """A ``RunConfig(call_model_input_filter=...)`` that appends ``build_context``'s prompt for the last user message
    of the model's input to the instructions of every model call (the agent's own instructions first).

    ``user_id`` is a user id, or a function of the run's context object (``CallModelData.context``: what was passed
    to ``Runner.run(context=...)``) that returns one.
    """
    async def input_filter(data: CallModelData[Any]) -> ModelInputData:
        model_data = data.model_data
        query = last_user_text(model_data.input)
        if not query:
            return model_data
        uid = user_id(data.context) if callable(user_id) else user_id
        composed = await call_memory(memory, "build_context", query, uid, budget=budget, **context_options)
        instructions = f"{model_data.instructions}\n\n{composed.prompt}" if model_data.instructions else composed.prompt
        return ModelInputData(input=model_data.input, instructions=instructions)

    return input_filter
