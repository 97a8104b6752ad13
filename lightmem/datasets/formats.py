"""Common records of the loaders, format detection and plain JSONL."""
from __future__ import annotations

import gzip
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightmem.datasets.catalog import missing_file_error
from lightmem.errors import InvalidInputError
from lightmem.timeutil import parse_timestamp
from lightmem.types import Turn
from lightmem.validation import check_unicode, message_to_turn

log = logging.getLogger(__name__)
MAX_LISTED = 20  # bad lines named in one error; the rest are counted
FORMATS = ("auto", "locomo", "longmemeval", "jsonl")


@dataclass
class Session:
    """A dated run of turns."""

    session_id: str
    timestamp: float
    turns: list[Turn]


@dataclass(frozen=True)
class Row:
    """One record of a JSONL file (or one element of a JSON list) and where it came from.

    Attributes:
        where: Its place for messages: ``"line 3"`` (1-based line of the file) or ``"element [2]"``.
        value: The parsed JSON value (``None`` when ``error`` is set).
        error: Why the line could not be read as JSON, or ``None``.
    """

    where: str
    value: Any = None
    error: str | None = None


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
    skipped: list[str] = field(default_factory=list)  # "line N: reason" of rows a lenient load dropped

    @property
    def turns(self) -> list[Turn]:
        return [t for s in self.sessions for t in s.turns]


def _parse_line(number: int, raw: bytes) -> Row | None:
    """A JSONL line as a row (``None`` for a blank line); a bad line becomes a row with an error."""
    where = f"line {number}"
    try:
        line = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return Row(where, error=f"not UTF-8 text (byte {exc.start + 1})")
    if not line.strip():
        return None
    try:
        return Row(where, json.loads(line))
    except json.JSONDecodeError as exc:
        return Row(where, error=f"not valid JSON ({exc.msg} at column {exc.colno})")


def read_jsonl_rows(path: str | Path) -> list[Row]:
    """Every non-blank line of a JSONL file (gzipped if ``.gz``), parsed, with its 1-based line number.

    A line that is not JSON does not stop the reading: its row carries the error instead.

    Raises:
        FileNotFoundError: No such file.
        InvalidInputError: The file cannot be read at all (e.g. a corrupt gzip stream).
    """
    p = Path(path)
    if not p.exists():
        raise missing_file_error(p)
    opener = gzip.open if p.suffix == ".gz" else open
    try:
        with opener(p, "rb") as fh:
            rows = [_parse_line(n, raw) for n, raw in enumerate(fh, 1)]
    except OSError as exc:
        raise InvalidInputError(f"{p} cannot be read: {exc}") from exc
    return [r for r in rows if r is not None]


def describe_bad_rows(bad: Sequence[str], limit: int = MAX_LISTED) -> str:
    """One indented line per bad row, at most ``limit`` of them, then "... and N more"."""
    lines = [f"  {b}" for b in bad[:limit]]
    if len(bad) > limit:
        lines.append(f"  ... and {len(bad) - limit} more")
    return "\n".join(lines)


def _bad_rows_error(bad: Sequence[str], total: int, noun: str, what: str = "valid turns") -> InvalidInputError:
    """One error listing every bad row (up to ``MAX_LISTED``) and how to get past them."""
    return InvalidInputError(
        f"{len(bad)} of {total} {noun} are not {what}, so nothing was loaded:\n{describe_bad_rows(bad)}\n"
        "Fix them, or keep only the good ones with `lightmem ingest --skip-bad-lines` "
        "(in Python: load_conversations(path, skip_bad=True))."
    )


def row_values(p: Path, rows: list[Row]) -> list[Any]:
    """The values of JSONL rows, or one error naming every line that is not JSON."""
    bad = [f"{r.where}: {r.error}" for r in rows if r.error]
    if bad:
        raise InvalidInputError(f"{p}: {_bad_rows_error(bad, len(rows), 'lines', 'valid JSON')}")
    return [r.value for r in rows]


def read_json(path: str | Path) -> Any:
    """JSON, JSONL (a list of the lines' values) or gzipped JSON, with a clear error on anything else.

    Raises:
        FileNotFoundError: No such file.
        InvalidInputError: Not JSON; for JSONL, every bad line is listed with its number.
    """
    p = Path(path)
    if ".jsonl" in p.suffixes:
        return row_values(p, read_jsonl_rows(p))
    if not p.exists():
        raise missing_file_error(p)
    opener = gzip.open if p.suffix == ".gz" else open
    try:
        with opener(p, "rt", encoding="utf-8") as fh:
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
    if isinstance(data, list) and any(isinstance(r, dict) and ("text" in r or "content" in r) for r in data):
        return "jsonl"  # any element: a bad first turn is reported by the loader, not as an unknown format
    raise InvalidInputError(
        "unrecognised file: expected LoCoMo (sample_id + conversation), LongMemEval "
        "(question_id + haystack_sessions) or JSONL of {speaker, text, timestamp}"
    )


