"""Timestamps in, Unix seconds out. Naive times are taken as UTC so runs are reproducible."""
from __future__ import annotations

import math
import numbers
import re
import time
from datetime import date, datetime, timezone

import numpy as np
from dateutil import parser as dateparser

from lightmem.errors import InvalidInputError, shown
from lightmem.storable import check_unicode

SECONDS_PER_DAY = 86_400.0

# LoCoMo: "1:56 pm on 8 May, 2023"; LongMemEval: "2023/05/23 (Tue) 19:11".
_LOCOMO = re.compile(r"^\s*(\d{1,2}:\d{2}\s*[ap]m)\s+on\s+(\d{1,2}\s+\w+,?\s+\d{4})\s*$", re.I)
_WEEKDAY_PAREN = re.compile(r"\(\s*[A-Za-z]{3,9}\s*\)")
# Epoch seconds outside this window are almost surely a unit mistake (ms, or garbage).
_MIN_EPOCH, _MAX_EPOCH = -2_208_988_800.0, 32_503_680_000.0  # 1900 .. 3000
# The longest date string taken: MCP bounded it so (as a name, lightmem.validation.MAX_ID_CHARS); every door does.
MAX_TIMESTAMP_CHARS = 256


def parse_timestamp(value: object) -> float:
    """Parse a timestamp into Unix seconds (UTC).

    Accepts ``datetime``/``date``, int/float epoch seconds, ISO-8601 strings, LoCoMo
    session dates ("1:56 pm on 8 May, 2023") and LongMemEval dates
    ("2023/05/23 (Tue) 19:11"). Whatever the form, the time must fall in the years
    1900-3000: outside them a number is almost surely a unit mistake (milliseconds)
    and a date cannot be shown back (``iso``, ``spoken_date``).

    Raises:
        InvalidInputError: ``None``, ``bool``, NaN, infinity, an integer beyond the range
            of a float (``10**309``), a time outside the years 1900-3000, or a string
            that is not a date or holds NUL or a lone surrogate (``lightmem.storable.check_unicode``).
    """
    if isinstance(value, bool) or value is None:
        raise InvalidInputError(f"timestamp must be a datetime, epoch seconds or a date string, got {shown(value)}")
    if isinstance(value, datetime):
        dt = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return _in_window(dt.timestamp(), dt.isoformat())
    if isinstance(value, date):
        return _in_window(datetime(value.year, value.month, value.day, tzinfo=timezone.utc).timestamp(), value.isoformat())
    if isinstance(value, numbers.Real):  # int, float and their numpy kin
        try:
            v = float(value)
        except (OverflowError, ValueError):  # an int beyond float range: float(10**309) raises
            v = math.inf
        return _in_window(v, shown(value))
    if isinstance(value, str):
        return _parse_string(value)
    raise InvalidInputError(f"timestamp must be a datetime, epoch seconds or a date string, got {type(value).__name__}")


def _in_window(seconds: float, what: str) -> float:
    """``seconds`` when it lies in the years 1900-3000 (NaN and infinities do not)."""
    if not (math.isfinite(seconds) and _MIN_EPOCH <= seconds <= _MAX_EPOCH):
        raise InvalidInputError(
            f"timestamp {what} is outside the years 1900-3000: give Unix seconds (not milliseconds), "
            "an ISO 8601 date or a datetime"
        )
    return seconds


def _parse_string(text: str) -> float:
    # First: a date parser's error repeats the text, and a lone surrogate in it makes that message unencodable; a
    # NUL it would skip, reading "2020-01-01\x00" as a date that HTTP took and MCP refused.
    check_unicode(text, "timestamp")
    if len(text) > MAX_TIMESTAMP_CHARS:  # as long as the longest name: no date is longer, and parsing costs its length
        raise InvalidInputError(f"timestamp is a string of {len(text):,} characters; a date has at most "
                                f"{MAX_TIMESTAMP_CHARS}")
    s = text.strip()
    if not s:
        raise InvalidInputError("timestamp is an empty string")
    m = _LOCOMO.match(s)
    if m:
        s = f"{m.group(2).replace(',', '')} {m.group(1)}"
    s = _WEEKDAY_PAREN.sub(" ", s)
    try:
        dt = dateparser.parse(s, default=datetime(2000, 1, 1))
    except (ValueError, OverflowError) as exc:
        raise InvalidInputError(f"cannot parse timestamp {shown(text)}: {str(exc)[:80]}") from exc
    if dt is None:
        raise InvalidInputError(f"cannot parse timestamp {shown(text)}")
    try:
        return parse_timestamp(dt)
    except InvalidInputError as exc:
        raise InvalidInputError(f"{exc} (parsed from {shown(text)})") from exc


def now() -> float:
    """Current Unix time; one place to patch in tests."""
    return time.time()


def spoken_date(ts: float) -> str:
    """Unix seconds as the date people write and ask about: ``8 May 2023`` (UTC)."""
    d = datetime.fromtimestamp(ts, tz=timezone.utc)
    return f"{d.day} {d.strftime('%B %Y')}"


def iso(ts: float) -> str:
    """Unix seconds as a short ISO date-time (UTC), for prompts and tables."""
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")


def recency_decay(event_times: np.ndarray, now: float, half_life_days: float) -> np.ndarray:
    """exp(-ln 2 · age / half-life): 1 for now, 0.5 one half-life ago; future times count as now."""
    if half_life_days <= 0:
        raise ValueError("half_life_days must be positive")
    age_days = np.maximum(now - np.asarray(event_times, dtype=np.float64), 0.0) / SECONDS_PER_DAY
    return np.exp(-math.log(2.0) * age_days / half_life_days)
