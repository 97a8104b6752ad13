"""Filters on a memory's metadata, as SQL for both backends.

A filter is ``{"key": value}`` (equal) or ``{"key": {"$op": value}}`` with ``$eq $ne $gt $gte $lt $lte``, the
operators LangGraph's stores take; several keys must all hold. A key names a top-level field of the metadata or,
dotted (``"a.b"``), a nested one. Each part of a dotted key names an object's field, never an array's element, on
both backends: ``"arr.0"`` is the field ``"0"`` of the object ``arr``, and matches nothing when ``arr`` is an array.
A missing field equals nothing: it matches ``$ne`` and no other operator.
Searches apply it before ranking (the store lists the user's matching rows, and Stage 1 keeps only those), so a
filtered search returns its ``k`` when that many memories match.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from lightmem.errors import InvalidInputError, shown
from lightmem.storable import check_unicode

OPS = {"$eq": "=", "$ne": "!=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
MAX_CONDITIONS = 32
# How deeply a filter given as JSON text (``GET /v1/memories?metadata=``, the console's ``?meta=``) may nest, checked
# before it is parsed: a filter nests 2 levels ({"field": {"$op": value}}); at ~1,000 json.loads raises RecursionError.
MAX_JSON_DEPTH = 8
_KEY = re.compile(r"[A-Za-z0-9_\-]{1,64}(\.[A-Za-z0-9_\-]{1,64}){0,7}")

Condition = tuple[str, str, Any]  # (dotted key, operator, value)


def parse(spec: object, what: str = "filters.metadata") -> tuple[Condition, ...]:
    """Check a metadata filter and return its conditions.

    Raises:
        InvalidInputError: not a mapping, a key that is not a dotted name, an unknown operator, a value that is not
            a string, a finite number, a boolean or null, or an ordering of null or a boolean.
    """
    if not isinstance(spec, Mapping):
        raise InvalidInputError(f"{what} must be an object of field: value or field: {{\"$op\": value}}, got "
                                f"{type(spec).__name__}")
    out: list[Condition] = []
    for key, cond in spec.items():
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise InvalidInputError(f"{what}: {shown(key)} is not a field name (letters, digits, _ and -, dotted for "
                                    "a nested field)")
        if isinstance(cond, Mapping) and not cond:  # no operator would be no condition: every memory would match
            raise InvalidInputError(f"{what}.{key}: the operator object is empty; give one or more of "
                                    f"{sorted(OPS)}, e.g. {{\"$eq\": \"sport\"}}, or the value itself")
        pairs = cond.items() if isinstance(cond, Mapping) else [("$eq", cond)]
        for op, value in pairs:
            if op not in OPS:
                raise InvalidInputError(f"{what}.{key}: unknown operator {shown(op)}; use one of {sorted(OPS)}")
            if not (value is None or isinstance(value, (str, bool, int)) or
                    (isinstance(value, float) and math.isfinite(value))):
                raise InvalidInputError(f"{what}.{key}: compare with a string, a finite number, true, false or null, "
                                        f"got {type(value).__name__}")
            if isinstance(value, str):  # a lone surrogate no driver encodes, a NUL PostgreSQL refuses
                check_unicode(value, f"{what}.{key}")
            if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**63:
                raise InvalidInputError(f"{what}.{key}: {value} is out of the 64-bit range")
            if op not in ("$eq", "$ne") and (value is None or isinstance(value, bool)):
                raise InvalidInputError(f"{what}.{key}: {op} orders numbers and strings, not {json.dumps(value)}")
            out.append((key, op, value))
    if len(out) > MAX_CONDITIONS:
        raise InvalidInputError(f"{what} has {len(out)} conditions; at most {MAX_CONDITIONS}")
    return tuple(out)


def loads(text: str, what: str) -> Any:
    """A filter given as JSON text (a query string's), read with ``json.loads`` once its nesting is known to be within
    ``MAX_JSON_DEPTH``: a scan of the brackets outside strings, so a hostile text costs one pass and never a deep
    recursion. ``parse`` checks what it returns.

    Raises:
        InvalidInputError: not JSON, or nested deeper than ``MAX_JSON_DEPTH``.
    """
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (ch == "\\", ch != '"')
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise InvalidInputError(f"{what} is nested deeper than {MAX_JSON_DEPTH} levels; a filter is "
                                        '{"field": value} or {"field": {"$op": value}}')
        elif ch in "]}":
            depth -= 1
    try:
        return json.loads(text)
    except ValueError as exc:  # the message quotes no more than a character of the text, escaped
        raise InvalidInputError(f"{what} is not JSON ({exc})") from exc


def sqlite_where(conditions: tuple[Condition, ...]) -> tuple[str, list[Any]]:
    """SQLite: ``json_type`` and ``json_extract`` of each field against its value (a boolean by its JSON type, since
    ``json_extract`` reads true as 1; null matches a null or missing field)."""
    parts, params = [], []
    for key, op, value in conditions:
        path = "$." + key
        if isinstance(value, bool):  # $eq or $ne
            parts.append(f"json_type(metadata, ?) {'IS' if op == '$eq' else 'IS NOT'} ?")
            params += [path, "true" if value else "false"]
        elif op in ("$eq", "$ne"):
            test = "json_type(metadata, ?) NOT IN ('true', 'false') AND json_extract(metadata, ?) = ?" \
                if value is not None else "json_extract(metadata, ?) IS NULL"
            parts.append(f"({test})" if op == "$eq" else f"NOT coalesce(({test}), 0)")
            params += [path, path, value] if value is not None else [path]
        else:  # an ordering compares numbers with numbers and text with text only
            kind = "'text'" if isinstance(value, str) else "'integer', 'real'"
            parts.append(f"(json_type(metadata, ?) IN ({kind}) AND json_extract(metadata, ?) {OPS[op]} ?)")
            params += [path, path, value]
    return " AND ".join(parts), params


def postgres_where(conditions: tuple[Condition, ...]) -> tuple[str, list[Any]]:
    """PostgreSQL (psycopg ``%s`` placeholders): the field as jsonb against the value as jsonb.

    The field is reached with ``->`` and a text per part, which reads an object's field and, on an array, nothing
    (``#>`` would take ``"0"`` as an array index, which SQLite's ``$.arr.0`` never does)."""
    parts, params = [], []
    for key, op, value in conditions:
        names = key.split(".")
        # a missing field (or a part that meets an array or a scalar) reads as null
        field = "coalesce(metadata::jsonb" + " -> %s::text" * len(names) + ", 'null'::jsonb)"
        if op == "$eq":
            parts.append(f"{field} IS NOT DISTINCT FROM %s::jsonb")
        elif op == "$ne":
            parts.append(f"{field} IS DISTINCT FROM %s::jsonb")
        else:
            kind = "string" if isinstance(value, str) else "number"
            parts.append(f"(jsonb_typeof({field}) = '{kind}' AND {field} {OPS[op]} %s::jsonb)")
            params += names
        params += [*names, json.dumps(value)]
    return " AND ".join(parts), params
