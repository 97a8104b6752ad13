"""Strict JSON I/O for the generative roles: validate, repair, retry once, then fall back.

A malformed, empty or timed-out response never raises to the caller and never loses a
turn: it is counted in the usage meter, logged, and replaced by the deterministic
fallback the role provides.
"""
from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from lightmem.llm.base import LLM, GenerationError

log = logging.getLogger(__name__)
T = TypeVar("T", bound=BaseModel)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S | re.I)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_PY_LITERALS = {r"\bTrue\b": "true", r"\bFalse\b": "false", r"\bNone\b": "null"}


def first_json_value(text: str) -> str | None:
    """The first balanced ``{...}`` or ``[...]`` in ``text`` (strings and escapes respected)."""
    m = _FENCE.search(text)
    if m:
        text = m.group(1)
    start = next((i for i, ch in enumerate(text) if ch in "{["), None)
    if start is None:
        return None
    stack, in_str, esc, quote = [], False, False, ""
    for i in range(start, len(text)):
        ch = text[i]
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == quote:
                in_str = False
        elif ch in "\"'":
            in_str, quote = True, ch
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            if not stack or stack.pop() != ch:
                return None
            if not stack:
                return text[start : i + 1]
    if not stack:
        return None
    # The token limit cut the object off: close the open string and brackets.
    return text[start:] + (quote if in_str else "") + "".join(reversed(stack))


def repair_json(text: str) -> Any:
    """Parse model output as JSON, repairing the usual small-model mistakes.

    Handles code fences, prose around the object, trailing commas, single quotes, Python
    literals and an object cut off by the token limit.

    Raises:
        ValueError: Nothing JSON-like can be recovered.
    """
    raw = first_json_value(text or "")
    if raw is None:
        raise ValueError("no JSON object in the output")
    for candidate in _variants(raw):
        try:
            return json.loads(candidate)
        except json.JSONDecodeError:
            continue
    raise ValueError(f"unrepairable JSON: {raw[:80]!r}")


def _variants(raw: str):
    yield raw
    fixed = _TRAILING_COMMA.sub(r"\1", raw)
    yield fixed
    for pat, rep in _PY_LITERALS.items():
        fixed = re.sub(pat, rep, fixed)
    yield fixed
    if "'" in fixed:
        yield _TRAILING_COMMA.sub(r"\1", re.sub(r"(?<![A-Za-z])'|'(?![A-Za-z])", '"', fixed))


def parse_as(text: str, schema: type[T]) -> T:
    """Repair and validate against a pydantic schema (ValueError on failure)."""
    value = repair_json(text)
    try:
        return schema.model_validate(value)
    except ValidationError as exc:
        raise ValueError(f"output does not match {schema.__name__}: {exc.errors()[0]['msg']}") from exc


def call_json(
    llm: LLM,
    prompts: list[str],
    schema: type[T],
    role: str,
    retry_prompt: Callable[[str], str],
    max_new_tokens: int | None = None,
) -> list[T | None]:
    """One structured call per prompt: parse, retry the failures once, ``None`` where both fail.

    Never raises for a model or backend failure; the caller substitutes its fallback for
    ``None``. Backend errors are counted by the backend, malformed outputs here: each once.
    """
    try:
        outs = llm.generate(prompts, role=role, max_new_tokens=max_new_tokens)
    except GenerationError as exc:  # the backend has counted its own failure
        log.warning("%s: backend failed (%s); using the fallback", role, exc)
        return [None] * len(prompts)
    results: list[T | None] = []
    retry_idx: list[int] = []
    for i, out in enumerate(outs):
        try:
            results.append(parse_as(out, schema))
        except ValueError as exc:
            log.debug("%s: malformed output (%s): %r", role, exc, out[:200])
            results.append(None)
            retry_idx.append(i)
    if retry_idx:
        try:
            again = llm.generate([retry_prompt(prompts[i]) for i in retry_idx], role=role, max_new_tokens=max_new_tokens)
        except GenerationError:
            again = [""] * len(retry_idx)
        for i, out in zip(retry_idx, again):
            try:
                results[i] = parse_as(out, schema)
                llm.meter.repaired(role)
            except ValueError:
                llm.meter.failure(role)
                log.warning("%s: output still malformed after a retry; using the fallback", role)
    return results
