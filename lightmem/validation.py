"""Validation of what callers pass to ``Memory``: everything is checked before any write or search."""
from __future__ import annotations

import json
import math
import numbers
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from lightmem.errors import InvalidInputError, shown
from lightmem.storable import check_unicode
from lightmem.timeutil import now, parse_timestamp
from lightmem.types import Turn

_TEXT_KEYS = ("text", "content")
_SPEAKER_KEYS = ("speaker", "role", "name")
_ID_KEYS = ("turn_id", "id", "dia_id")
_CAPTION_KEYS = ("caption", "blip_caption")
_KNOWN = {*_TEXT_KEYS, *_SPEAKER_KEYS, *_ID_KEYS, *_CAPTION_KEYS, "timestamp", "session_id", "metadata"}
# Bounds of the numbers a search takes: far above any real use, far below where arithmetic on
# them overflows a float (k=10**400 did), so a caller's typo is an error, never a crash.
MAX_K = 1_000
MAX_BUDGET = 10_000_000  # tokens: beyond the context of any model
# Names (user ids, speakers, turn, session and item ids) are identifiers, not texts: the same bound on
# every entry point (Python, HTTP, MCP) and both backends.
MAX_ID_CHARS = 256
# The longest turn ``add`` takes by default (``Memory.open(max_turn_chars=...)``): 2.4x LongMemEval's
# longest turn (41,855 characters), small enough that one add cannot hold a server worker for seconds.
MAX_TURN_CHARS = 100_000
# The bound of every metadata object a caller writes (a message's metadata with its extra fields, or
# ``update(metadata=...)``), on every entry point: nesting depth (the object itself is level 1, each object or
# array inside it one level more), keys of all its objects together, and its size as compact UTF-8 JSON.
# Far above real use (a few flat tags), far below where a reader fails: pydantic stops serialising at
# ~255 levels (a PATCH at depth 300 was stored, then every read of it answered 500) and json at ~1,000.
MAX_METADATA_DEPTH = 32
MAX_METADATA_KEYS = 1_000
MAX_METADATA_BYTES = 64 * 1024
# The metadata keys lightmem's framework adapters (lightmem.integrations) keep their records' bookkeeping in, each
# prefix with the prefix of the ``Memory.put`` keys of that adapter's records: LangGraph's ``lg_ns``, ``lg_key``,
# ``lg_value`` ... under keys ``lg:...``, the OpenAI Agents session's ``oa_kind``, ``oa_json`` ... under ``oa/...``.
# No caller's metadata may hold them (add, update, batch, HTTP, MCP, a JSONL ingest): only ``put`` of one of the
# adapter's own keys writes them, so no door can forge an adapter's record into another memory or change one.
ADAPTER_METADATA = {"lg_": "lg:", "oa_": "oa/"}


def check_user_id(user_id: object) -> str:
    """Return ``user_id`` unchanged when it names a user.

    Raises:
        InvalidInputError: ``user_id`` is not a string, is empty or only whitespace, is longer than
            ``MAX_ID_CHARS``, or holds a character no store keeps (NUL, a lone surrogate).
    """
    if not isinstance(user_id, str):
        raise InvalidInputError(
            f"user_id must be a string naming whose memories these are (e.g. user_id='alice'), got {type(user_id).__name__}"
        )
    if not user_id.strip():
        raise InvalidInputError(
            f"user_id is empty or only whitespace ({shown(user_id)}): pass the id of the user whose memories these "
            "are, e.g. user_id='alice'"
        )
    return check_id(user_id, "user_id")


def check_id(value: object, what: str) -> str:
    """Return ``value`` when it is a usable identifier: a non-blank string of at most ``MAX_ID_CHARS``
    characters that both backends can store.

    Raises:
        InvalidInputError: not a string, blank, too long, or holding NUL or a lone surrogate.
    """
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise InvalidInputError(f"{what} is empty or only whitespace ({shown(value)})")
    if len(value) > MAX_ID_CHARS:
        raise InvalidInputError(f"{what} is {len(value)} characters long; an identifier has at most {MAX_ID_CHARS}")
    return check_unicode(value, what)


