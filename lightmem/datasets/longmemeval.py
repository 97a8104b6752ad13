"""LongMemEval (Wu et al., 2025): one haystack of dated chat sessions per question."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from lightmem.datasets.formats import Conversation, QAItem, Session, read_json
from lightmem.errors import InvalidInputError
from lightmem.timeutil import parse_timestamp
from lightmem.types import Turn


def parse_longmemeval(instances: list[dict[str, Any]]) -> list[Conversation]:
    out = []
    for inst in instances:
        try:
            qid = str(inst["question_id"])
            sessions_raw, dates, sids = inst["haystack_sessions"], inst["haystack_dates"], inst["haystack_session_ids"]
        except KeyError as exc:
            raise InvalidInputError(f"LongMemEval item lacks {exc}") from exc
        if not (len(sessions_raw) == len(dates) == len(sids)):
            raise InvalidInputError(f"{qid}: haystack_sessions, haystack_dates and haystack_session_ids differ in length")
        sessions, evidence = [], []
        for sid, date, turns_raw in zip(sids, dates, sessions_raw):
            ts = parse_timestamp(date)
            turns = []
            for i, t in enumerate(turns_raw):
                content = t.get("content") or ""
                if not content.strip():
                    continue
                tid = f"{sid}:{i}"
                if t.get("has_answer"):
                    evidence.append(tid)
                turns.append(Turn(tid, str(t.get("role", "user")), content, ts, str(sid), None, {"has_answer": bool(t.get("has_answer"))}))
            sessions.append(Session(str(sid), ts, turns))
        qa = [
            QAItem(
                str(inst.get("question", "")), str(inst.get("answer", "")), evidence, str(inst.get("question_type", "")),
                {"question_date": inst.get("question_date"), "answer_session_ids": inst.get("answer_session_ids", [])},
            )
        ]
        out.append(Conversation(qid, sessions, qa, ("user", "assistant")))
    return out


def load_longmemeval(path: str | Path) -> list[Conversation]:
    data = read_json(path)
    return parse_longmemeval(data if isinstance(data, list) else [data])
