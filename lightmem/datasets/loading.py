"""One entry for every file lightmem ingests: the format is read from the file's shape (or named), then the
format's parser runs (``formats`` holds what the parsers share; each parser imports it, so the choice of parser
lives here, above them all)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from lightmem.datasets.formats import (
    FORMATS,
    Conversation,
    Row,
    detect_format,
    load_jsonl_turns,
    read_json,
    read_jsonl_rows,
    row_values,
)
from lightmem.datasets.locomo import parse_locomo
from lightmem.datasets.longmemeval import parse_longmemeval
from lightmem.errors import InvalidInputError


def _jsonl_file_format(rows: list[Row]) -> str:
    """The format of a JSONL file from its first readable line; turns unless it is clearly a dataset."""
    first = next((r.value for r in rows if r.error is None), None)
    try:
        return detect_format([first])
    except InvalidInputError:
        return "jsonl"  # the turn loader names what is wrong with each line


def load_conversations(path: str | Path, fmt: str = "auto", skip_bad: bool = False) -> list[Conversation]:
    """Load any supported file into conversations.

    Args:
        path: LoCoMo or LongMemEval JSON (optionally gzipped), a JSONL file of turns, or a
            JSON list of turn dicts.
        fmt: ``auto`` (from the file's shape), ``locomo``, ``longmemeval`` or ``jsonl``.
        skip_bad: For turns (JSONL or a JSON list), drop bad rows instead of refusing the
            file; they are listed in each conversation's ``skipped``.

    Raises:
        FileNotFoundError: No such file.
        InvalidInputError: Unknown format, not JSON, or bad turns (all of them listed).
    """
    if fmt not in FORMATS:
        raise InvalidInputError(f"unknown format {fmt!r}; use {', '.join(FORMATS)}")
    p = Path(path)
    if ".jsonl" in p.suffixes:
        rows = read_jsonl_rows(p)
        fmt = _jsonl_file_format(rows) if fmt == "auto" else fmt
        data: Any = rows if fmt == "jsonl" else row_values(p, rows)
    else:
        data = read_json(p)
        fmt = detect_format(data) if fmt == "auto" else fmt
    if fmt == "locomo":
        return parse_locomo(data if isinstance(data, list) else [data])
    if fmt == "longmemeval":
        return parse_longmemeval(data if isinstance(data, list) else [data])
    try:
        return [load_jsonl_turns(data if isinstance(data, list) else [data], p.stem, skip_bad)]
    except InvalidInputError as exc:
        raise InvalidInputError(f"{p}: {exc}") from exc