def check_query(query: object) -> str:
    """Return ``query`` when it is a non-empty text a store can search with.

    Raises:
        InvalidInputError: not a string, blank, or holding NUL or a lone surrogate.
    """
    if not isinstance(query, str) or not query.strip():
        raise InvalidInputError("query must be a non-empty string")
    return check_unicode(query, "query")


def check_turn_lengths(turns: Sequence[Turn], max_chars: int) -> None:
    """Refuse turns whose text (or image caption) is longer than ``max_chars`` characters.

    A turn's cost on the write path grows with its length; the bound keeps one request from holding
    a worker (and every other user's request behind it) for long. Nothing is split silently.

    Raises:
        InvalidInputError: a turn is too long (the message names it and the limit).
    """
    for i, turn in enumerate(turns):
        n = max(len(turn.text), len(turn.caption or ""))
        if n > max_chars:
            raise InvalidInputError(
                f"message {i} is {n:,} characters long, over the limit of {max_chars:,} per turn: split it into "
                "several messages, or open the memory with a larger max_turn_chars")


def _pick(msg: Mapping[str, Any], keys: Sequence[str], what: str, required: bool) -> str | None:
    for k in keys:
        if k in msg and msg[k] is not None:
            v = msg[k]
            if not isinstance(v, str):
                raise InvalidInputError(f"field {k!r} must be a string, got {type(v).__name__}")
            if keys is not _TEXT_KEYS and keys is not _CAPTION_KEYS and len(v) > MAX_ID_CHARS:
                raise InvalidInputError(f"field {k!r} is {len(v)} characters long; a name or id has at most {MAX_ID_CHARS}")
            return check_unicode(v, f"field {k!r}")
    if required:
        names = " or ".join(repr(k) for k in keys)
        raise InvalidInputError(f"missing field {names} (the {what})")
    return None


def check_json(value: object, what: str) -> str:
    """Refuse what cannot be stored as standard JSON: objects, NaN and infinities, lone surrogates.

    SQLite would keep ``NaN`` as text that standard JSON readers refuse, and the API would
    return it as ``null``: a silent change of the caller's data. A lone surrogate could be
    stored escaped, but no HTTP answer could carry it back.

    Returns:
        ``value`` as compact JSON text (``ensure_ascii=False``).

    Raises:
        InvalidInputError: ``value`` is not JSON-serialisable, holds a non-finite number or a lone surrogate.
    """
    try:
        dumped = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
        dumped.encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:  # UnicodeEncodeError is a ValueError
        if isinstance(exc, UnicodeEncodeError):
            reason = "a lone surrogate is no Unicode text"
        elif "Out of range float" in str(exc):
            reason = "NaN and infinity are not JSON numbers"
        else:
            reason = str(exc)[:120]
        raise InvalidInputError(f"{what} must be JSON-serialisable with finite numbers ({reason})") from exc
    if "\\u0000" in dumped and _holds_nul(value):  # json.dumps writes NUL as \u0000 whatever ensure_ascii says
        raise InvalidInputError(f"{what} holds a NUL character (\\u0000), which a database cannot store in JSON; remove it")
    return dumped