_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}
_REQUIRED = object()


def json_type(value: object) -> str:
    """What a parsed JSON value is, as a message says it: "an object", "null"..."""
    return _JSON_TYPES.get(type(value), "null" if value is None else type(value).__name__)


def expect(value: object, kinds: type | tuple[type, ...], where: str, what: str) -> Any:
    """``value`` when it is one of ``kinds`` (a bool is not an int unless ``kinds`` names bool).

    Raises:
        InvalidInputError: "{where}: expected {what}, got an array" (and the like).
    """
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise InvalidInputError(f"{where}: expected {what}, got {json_type(value)}")
    return value


def field_of(record: Mapping[str, Any], key: str, kinds: type | tuple[type, ...], where: str, what: str,
             default: Any = _REQUIRED) -> Any:
    """``record[key]``, checked to be one of ``kinds``; ``default`` when it is absent or null.

    The loaders of dataset files read every field through this, so a bad file is an
    ``InvalidInputError`` naming the place and the field, never a ``KeyError`` or ``TypeError``.

    Raises:
        InvalidInputError: "{where}: missing field 'speaker'" (no ``default``), or
            "{where}: field 'speaker' must be a string, got a number".
    """
    value = record.get(key)
    if value is None:
        if default is _REQUIRED:
            raise InvalidInputError(f"{where}: missing field {key!r}")
        return default
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise InvalidInputError(f"{where}: field {key!r} must be {what}, got {json_type(value)}")
    if isinstance(value, str):
        try:
            check_unicode(value, f"field {key!r}")
        except InvalidInputError as exc:
            raise InvalidInputError(f"{where}: {exc}") from exc
    return value


def timestamp_at(value: object, where: str) -> float:
    """``parse_timestamp(value)``, its error prefixed with where the value is."""
    try:
        return parse_timestamp(value)
    except InvalidInputError as exc:
        raise InvalidInputError(f"{where}: {exc}") from exc


def warn_skipped(empty: Sequence[str], fmt: str) -> None:
    """One warning naming the turns a loader skipped because they hold nothing to remember."""
    if empty:
        log.warning("%s: skipped %d turn(s) with no text (and no image caption): nothing to remember\n%s",
                    fmt, len(empty), describe_bad_rows(empty))


def _row_turn(row: Row, index: int) -> Turn:
    """The turn of one row. Its default id ``L{index + 1}-{content hash}`` is the same when the file is
    ingested again (a resumed ingest skips it) and differs for another file's turn at that position."""
    if row.error:
        raise InvalidInputError(row.error)
    if not isinstance(row.value, dict):
        got = json_type(row.value)
        raise InvalidInputError(f"expected a JSON object {{speaker, text, timestamp}}, got {got}")
    turn = message_to_turn(row.value, base_ts=None)
    if "id" not in row.value and "turn_id" not in row.value and "dia_id" not in row.value:
        digest = hashlib.sha1(f"{turn.speaker}\x1f{turn.text}\x1f{turn.timestamp}".encode()).hexdigest()[:10]
        turn = Turn(f"L{index + 1}-{digest}", turn.speaker, turn.text, turn.timestamp, turn.session_id, turn.caption, turn.metadata)
    return turn


def load_jsonl_turns(rows: Sequence[Row | Any], conv_id: str = "jsonl", skip_bad: bool = False) -> Conversation:
    """Rows of {speaker, text, timestamp[, id, session_id]} as one conversation; sessions by session_id.

    Every row is checked before anything is returned, so a caller writes all or nothing.

    Args:
        rows: ``Row`` objects (from ``read_jsonl_rows``) or plain values, named ``element [i]``.
        conv_id: Id of the conversation (the file's stem).
        skip_bad: Drop bad rows and list them in ``Conversation.skipped`` instead of raising.

    Raises:
        InvalidInputError: Some row is bad (every bad row is listed, by line or element and
            field), unless ``skip_bad``; or no row at all is a valid turn.
    """
    rows = [r if isinstance(r, Row) else Row(f"element [{i}]", r) for i, r in enumerate(rows)]
    if not rows:
        raise InvalidInputError("no turns to load: the file is empty")
    noun = "lines" if rows[0].where.startswith("line") else "elements"
    sessions: dict[str, Session] = {}
    bad: list[str] = []
    for i, row in enumerate(rows):
        try:
            turn = _row_turn(row, i)
        except InvalidInputError as exc:
            bad.append(f"{row.where}: {exc}")
            continue
        sid = turn.session_id or "session"
        sessions.setdefault(sid, Session(sid, turn.timestamp, [])).turns.append(turn)
    if bad and not sessions:
        raise InvalidInputError(f"none of the {len(rows)} {noun} is a valid turn:\n{describe_bad_rows(bad)}")
    if bad and not skip_bad:
        raise _bad_rows_error(bad, len(rows), noun)
    return Conversation(conv_id, list(sessions.values()), skipped=bad)
