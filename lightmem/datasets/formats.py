"""Common records of the loaders, format detection and plain JSONL."""
from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightmem.errors import InvalidInputError
from lightmem.messages import to_turns
from lightmem.types import Turn


@dataclass
class Session:
    """A dated run of turns."""

    session_id: str
    timestamp: float
    turns: list[Turn]


@dataclass
class QAItem:
    """A benchmark question with its gold evidence turn ids."""

    question: str
    answer: str
    evidence: list[str]
    category: int | str
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Conversation:
    """A conversation (LoCoMo sample, LongMemEval instance, or a JSONL file)."""

    conv_id: str
    sessions: list[Session]
    qa: list[QAItem] = field(default_factory=list)
    speakers: tuple[str, ...] = ()

    @property
    def turns(self) -> list[Turn]:
        return [t for s in self.sessions for t in s.turns]


def read_json(path: str | Path) -> Any:
    """JSON or gzipped JSON, with a clear error on anything else."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p} does not exist")
    opener = gzip.open if p.suffix == ".gz" else open
    try:
        with opener(p, "rt", encoding="utf-8") as fh:
            if ".jsonl" in p.suffixes:
                return [json.loads(line) for line in fh if line.strip()]
            return json.load(fh)
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as exc:
        raise InvalidInputError(f"{p} is not valid JSON: {exc}") from exc


def detect_format(data: Any) -> str:
    """``locomo``, ``longmemeval`` or ``jsonl`` from the shape of parsed data."""
    if isinstance(data, dict):
        data = [data]
    if isinstance(data, list) and data and isinstance(data[0], dict):
        first = data[0]
        if "conversation" in first and "sample_id" in first:
            return "locomo"
        if "haystack_sessions" in first and "question_id" in first:
            return "longmemeval"
        if any(k in first for k in ("text", "content")):
            return "jsonl"
    raise InvalidInputError(
        "unrecognised file: expected LoCoMo (sample_id + conversation), LongMemEval "
        "(question_id + haystack_sessions) or JSONL of {speaker, text, timestamp}"
    )


def load_jsonl_turns(rows: list[dict[str, Any]], conv_id: str = "jsonl") -> Conversation:
    """Rows of {speaker, text, timestamp[, id, session_id]} as one conversation; sessions by session_id."""
    sessions: dict[str, Session] = {}
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise InvalidInputError(f"line {i + 1}: expected a JSON object")
        if row.get("timestamp") is None:
            raise InvalidInputError(f"line {i + 1}: every JSONL turn needs a timestamp")
        turn = to_turns(row, row["timestamp"])[0]
        if "id" not in row and "turn_id" not in row:
            turn = Turn(f"L{i + 1}", turn.speaker, turn.text, turn.timestamp, turn.session_id, turn.caption, turn.metadata)
        sid = turn.session_id or "session"
        sessions.setdefault(sid, Session(sid, turn.timestamp, [])).turns.append(turn)
    return Conversation(conv_id, list(sessions.values()))


def load_conversations(path: str | Path, fmt: str = "auto") -> list[Conversation]:
    """Load any supported file into conversations."""
    from lightmem.datasets.locomo import parse_locomo
    from lightmem.datasets.longmemeval import parse_longmemeval

    data = read_json(path)
    fmt = detect_format(data) if fmt == "auto" else fmt
    if fmt == "locomo":
        return parse_locomo(data if isinstance(data, list) else [data])
    if fmt == "longmemeval":
        return parse_longmemeval(data if isinstance(data, list) else [data])
    if fmt == "jsonl":
        return [load_jsonl_turns(data if isinstance(data, list) else [data], Path(path).stem)]
    raise InvalidInputError(f"unknown format {fmt!r}; use auto, locomo, longmemeval or jsonl")