def json_depth(value: object, limit: int | None = None) -> int:
    """How deeply ``value`` nests objects (mappings) and arrays (lists, tuples): 0 for a scalar, 1 for a
    flat object or array. Walked with a stack, never recursion, so no depth can exhaust Python's; with
    ``limit``, the walk stops at the first container deeper than it and returns that depth."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, level = stack.pop()
        if isinstance(v, Mapping):
            children = list(v.values())
        elif isinstance(v, (list, tuple)):
            children = list(v)
        else:
            continue
        deepest = max(deepest, level)
        if limit is not None and level > limit:
            return level
        stack.extend((c, level + 1) for c in children)
    return deepest


def check_metadata(meta: Mapping[str, Any], what: str = "field 'metadata'", key: str | None = None) -> None:
    """Refuse metadata over the bound (``MAX_METADATA_DEPTH`` levels, ``MAX_METADATA_KEYS`` keys in all,
    ``MAX_METADATA_BYTES`` of compact UTF-8 JSON), not storable as standard JSON (``check_json``), or holding an
    adapter's bookkeeping keys (``check_adapter_keys``; ``key``: the ``Memory.put`` key the metadata is written under).

    Checked before anything is written, by every entry point (Python, HTTP, MCP, a JSONL ingest): what is
    stored can always be read back and served. The walk is iterative and stops at the first excess, so a
    hostile tree costs no more than reading it once.

    Raises:
        InvalidInputError: naming ``what`` and the limit it passes.
    """
    keys, stack = 0, [(meta, 1)]
    while stack:
        v, level = stack.pop()
        if isinstance(v, Mapping):
            children = list(v.values())
            keys += len(children)
        elif isinstance(v, (list, tuple)):
            children = list(v)
        else:
            continue
        if level > MAX_METADATA_DEPTH:
            raise InvalidInputError(f"{what} is nested deeper than the limit of {MAX_METADATA_DEPTH} levels (objects "
                                    "and arrays inside one another): flatten it")
        if keys > MAX_METADATA_KEYS:
            raise InvalidInputError(f"{what} has more keys than the limit of {MAX_METADATA_KEYS:,} (all its objects "
                                    "together)")
        stack.extend((c, level + 1) for c in children)
    size = len(check_json(meta, what).encode("utf-8"))
    if size > MAX_METADATA_BYTES:
        raise InvalidInputError(f"{what} is {size:,} bytes as JSON, over the limit of {MAX_METADATA_BYTES:,} bytes "
                                f"({MAX_METADATA_BYTES // 1024} KiB): keep large data elsewhere and store a reference")
    check_adapter_keys(meta, what, key)


def is_adapter_key(name: object) -> bool:
    """Whether ``name`` is a metadata key a framework adapter keeps its bookkeeping in (``ADAPTER_METADATA``)."""
    return isinstance(name, str) and name.startswith(tuple(ADAPTER_METADATA))


def check_adapter_keys(meta: Mapping[str, Any], what: str, key: str | None = None) -> None:
    """Refuse a top-level key of ``meta`` that an adapter keeps its bookkeeping in, unless ``key`` (a
    ``Memory.put`` key) is one of that adapter's own (``ADAPTER_METADATA``).

    Raises:
        InvalidInputError: naming ``what`` and the reserved key.
    """
    for name in meta:
        if not is_adapter_key(name):
            continue
        prefix = next(p for p in ADAPTER_METADATA if name.startswith(p))
        if key is None or not key.startswith(ADAPTER_METADATA[prefix]):
            reserved = " and ".join(f"{p!r}" for p in ADAPTER_METADATA)
            raise InvalidInputError(f"{what} holds the key {shown(name)}: metadata keys starting with {reserved} are "
                                    "reserved for the bookkeeping of lightmem's framework adapters (LangGraph, OpenAI "
                                    "Agents), which no caller's metadata may write or change; rename the field")


def _holds_nul(value: object) -> bool:
    """Whether a string of ``value`` (a JSON-serialisable tree, keys included) holds NUL."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if "\x00" in v:
                return True
        elif isinstance(v, Mapping):
            stack.extend(k for k in v.keys() if isinstance(k, str))
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return False


def _metadata(msg: Mapping[str, Any]) -> dict[str, Any]:
    """The ``metadata`` dict merged over unknown keys, checked to be JSON-serialisable and within the bound
    (``check_metadata``)."""
    meta = msg.get("metadata") or {}
    if not isinstance(meta, Mapping):
        raise InvalidInputError(f"field 'metadata' must be an object (dict), got {type(meta).__name__}")
    meta = {**{k: v for k, v in msg.items() if k not in _KNOWN}, **meta}
    check_metadata(meta, "field 'metadata' (with the extra fields)")
    return dict(meta)


def _timestamp(msg: Mapping[str, Any], base_ts: float | None) -> float:
    """The message's own timestamp, else ``base_ts``; ``base_ts=None`` makes it required."""
    if msg.get("timestamp") is None:
        if base_ts is None:
            raise InvalidInputError("missing field 'timestamp'")
        return base_ts
    try:
        return parse_timestamp(msg["timestamp"])
    except InvalidInputError as exc:
        raise InvalidInputError(f"field 'timestamp': {exc}") from exc


