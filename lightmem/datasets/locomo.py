"""LoCoMo (Maharana et al., 2024): conversations of dated sessions with evidence-linked QA."""
from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightmem.datasets.formats import Conversation, QAItem, Session, expect, field_of, read_json, timestamp_at, warn_skipped
from lightmem.errors import InvalidInputError
from lightmem.types import Turn

_SESSION = re.compile(r"^session_(\d+)$")


def parse_locomo(samples: list[dict[str, Any]]) -> list[Conversation]:
    """LoCoMo samples as conversations; every field used is checked before anything is returned.

    Errors name the place: ``conversation 2 (conv-41), session_3, turn 5: missing field 'speaker'``.
    A conversation is counted from 0 in the file (the index ``--conversations`` takes); turns
    and questions count from 1 within their session or list, as LoCoMo's ids do (``D3:5`` is
    session_3, turn 5).

    A turn whose text is empty and that shares no image is skipped, with one warning naming
    every such turn: it holds nothing to remember, and LoCoMo-style files do carry such turns
    (the image of a shared photo lost, an empty reply), so refusing them would refuse whole
    usable files. A turn without a ``text`` field at all is an error: that is a broken file.

    Raises:
        InvalidInputError: a missing field, a field of the wrong type, or a bad session date.
    """
    empty: list[str] = []
    convs = [_conversation(i, sample, empty) for i, sample in enumerate(samples)]
    warn_skipped(empty, "LoCoMo")
    return convs


def _conversation(index: int, sample: object, empty: list[str]) -> Conversation:
    where = f"conversation {index}"
    sample = expect(sample, dict, where, "an object (a LoCoMo sample)")
    sample_id = str(field_of(sample, "sample_id", (str, int), where, "a string", f"conv-{index}"))
    where = f"conversation {index} ({sample_id})"
    conv = field_of(sample, "conversation", dict, where, "an object of sessions")
    # Iterate the session lists, not the dates: some samples have more dates than sessions.
    keys = sorted((int(m.group(1)), k) for k in conv if isinstance(k, str) and (m := _SESSION.match(k)))
    sessions = []
    for _, key in keys:
        turns_raw = field_of(conv, key, list, where, "a list of turns")
        date = field_of(conv, f"{key}_date_time", (str, int, float), where, "a date string")
        ts = timestamp_at(date, f"{where}, {key}_date_time")
        turns = [t for n, raw in enumerate(turns_raw, 1) if (t := _turn(raw, f"{where}, {key}, turn {n}", ts, key, empty))]
        sessions.append(Session(key, ts, turns))
    qa = [_question(q, f"{where}, question {n}") for n, q in enumerate(field_of(sample, "qa", list, where, "a list", []), 1)]
    speakers = tuple(field_of(conv, k, str, where, "a string", "") for k in ("speaker_a", "speaker_b"))
    return Conversation(sample_id, sessions, qa, tuple(x for x in speakers if x))


def _turn(raw: object, where: str, ts: float, session: str, empty: list[str]) -> Turn | None:
    """One turn, or None for a turn with nothing to remember (listed in ``empty``)."""
    t = expect(raw, dict, where, "an object (a turn)")
    dia_id = str(field_of(t, "dia_id", (str, int), where, "a string"))
    where = f"{where} ({dia_id})"
    speaker = field_of(t, "speaker", str, where, "a string")
    if not speaker.strip():
        raise InvalidInputError(f"{where}: field 'speaker' is empty")
    text = field_of(t, "text", str, where, "a string")
    caption = field_of(t, "blip_caption", str, where, "a string", None)
    if not text.strip() and not caption:
        empty.append(where)
        return None
    return Turn(dia_id, speaker, text if text.strip() else "(image)", ts, session, caption)


def _question(raw: object, where: str) -> QAItem:
    q = expect(raw, dict, where, "an object (a question)")
    question = field_of(q, "question", str, where, "a string")
    category = field_of(q, "category", (int, str), where, "a category number (1-5)")
    if isinstance(category, str):
        if not category.strip().isdigit():
            raise InvalidInputError(f"{where}: field 'category' must be a category number (1-5), got {category!r}")
        category = int(category)
    answer = field_of(q, "answer", (str, int, float), where, "a string", None)
    if answer is None:  # category 5 (adversarial) questions carry adversarial_answer instead
        answer = field_of(q, "adversarial_answer", (str, int, float), where, "a string", "")
    evidence = field_of(q, "evidence", list, where, "a list of turn ids", [])
    if not all(isinstance(e, str) for e in evidence):
        raise InvalidInputError(f"{where}: field 'evidence' must be a list of turn ids (strings)")
    extra = {k: v for k, v in q.items() if k not in {"question", "answer", "evidence", "category"}}
    return QAItem(question, str(answer), list(evidence), category, extra)


def load_locomo(path: str | Path) -> list[Conversation]:
    data = read_json(path)
    if not isinstance(data, list):
        data = [data]
    return parse_locomo(data)


def parse_selection(spec: object, n: int) -> list[int] | list[str]:
    """``"5-9"``, ``"0,2,4"``, ``3``, ``[0, 1]``, ``"all"`` or sample ids like ``"conv-26"``."""
    if spec is None or spec == "all":
        return list(range(n))
    if isinstance(spec, bool):
        raise InvalidInputError(f"bad conversation selection {spec!r}")
    if isinstance(spec, int):
        return [spec]
    items: list = list(spec) if isinstance(spec, Sequence) and not isinstance(spec, str) else str(spec).split(",")
    out: list = []
    for it in items:
        if isinstance(it, int):
            out.append(it)
            continue
        it = str(it).strip()
        if re.fullmatch(r"\d+", it):
            out.append(int(it))
        elif m := re.fullmatch(r"(\d+)\s*-\s*(\d+)", it):
            lo, hi = int(m.group(1)), int(m.group(2))
            if hi < lo:
                raise InvalidInputError(f"empty range {it!r}")
            out.extend(range(lo, hi + 1))
        elif it:
            out.append(it)
    return out


def select_conversations(convs: list[Conversation], spec: object) -> list[Conversation]:
    """Pick conversations by index (into the file) or by id."""
    by_id = {c.conv_id: c for c in convs}
    chosen = []
    for key in parse_selection(spec, len(convs)):
        if isinstance(key, int):
            if not 0 <= key < len(convs):
                raise InvalidInputError(f"conversation index {key} is out of range: the file has {len(convs)} (0-{len(convs) - 1})")
            chosen.append(convs[key])
        elif key in by_id:
            chosen.append(by_id[key])
        else:
            raise InvalidInputError(f"no conversation {key!r}; ids are {sorted(by_id)}")
    return chosen
