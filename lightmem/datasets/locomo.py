"""LoCoMo (Maharana et al., 2024): conversations of dated sessions with evidence-linked QA."""
from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightmem.datasets.formats import Conversation, QAItem, Session, read_json
from lightmem.errors import InvalidInputError
from lightmem.timeutil import parse_timestamp
from lightmem.types import Turn

_SESSION = re.compile(r"^session_(\d+)$")


def parse_locomo(samples: list[dict[str, Any]]) -> list[Conversation]:
    out = []
    for s_idx, sample in enumerate(samples):
        try:
            conv = sample["conversation"]
            sample_id = str(sample.get("sample_id", f"conv-{s_idx}"))
        except (KeyError, TypeError) as exc:
            raise InvalidInputError(f"LoCoMo sample {s_idx} has no 'conversation'") from exc
        # Iterate the session lists, not the dates: some samples have more dates than sessions.
        numbers = sorted(int(m.group(1)) for k in conv if (m := _SESSION.match(k)) and isinstance(conv[k], list))
        sessions = []
        for n in numbers:
            date = conv.get(f"session_{n}_date_time")
            if date is None:
                raise InvalidInputError(f"{sample_id}: session_{n} has no session_{n}_date_time")
            ts = parse_timestamp(date)
            turns = []
            for t in conv[f"session_{n}"]:
                text = t.get("text") or ""
                caption = t.get("blip_caption")
                if not text.strip() and not caption:
                    continue  # an empty turn carries nothing to remember
                turns.append(Turn(str(t["dia_id"]), str(t["speaker"]), text if text.strip() else "(image)", ts, f"session_{n}", caption))
            sessions.append(Session(f"session_{n}", ts, turns))
        qa = []
        for q in sample.get("qa", []):
            answer = q.get("answer", q.get("adversarial_answer", ""))
            extra = {k: v for k, v in q.items() if k not in {"question", "answer", "evidence", "category"}}
            qa.append(QAItem(str(q["question"]), str(answer), [str(e) for e in q.get("evidence", [])], int(q["category"]), extra))
        speakers = tuple(x for x in (conv.get("speaker_a"), conv.get("speaker_b")) if x)
        out.append(Conversation(sample_id, sessions, qa, speakers))
    return out


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
