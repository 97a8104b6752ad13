"""LongMemEval (Wu et al., 2025): one haystack of dated chat sessions per question."""
from __future__ import annotations

import random
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Any

from lightmem.datasets.formats import Conversation, QAItem, Session, expect, field_of, read_json, timestamp_at, warn_skipped
from lightmem.errors import InvalidInputError
from lightmem.types import Turn

_ID = (str, int)


def parse_longmemeval(instances: list[dict[str, Any]]) -> list[Conversation]:
    """LongMemEval instances as conversations; every field used is checked before anything is returned.

    Errors name the place: ``instance 3 (e47becba), session 2 (answer_280352e9), turn 5: missing
    field 'content'``. An instance is counted from 0 in the file (the index ``--conversations``
    takes); sessions and turns count from 1. A turn with empty content is skipped, with one
    warning naming every such turn (see ``parse_locomo``).

    Raises:
        InvalidInputError: a missing field, a field of the wrong type, lists of sessions, dates
            and session ids of different lengths, or a bad date.
    """
    empty: list[str] = []
    convs = [_instance(i, inst, empty) for i, inst in enumerate(instances)]
    warn_skipped(empty, "LongMemEval")
    return convs


def _instance(index: int, raw: object, empty: list[str]) -> Conversation:
    where = f"instance {index}"
    inst = expect(raw, dict, where, "an object (a LongMemEval instance)")
    qid = str(field_of(inst, "question_id", _ID, where, "a string"))
    where = f"instance {index} ({qid})"
    sessions_raw = field_of(inst, "haystack_sessions", list, where, "a list of sessions")
    dates = field_of(inst, "haystack_dates", list, where, "a list of dates")
    sids = field_of(inst, "haystack_session_ids", list, where, "a list of session ids")
    if not (len(sessions_raw) == len(dates) == len(sids)):
        raise InvalidInputError(f"{where}: haystack_sessions, haystack_dates and haystack_session_ids differ in length "
                                f"({len(sessions_raw)}, {len(dates)}, {len(sids)})")
    sessions, evidence = [], []
    for n, (sid, date, turns_raw) in enumerate(zip(sids, dates, sessions_raw), 1):
        sid = str(expect(sid, _ID, f"{where}, haystack_session_ids item {n}", "a session id (a string)"))
        at = f"{where}, session {n} ({sid})"
        ts = timestamp_at(expect(date, (str, int, float), f"{at}, date", "a date string"), f"{at}, date")
        turns = []
        for i, t in enumerate(expect(turns_raw, list, at, "a list of turns")):
            turn = _turn(t, f"{at}, turn {i + 1}", f"{sid}:{i}", sid, ts, empty)
            if turn is not None:
                turns.append(turn)
                if turn.metadata["has_answer"]:
                    evidence.append(turn.turn_id)
        sessions.append(Session(sid, ts, turns))
    question_date = field_of(inst, "question_date", (str, int, float), where, "a date string", None)
    if question_date is not None:
        timestamp_at(question_date, f"{where}, question_date")  # checked now; the evaluation parses it again
    answer_sids = field_of(inst, "answer_session_ids", list, where, "a list of session ids", [])
    if not all(isinstance(s, _ID) and not isinstance(s, bool) for s in answer_sids):
        raise InvalidInputError(f"{where}: field 'answer_session_ids' must be a list of session ids (strings)")
    qa = QAItem(field_of(inst, "question", str, where, "a string", ""),
                str(field_of(inst, "answer", (str, int, float), where, "a string", "")), evidence,
                field_of(inst, "question_type", str, where, "a string", ""),
                {"question_date": question_date, "answer_session_ids": answer_sids})
    return Conversation(qid, sessions, [qa], ("user", "assistant"))


def _turn(raw: object, where: str, turn_id: str, sid: str, ts: float, empty: list[str]) -> Turn | None:
    """One turn, or None for a turn with empty content (listed in ``empty``)."""
    t = expect(raw, dict, where, "an object (a turn)")
    role = field_of(t, "role", str, where, "a string ('user' or 'assistant')")
    if not role.strip():
        raise InvalidInputError(f"{where}: field 'role' is empty")
    content = field_of(t, "content", str, where, "a string")
    has_answer = field_of(t, "has_answer", bool, where, "true or false", False)
    if not content.strip():
        empty.append(where)
        return None
    return Turn(turn_id, role, content, ts, sid, None, {"has_answer": has_answer})


def load_longmemeval(path: str | Path) -> list[Conversation]:
    data = read_json(path)
    return parse_longmemeval(data if isinstance(data, list) else [data])


def pad_haystacks(instances: list[Conversation], pool: list[Conversation], n_sessions: int, seed: int = 0,
                  pool_sessions: int = 1500) -> list[Conversation]:
    """Each instance's haystack grown to ``n_sessions`` sessions with other questions' filler sessions,
    for a LongMemEval_M-like history (~500 sessions per question) built from an S or oracle file.

    Fillers are sessions of ``pool`` without an evidence turn (no ``has_answer``), each session id once;
    ``pool_sessions`` of them are drawn once (seeded) and every instance draws its padding from those,
    so that a run embeds each filler once. A filler is re-dated uniformly within the instance's own
    haystack dates (a history that ends before the question is asked), and the sessions are sorted by
    date. Instances already at ``n_sessions`` are returned unchanged.
    """
    fillers: dict[str, Session] = {}
    for conv in pool:
        for s in conv.sessions:
            if s.session_id not in fillers and not any(t.metadata.get("has_answer") for t in s.turns):
                fillers[s.session_id] = s
    shared = sorted(fillers)
    random.Random(seed).shuffle(shared)
    shared = shared[:pool_sessions]
    out = []
    for inst in instances:
        own = {s.session_id for s in inst.sessions}
        choices = [sid for sid in shared if sid not in own]
        need = n_sessions - len(inst.sessions)
        if need <= 0:
            out.append(inst)
            continue
        if len(choices) < need:
            raise ValueError(f"{inst.conv_id}: {len(choices)} filler sessions to draw from, {need} needed; "
                             f"raise pool_sessions or load a larger file")
        rng = random.Random(zlib.crc32(f"{seed}:{inst.conv_id}".encode()))
        lo, hi = min(s.timestamp for s in inst.sessions), max(s.timestamp for s in inst.sessions)
        padded = list(inst.sessions)
        for sid in rng.sample(choices, need):
            ts = rng.uniform(lo, hi)
            padded.append(Session(sid, ts, [replace(t, timestamp=ts) for t in fillers[sid].turns]))
        padded.sort(key=lambda s: s.timestamp)
        out.append(replace(inst, sessions=padded))
    return out
