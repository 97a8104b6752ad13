"""Make a turn interpretable alone: speakers named instead of I / you, he / she resolved to
the last-mentioned person, relative dates anchored to the session date.

Pure functions of (text, speaker, listener, anchor time). Relative expressions keep their
wording and gain the absolute date in brackets ("yesterday [2023-05-07]", or "[7 May 2023]"
with ``style="text"``), so lexical matching on either form still works.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_NUM = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "couple of": 2, "few": 3}


def _day(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)


def _fmt(d: datetime) -> str:
    return f"{d.day} {d.strftime('%B %Y')}"


def _iso_label(start: datetime, end: datetime) -> str:
    """ISO-8601 for a span: a day ``2023-05-07``, a month ``2023-05``, a year ``2023``, else ``start/end``."""
    days = (end - start).days
    if days == 1:
        return start.date().isoformat()
    if start.day == 1 and start.month == 1 and end.year == start.year + 1 and end.month == 1:
        return str(start.year)
    if start.day == 1 and end.day == 1 and days in range(28, 32):
        return start.strftime("%Y-%m")
    return f"{start.date().isoformat()}/{(end - timedelta(days=1)).date().isoformat()}"


def _month_shift(d: datetime, n: int) -> datetime:
    m = d.month - 1 + n
    return d.replace(year=d.year + m // 12, month=m % 12 + 1, day=1)


def relative_span(expr: str, anchor: float) -> tuple[datetime, datetime, str] | None:
    """The (start, end, label) a relative time expression denotes, relative to ``anchor``."""
    e = " ".join(expr.lower().split())
    today = _day(anchor)
    one = timedelta(days=1)
    if e in ("today", "tonight", "this morning", "this afternoon", "this evening"):
        return today, today + one, _fmt(today)
    if e in ("yesterday", "last night"):
        d = today - one
        return d, today, _fmt(d)
    if e == "tomorrow":
        d = today + one
        return d, d + one, _fmt(d)
    m = re.fullmatch(r"(last|this|next) (week|weekend|month|year)", e)
    if m:
        which, unit = m.groups()
        shift = {"last": -1, "this": 0, "next": 1}[which]
        if unit in ("week", "weekend"):
            monday = today - timedelta(days=today.weekday()) + timedelta(weeks=shift)
            start = monday + timedelta(days=5) if unit == "weekend" else monday
            end = monday + timedelta(days=7)
            return start, end, f"the week of {_fmt(monday)}" if unit == "week" else f"the weekend of {_fmt(start)}"
        if unit == "month":
            start = _month_shift(today, shift)
            return start, _month_shift(start, 1), start.strftime("%B %Y")
        start = today.replace(year=today.year + shift, month=1, day=1)
        return start, start.replace(year=start.year + 1), str(start.year)
    m = re.fullmatch(r"(last|this past|on|next|this) (monday|tuesday|wednesday|thursday|friday|saturday|sunday)", e)
    if m:
        which, wd = m.groups()
        delta = (today.weekday() - _WEEKDAYS.index(wd)) % 7 or 7
        if which == "this":  # the one of the current week (Monday first)
            d = today - timedelta(days=today.weekday()) + timedelta(days=_WEEKDAYS.index(wd))
        elif which == "next":
            d = today + timedelta(days=(7 - delta) % 7 or 7)
        else:  # last / this past / on: conversations mostly report what already happened
            d = today - timedelta(days=delta)
        return d, d + one, _fmt(d)
    m = re.fullmatch(r"(\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|couple of|few) (day|week|month|year)s? ago", e)
    if m:
        n = int(m.group(1)) if m.group(1).isdigit() else _NUM[m.group(1)]
        unit = m.group(2)
        if unit == "day":
            d = today - timedelta(days=n)
            return d, d + one, _fmt(d)
        if unit == "week":
            d = today - timedelta(weeks=n)
            return d - timedelta(days=3), d + timedelta(days=4), f"the week of {_fmt(d - timedelta(days=d.weekday()))}"
        if unit == "month":
            start = _month_shift(today, -n)
            return start, _month_shift(start, 1), start.strftime("%B %Y")
        start = today.replace(year=today.year - n, month=1, day=1)
        return start, start.replace(year=start.year + 1), str(start.year)
    return None


_REL = re.compile(
    r"\b(today|tonight|this (?:morning|afternoon|evening)|yesterday|last night|tomorrow|"
    r"(?:last|this|next) (?:week|weekend|month|year)|"
    r"(?:last|this past|next|this|on) (?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)|"
    r"(?:\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|couple of|few) (?:day|week|month|year)s? ago)\b",
    re.I,
)
_BRACKET = re.compile(r"\s*\[")  # right after an expression: it was anchored before


def anchor_dates(text: str, anchor: float, style: str = "text") -> str:
    """Append the absolute date to each relative expression.

    ``style="text"``: "yesterday [7 May 2023]"; ``style="iso"``: "yesterday [2023-05-07]"
    (months ``2023-05``, years ``2023``, weeks ``2023-05-01/2023-05-07``). An expression already
    followed by a bracket (a text anchored before) is left as it is, so anchoring twice changes nothing.
    """
    if style not in ("text", "iso"):
        raise ValueError(f"style must be 'text' or 'iso', got {style!r}")

    def sub(m: re.Match) -> str:
        span = relative_span(m.group(0), anchor)
        if not span or _BRACKET.match(m.string, m.end()):
            return m.group(0)
        return f"{m.group(0)} [{_iso_label(span[0], span[1]) if style == 'iso' else span[2]}]"

    return _REL.sub(sub, text)


def relative_dates(text: str) -> bool:
    """Whether ``text`` holds a relative time expression that ``anchor_dates`` resolves."""
    return _REL.search(text) is not None


def find_time_window(text: str, anchor: float) -> tuple[float, float] | None:
    """The union of the spans of the relative expressions in ``text`` (Unix seconds)."""
    spans = [s for m in _REL.finditer(text) if (s := relative_span(m.group(0), anchor))]
    if not spans:
        return None
    return min(s[0] for s in spans).timestamp(), max(s[1] for s in spans).timestamp()


_FIRST = [
    (r"\bI am\b|\bI'm\b", "{s} is"), (r"\bI was\b", "{s} was"), (r"\bI have\b|\bI've\b", "{s} has"),
    (r"\bI'll\b", "{s} will"), (r"\bI'd\b", "{s} would"), (r"\bI\b", "{s}"),
    (r"\b[Mm]yself\b", "{s}"), (r"\b[Mm]ine\b", "{s}'s"), (r"\b[Mm]y\b", "{s}'s"), (r"\b[Mm]e\b", "{s}"),
]
_SECOND = [
    (r"\b[Yy]ou are\b|\b[Yy]ou're\b", "{l} is"), (r"\b[Yy]ou have\b|\b[Yy]ou've\b", "{l} has"),
    (r"\b[Yy]ou'll\b", "{l} will"), (r"\b[Yy]ou'd\b", "{l} would"),
    (r"\b[Yy]ourself\b", "{l}"), (r"\b[Yy]ours\b", "{l}'s"), (r"\b[Yy]our\b", "{l}'s"), (r"\b[Yy]ou\b", "{l}"),
]


def name_speakers(text: str, speaker: str, listener: str | None = None) -> str:
    """Replace first-person words by the speaker's name and second-person by the listener's."""
    for pat, rep in _FIRST:
        out = rep.format(s=speaker)
        text = re.sub(pat, lambda _m, out=out: out, text)
    if listener:
        for pat, rep in _SECOND:
            out = rep.format(l=listener)
            text = re.sub(pat, lambda _m, out=out: out, text)
    return text


_FEMALE = {"she", "her", "hers", "herself"}
_MALE = {"he", "him", "his", "himself"}
_KIN_F = ("mother", "mom", "mum", "sister", "daughter", "wife", "girlfriend", "aunt", "niece", "grandma",
          "grandmother", "granddaughter", "stepmother", "fiancee", "lady", "woman", "girl")
_KIN_M = ("father", "dad", "brother", "son", "husband", "boyfriend", "uncle", "nephew", "grandpa", "grandfather",
          "grandson", "stepfather", "fiance", "man", "guy", "boy")
_KIN = re.compile(r"\b((?:[A-Z][\w-]*'s|my|your|his|her|our|their)\s+(?:\w+\s+)?(" + "|".join(_KIN_F + _KIN_M) + r"))\b", re.I)
_PRONOUN = re.compile(r"\b(he|she|him|his|her|hers|himself|herself)\b", re.I)
# "her" before one of these is an object pronoun ("I told her about it"); otherwise a possessive.
_NOT_NOUN = frozenset("""about at to for from with in on by of and or but so that this the a an up out off
    back again too yet as if when while how what why where who whom which over after before into onto than
    is was be been being will would can could should might must did does do had has have""".split())


@dataclass
class Referents:
    """The last-mentioned female, male and unknown-gender persons (the coreference state)."""

    female: str | None = None
    male: str | None = None
    person: str | None = None  # a name whose gender is unknown

    def observe(self, names: list[str], text: str) -> None:
        """Update from the persons a (normalized) turn names, in order of appearance."""
        spans = [(m.start(), m.group(1), m.group(2).lower()) for m in _KIN.finditer(text)]
        spans += [(text.find(n), n, "") for n in names if n in text]
        for _, phrase, kin in sorted(spans):
            if kin in _KIN_F:
                self.female = phrase
            elif kin in _KIN_M:
                self.male = phrase
            else:
                self.person = phrase

    def resolve(self, pronoun: str) -> str | None:
        p = pronoun.lower()
        if p in _FEMALE:
            return self.female or self.person
        return self.male or self.person


def resolve_pronouns(text: str, refs: Referents, exclude: tuple[str, ...] = ()) -> str:
    """Replace he / she / him / his / her by the last-mentioned person of that gender.

    A pronoun is left alone when no referent is known, or when the referent is one of
    ``exclude`` (the speaker and listener, already named by ``name_speakers``).
    """

    def sub(m: re.Match) -> str:
        who = refs.resolve(m.group(1))
        if not who or who in exclude:
            return m.group(0)
        p = m.group(1).lower()
        if p in ("his", "hers"):
            return f"{who}'s"
        if p == "her":
            nxt = m.string[m.end():].lstrip()
            word = re.match(r"[A-Za-z']+", nxt)
            if word and word.group(0).lower() not in _NOT_NOUN:
                return f"{who}'s"
        return who

    return _PRONOUN.sub(sub, text)