def message_to_turn(
    msg: Mapping[str, Any],
    base_ts: float | None,
    session_id: str | None = None,
    default_speaker: str = "user",
) -> Turn:
    """Validate one message dict into a turn.

    Args:
        msg: A message dict (see ``to_turns``).
        base_ts: Time of a message that carries no ``timestamp``; ``None`` makes the field required.
        session_id: Session of a message that carries no ``session_id``.
        default_speaker: Speaker of a message that names none.

    Raises:
        InvalidInputError: A missing, empty or mistyped field; the message names the field
            but not the message, so callers can prefix where it came from.
    """
    text = _pick(msg, _TEXT_KEYS, "text", True)
    if not text or not text.strip():
        raise InvalidInputError("field 'text' is empty")
    speaker = _pick(msg, _SPEAKER_KEYS, "speaker", False) or default_speaker
    turn_id = _pick(msg, _ID_KEYS, "id", False) or f"t-{uuid.uuid4().hex[:12]}"
    caption = _pick(msg, _CAPTION_KEYS, "caption", False)
    sid = msg.get("session_id", session_id)
    if sid is not None:
        check_id(sid, "field 'session_id'")
    ts = _timestamp(msg, base_ts)
    return Turn(turn_id, speaker.strip() or default_speaker, text, ts, sid, caption, _metadata(msg))


def message_list(messages: object) -> Sequence[Any]:
    """``add``'s ``messages`` (a string, a dict, or a list of them) as a non-empty list.

    Raises:
        InvalidInputError: another type, or no message.
    """
    if isinstance(messages, (str, Mapping)):
        messages = [messages]
    if not isinstance(messages, Sequence) or isinstance(messages, (bytes, bytearray)):
        raise InvalidInputError(f"messages must be a string, a dict or a list of them, got {type(messages).__name__}")
    if len(messages) == 0:
        raise InvalidInputError("messages is empty: nothing to add")
    return messages


def to_turns(
    messages: str | Mapping[str, Any] | Sequence[str | Mapping[str, Any]],
    timestamp: object = None,
    session_id: str | None = None,
    default_speaker: str = "user",
) -> list[Turn]:
    """Normalise ``messages`` into validated turns.

    Args:
        messages: A string, a message dict (``text``/``content``, ``speaker``/``role``,
            optional ``id``, ``caption``, ``timestamp``, ``session_id``, ``metadata``;
            other JSON-serialisable keys are kept as metadata), or a list of those.
        timestamp: Session time for messages that carry none; defaults to now.
        session_id: Session for messages that carry none.
        default_speaker: Speaker of bare strings.

    Raises:
        InvalidInputError: Empty or non-string text, wrong field types, a non-serialisable
            extra field, duplicate turn ids, or an unparsable timestamp.
    """
    messages = message_list(messages)
    base_ts = now() if timestamp is None else parse_timestamp(timestamp)
    if session_id is not None:
        check_id(session_id, "session_id")
    turns: list[Turn] = []
    for i, msg in enumerate(messages):
        if isinstance(msg, str):
            msg = {"text": msg}
        if not isinstance(msg, Mapping):
            raise InvalidInputError(f"message {i} must be a string or a dict, got {type(msg).__name__}")
        try:
            turns.append(message_to_turn(msg, base_ts, session_id, default_speaker))
        except InvalidInputError as exc:
            raise InvalidInputError(f"message {i}: {exc}") from exc
    ids = [t.turn_id for t in turns]
    if len(set(ids)) != len(ids):
        raise InvalidInputError("two messages share a turn id")
    return turns


def check_k(k: object) -> int:
    """Return ``k`` when it is a whole number of hits in 1..``MAX_K``.

    Raises:
        InvalidInputError: ``k`` is not an int (a bool is not), or is out of range.
    """
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise InvalidInputError(f"k must be a whole number of hits from 1 to {MAX_K}, got {shown(k)}")
    return k


def check_budget(budget: object) -> int | None:
    """Return ``budget`` (``None`` allowed) when it is a number of tokens in 1..``MAX_BUDGET``.

    Raises:
        InvalidInputError: ``budget`` is not an int (a bool is not), or is out of range.
    """
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or not 1 <= budget <= MAX_BUDGET):
        raise InvalidInputError(f"budget must be a positive number of tokens up to {MAX_BUDGET}, got {shown(budget)}")
    return budget


