"""Relative dates resolved in the memories a time question gets.

A turn says "I went to the support group yesterday"; the prompt shows it under its session
date, and the answer to "When did she go to the support group?" is the day before. Writing
the resolved date next to the expression ("yesterday [7 May 2023]") puts the answer in the
memory's words. It costs tokens, so it is spent where the question asks about time: the
stored memory and its index are untouched, and only the copies packed for such a question
carry the dates.

Everything here is pure: texts and times in, texts and booleans out.
"""
from __future__ import annotations

import re
from functools import lru_cache

from lightmem.language.normalize import anchor_dates, relative_dates

POLICIES = ("never", "asked", "always")

# "When did ...", "How long ago ...", "What year ...", "How many days passed between ...", "Which came first ...?",
# "... before ...", "What did I buy last Saturday?" (a relative date in the question itself).
_TIME_QUESTION = re.compile(
    r"\b(when|how long|ago|since|before|after|first|most recently|"
    r"how many (?:days|weeks|months|years)|"
    r"(?:what|which) (?:date|day|time|year|month|week|weekend))\b",
    re.IGNORECASE,
)


def asks_about_time(question: str) -> bool:
    """Whether ``question`` asks when something happened, how long apart, or which came first, or names a
    relative date ("last Saturday") itself."""
    return _TIME_QUESTION.search(question) is not None or relative_dates(question)


def check_policy(policy: str) -> str:
    """``policy`` when it is one of ``POLICIES``; else a ValueError naming them."""
    if policy not in POLICIES:
        raise ValueError(f"anchor_dates must be one of {POLICIES}, got {policy!r}")
    return policy


def wants_dates(policy: str, question: str) -> bool:
    """Whether the memories packed for ``question`` carry resolved dates under ``policy``."""
    return check_policy(policy) == "always" or (policy == "asked" and asks_about_time(question))


@lru_cache(maxsize=32_768)
def dated(text: str, event_time: float) -> str:
    """``text`` with each relative date followed by the day it denotes from ``event_time``. Cached: a memory
    is dated again in every time question it is a candidate of."""
    return anchor_dates(text, event_time, style="text")
