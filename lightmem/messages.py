"""Validation of what callers pass to ``Memory.add``: everything is checked before any write."""
from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from lightmem.errors import InvalidInputError
from lightmem.timeutil import now, parse_timestamp
from lightmem.types import Turn

_TEXT_KEYS = ("text", "content")
_SPEAKER_KEYS = ("speaker", "role", "name")
_ID_KEYS = ("turn_id", "id", "dia_id")
_CAPTION_KEYS = ("caption", "blip_caption")
_KNOWN = {*_TEXT_KEYS, *_SPEAKER_KEYS, *_ID_KEYS, *_CAPTION_KEYS, "timestamp", "session_id", "metadata"}


def check_user_id(user_id: object) -> str:
    if not isinstance(user_id, str) or not user_id.strip():
        raise InvalidInputError(f"user_id must be a non-empty string, got {user_id!r}")
    return user_id


def _pick(msg: Mapping[str, Any], keys: Sequence[str], what: str, required: bool, i: int) -> str | None:
    for k in keys:
        if k in msg and msg[k] is not None:
            v = msg[k]
            if not isinstance(v, str):
                raise InvalidInputError(f"message {i}: {k!r} must be a string, got {type(v).__name__}")
            return v
    if required:
        raise InvalidInputError(f"message {i} has no {what} (one of {', '.join(keys)})")
    return None


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
    if isinstance(messages, (str, Mapping)):
        messages = [messages]
    if not isinstance(messages, Sequence) or isinstance(messages, (bytes, bytearray)):
        raise InvalidInputError(f"messages must be a string, a dict or a list of them, got {type(messages).__name__}")
    if len(messages) == 0:
        raise InvalidInputError("messages is empty: nothing to add")
    base_ts = now() if timestamp is None else parse_timestamp(timestamp)
    if session_id is not None and not isinstance(session_id, str):
        raise InvalidInputError("session_id must be a string")
    turns: list[Turn] = []
    for i, msg in enumerate(messages):
        if isinstance(msg, str):
            msg = {"text": msg}
        if not isinstance(msg, Mapping):
            raise InvalidInputError(f"message {i} must be a string or a dict, got {type(msg).__name__}")
        text = _pick(msg, _TEXT_KEYS, "text", True, i)
        if not text or not text.strip():
            raise InvalidInputError(f"message {i} has empty text")
        speaker = _pick(msg, _SPEAKER_KEYS, "speaker", False, i) or default_speaker
        turn_id = _pick(msg, _ID_KEYS, "id", False, i) or f"t-{uuid.uuid4().hex[:12]}"
        caption = _pick(msg, _CAPTION_KEYS, "caption", False, i)
        sid = msg.get("session_id", session_id)
        if sid is not None and not isinstance(sid, str):
            raise InvalidInputError(f"message {i}: session_id must be a string")
        ts = parse_timestamp(msg["timestamp"]) if msg.get("timestamp") is not None else base_ts
        meta = msg.get("metadata") or {}
        if not isinstance(meta, Mapping):
            raise InvalidInputError(f"message {i}: metadata must be a dict")
        extra = {k: v for k, v in msg.items() if k not in _KNOWN}
        meta = {**extra, **meta}
        try:
            json.dumps(meta)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"message {i}: metadata must be JSON-serialisable ({exc})") from exc
        turns.append(Turn(turn_id, speaker.strip() or default_speaker, text, ts, sid, caption, dict(meta)))
    ids = [t.turn_id for t in turns]
    if len(set(ids)) != len(ids):
        raise InvalidInputError("two messages share a turn id")
    return turns