def check_threshold(threshold: object, low: float, high: float) -> float | None:
    """Return ``threshold`` as a float (``None``: no filter) when it is a finite real number from ``low`` to ``high``,
    the range of the scores the search can give (``TwoStageRetriever.score_range``): below it, it would drop
    nothing; above it, everything.

    Raises:
        InvalidInputError: ``threshold`` is not a real number (a bool is not, nor a string), is NaN or infinite, or
            is outside ``low``..``high``.
    """
    if threshold is None:
        return None
    try:
        ok = isinstance(threshold, numbers.Real) and not isinstance(threshold, bool) and math.isfinite(threshold)
    except OverflowError:  # an int beyond float range
        ok = False
    if not ok:
        raise InvalidInputError(f"threshold must be a finite number (a hit is kept when its score is above it) or "
                                f"None for no filter, got {shown(threshold)}")
    value = float(threshold)
    if not low <= value <= high:
        raise InvalidInputError(f"threshold must be within the range of this memory's scores, {low:g} to {high:g} "
                                f"(a hit is kept when its score is above it), got {shown(threshold)}")
    return value


def check_stm(stm: object) -> list[str]:
    """Return the recent turns of a search or a context (``stm``) as a list when all are strings.

    Raises:
        InvalidInputError: ``stm`` is a lone string or not a list, or holds something else than strings.
    """
    if isinstance(stm, (str, bytes, Mapping)) or not isinstance(stm, Sequence):
        raise InvalidInputError(f"stm must be a list of the conversation's recent turns (strings), got {type(stm).__name__}")
    if not all(isinstance(line, str) for line in stm):
        raise InvalidInputError("stm must be a list of strings: the conversation's recent turns, oldest first")
    return [check_unicode(line, f"stm[{i}]") for i, line in enumerate(stm)]


def check_item_fields(fields: Mapping[str, Any], text: object = None) -> dict[str, Any]:
    """Check what ``Memory.update`` changes (``text``, and ``fields``) before the store is touched.

    Names the store does not update are passed on: the store refuses them, listing what it updates.

    Returns:
        ``fields``, with lists as lists and times as Unix seconds.

    Raises:
        InvalidInputError: nothing to change, an empty text, a field of the wrong type, metadata that
            is not a JSON object of finite numbers or is over the bound (``check_metadata``), a lone surrogate,
            or a time outside the years 1900-3000.
    """
    if text is None and not fields:
        raise InvalidInputError("nothing to update: give a new text, or fields such as metadata={...} or topic='...'")
    if text is not None:
        if not isinstance(text, str) or not text.strip():
            raise InvalidInputError("text must be a non-empty string")
        check_unicode(text, "text")
    out = dict(fields)
    for key in ("topic", "superseded_by"):
        if out.get(key) is not None and not isinstance(out[key], str):
            raise InvalidInputError(f"field {key!r} must be a string or None, got {type(out[key]).__name__}")
        if out.get(key) is not None:
            check_unicode(out[key], f"field {key!r}")
    for key in ("entities", "provenance"):
        if key in out and (not isinstance(out[key], (list, tuple)) or not all(isinstance(v, str) for v in out[key])):
            raise InvalidInputError(f"field {key!r} must be a list of strings")
        if key in out:
            out[key] = [check_unicode(v, f"field {key!r}") for v in out[key]]
    if "metadata" in out:
        if not isinstance(out["metadata"], Mapping):
            raise InvalidInputError(f"field 'metadata' must be an object (dict), got {type(out['metadata']).__name__}")
        out["metadata"] = dict(out["metadata"])
        check_metadata(out["metadata"], "field 'metadata'")
    for key, required in (("event_time", True), ("valid_from", False), ("valid_to", False)):
        if key in out and (required or out[key] is not None):
            try:
                out[key] = parse_timestamp(out[key])
            except InvalidInputError as exc:
                raise InvalidInputError(f"field {key!r}: {exc}") from exc
    if "utility" in out:
        out["utility"] = _finite(out["utility"], "utility")
    if "n_tokens" in out:
        n = out["n_tokens"]
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < 2**31:  # a store's INTEGER column
            raise InvalidInputError(f"field 'n_tokens' must be a whole number from 0 to {2**31 - 1}, got {shown(n)}")
    return out


def _finite(value: object, key: str) -> float:
    """``value`` as a float when it is a finite number (not a bool, not 10**400)."""
    try:
        ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    except OverflowError:  # an int beyond float range
        ok = False
    if not ok:
        raise InvalidInputError(f"field {key!r} must be a finite number, got {shown(value)}")
    return float(value)
