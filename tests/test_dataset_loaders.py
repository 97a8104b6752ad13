"""LoCoMo and LongMemEval files: every field the loaders use is checked, and errors say where."""
from __future__ import annotations

import copy
import json
import logging

import numpy as np
import pytest
from conftest import TINY_LOCOMO

from lightmem.cli import main
from lightmem.datasets import load_conversations
from lightmem.datasets.longmemeval import parse_longmemeval
from lightmem.errors import InvalidInputError

LOCOMO = json.loads(TINY_LOCOMO.read_text())
LME = {
    "question_id": "q-7", "question_type": "single-session-user", "question": "Where do I park?", "answer": "level 3",
    "question_date": "2023/05/30 (Tue) 10:00", "answer_session_ids": ["s-2"],
    "haystack_session_ids": ["s-1", "s-2"], "haystack_dates": ["2023/05/20 (Sat) 09:00", "2023/05/23 (Tue) 19:11"],
    "haystack_sessions": [
        [{"role": "user", "content": "I like tea."}, {"role": "assistant", "content": "Noted."}],
        [{"role": "user", "content": "I parked on level 3.", "has_answer": True}, {"role": "assistant", "content": "OK."}],
    ],
}


def _turn(data: list, conv: int, session: str, turn: int) -> dict:
    return data[conv]["conversation"][session][turn - 1]


def _del(key: str):
    return lambda t: t.pop(key)


def _set(key: str, value: object):
    return lambda t: t.update({key: value})


@pytest.mark.parametrize("where, change, says", [
    ((1, "session_1", 2), _del("dia_id"), "conversation 1 (tiny-b), session_1, turn 2: missing field 'dia_id'"),
    ((0, "session_2", 1), _del("speaker"), "conversation 0 (tiny-a), session_2, turn 1 (D2:1): missing field 'speaker'"),
    ((0, "session_2", 1), _set("speaker", "  "), "conversation 0 (tiny-a), session_2, turn 1 (D2:1): field 'speaker' is empty"),
    ((0, "session_1", 3), _del("text"), "conversation 0 (tiny-a), session_1, turn 3 (D1:3): missing field 'text'"),
    ((0, "session_1", 3), _set("text", 5), "session_1, turn 3 (D1:3): field 'text' must be a string, got a number"),
    ((0, "session_1", 4), _set("blip_caption", ["x"]), "turn 4 (D1:4): field 'blip_caption' must be a string, got an array"),
    ((0, "session_1", 3), _set("dia_id", True), "session_1, turn 3: field 'dia_id' must be a string, got a boolean"),
    ((0, "session_1", 3), _set("text", "a\ud800"), "turn 3 (D1:3): field 'text' is not valid Unicode text: character 2 is a lone"),
])
def test_a_bad_locomo_turn_is_named_by_conversation_session_and_turn(tmp_path, where, change, says):
    data = copy.deepcopy(LOCOMO)
    change(_turn(data, *where))
    f = tmp_path / "locomo.json"
    f.write_text(json.dumps(data))
    with pytest.raises(InvalidInputError) as err:
        load_conversations(f)
    assert says in str(err.value)


@pytest.mark.parametrize("change, says", [
    (lambda s: s["qa"][2].pop("category"), "conversation 0 (tiny-a), question 3: missing field 'category'"),
    (lambda s: s["qa"][0].update(category="temporal"), "question 1: field 'category' must be a category number (1-5)"),
    (lambda s: s["qa"][1].pop("question"), "conversation 0 (tiny-a), question 2: missing field 'question'"),
    (lambda s: s["qa"][0].update(evidence="D1:1"), "question 1: field 'evidence' must be a list of turn ids, got a string"),
    (lambda s: s["qa"].append("why?"), "question 7: expected an object (a question), got a string"),
    (lambda s: s.update(qa={"q": 1}), "conversation 0 (tiny-a): field 'qa' must be a list, got an object"),
    (lambda s: s["conversation"].pop("session_2_date_time"), "conversation 0 (tiny-a): missing field 'session_2_date_time'"),
    (lambda s: s["conversation"].update(session_1_date_time=10**309),
     "conversation 0 (tiny-a), session_1_date_time: timestamp 1000"),
    (lambda s: s["conversation"].update(session_1_date_time="someday"), "session_1_date_time: cannot parse timestamp 'someday'"),
    (lambda s: s["conversation"].update(session_2="gone"), "conversation 0 (tiny-a): field 'session_2' must be a list of turns"),
    (lambda s: s["conversation"]["session_2"].insert(0, ["Ava", "hi"]),
     "conversation 0 (tiny-a), session_2, turn 1: expected an object (a turn), got an array"),
    (lambda s: s.update(conversation=[]), "conversation 0 (tiny-a): field 'conversation' must be an object of sessions"),
    (lambda s: s.pop("conversation"), "conversation 0 (tiny-a): missing field 'conversation'"),
])
def test_a_bad_locomo_question_or_session_is_named(tmp_path, change, says):
    data = copy.deepcopy(LOCOMO)
    change(data[0])
    f = tmp_path / "locomo.json"
    f.write_text(json.dumps(data))
    with pytest.raises(InvalidInputError) as err:
        load_conversations(f, fmt="locomo")
    assert says in str(err.value)


def test_a_locomo_turn_with_no_text_is_skipped_with_a_warning_naming_it(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="lightmem.datasets"):
        convs = load_conversations(TINY_LOCOMO)
    assert "D2:4" not in [t.turn_id for t in convs[0].turns] and "D1:4" in [t.turn_id for t in convs[0].turns]
    assert "skipped 1 turn(s) with no text" in caplog.text and "conversation 0 (tiny-a), session_2, turn 4 (D2:4)" in caplog.text
    data = copy.deepcopy(LOCOMO)
    _turn(data, 0, "session_1", 4)["text"] = " "  # no text, but a shared image: kept, as the image
    f = tmp_path / "locomo.json"
    f.write_text(json.dumps(data))
    turn = next(t for t in load_conversations(f)[0].turns if t.turn_id == "D1:4")
    assert turn.text == "(image)" and turn.caption == "a photo of a violin on a chair"


@pytest.mark.parametrize("change, says", [
    (lambda i: i["haystack_sessions"][1][0].pop("content"), "instance 0 (q-7), session 2 (s-2), turn 1: missing field 'content'"),
    (lambda i: i["haystack_sessions"][0][1].pop("role"), "instance 0 (q-7), session 1 (s-1), turn 2: missing field 'role'"),
    (lambda i: i["haystack_sessions"][0][0].update(content=["tea"]), "turn 1: field 'content' must be a string, got an array"),
    (lambda i: i["haystack_sessions"][1][0].update(has_answer="yes"), "turn 1: field 'has_answer' must be true or false"),
    (lambda i: i["haystack_sessions"][1].append("ok"), "session 2 (s-2), turn 3: expected an object (a turn), got a string"),
    (lambda i: i["haystack_sessions"].__setitem__(0, {"role": "user"}), "session 1 (s-1): expected a list of turns, got an object"),
    (lambda i: i["haystack_dates"].__setitem__(1, True), "session 2 (s-2), date: expected a date string, got a boolean"),
    (lambda i: i["haystack_dates"].__setitem__(0, 10**309), "session 1 (s-1), date: timestamp 1000"),
    (lambda i: i["haystack_session_ids"].__setitem__(0, None), "haystack_session_ids item 1: expected a session id"),
    (lambda i: i["haystack_dates"].pop(), "differ in length (2, 1, 2)"),
    (lambda i: i.pop("haystack_sessions"), "instance 0 (q-7): missing field 'haystack_sessions'"),
    (lambda i: i.pop("question_id"), "instance 0: missing field 'question_id'"),
    (lambda i: i.update(question_date="never"), "instance 0 (q-7), question_date: cannot parse timestamp 'never'"),
    (lambda i: i.update(answer_session_ids="s-2"), "field 'answer_session_ids' must be a list of session ids"),
    (lambda i: i.update(answer=None, question=3), "instance 0 (q-7): field 'question' must be a string, got a number"),
])
def test_a_bad_longmemeval_field_is_named(change, says):
    inst = copy.deepcopy(LME)
    change(inst)
    with pytest.raises(InvalidInputError) as err:
        parse_longmemeval([copy.deepcopy(LME), inst])  # the second instance: its index is named
    assert says.replace("instance 0", "instance 1") in str(err.value)


def test_a_good_longmemeval_instance_loads_with_its_evidence(caplog):
    inst = copy.deepcopy(LME)
    inst["haystack_sessions"][0].append({"role": "assistant", "content": "  "})
    with caplog.at_level(logging.WARNING, logger="lightmem.datasets"):
        conv = parse_longmemeval([inst])[0]
    assert [t.turn_id for t in conv.turns] == ["s-1:0", "s-1:1", "s-2:0", "s-2:1"]
    assert conv.qa[0].evidence == ["s-2:0"] and conv.qa[0].answer == "level 3"
    assert "instance 0 (q-7), session 1 (s-1), turn 3" in caplog.text


@pytest.mark.parametrize("mutate, says", [
    (lambda d: _turn(d, 0, "session_2", 1).pop("speaker"), "conversation 0 (tiny-a), session_2, turn 1 (D2:1): missing field 'speaker'"),
    (lambda d: d[1]["qa"][0].pop("category"), "conversation 1 (tiny-b), question 1: missing field 'category'"),
    (lambda d: _turn(d, 1, "session_1", 3).pop("dia_id"), "conversation 1 (tiny-b), session_1, turn 3: missing field 'dia_id'"),
])
def test_cli_ingest_of_a_broken_locomo_file_exits_2_and_writes_nothing(tmp_path, capsys, mutate, says):
    data = copy.deepcopy(LOCOMO)
    mutate(data)
    f = tmp_path / "locomo.json"
    f.write_text(json.dumps(data))
    assert main(["ingest", str(f), "--store", str(tmp_path / "s"), "--encoder", "hashing", "-q"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert says in err and "Traceback" not in err and not (tmp_path / "s").exists()


def _lme(qid: str, sessions: int, answer_at: int) -> dict:
    inst = copy.deepcopy(LME)
    inst.update(question_id=qid, haystack_session_ids=[f"{qid}-s{i}" for i in range(sessions)],
                haystack_dates=[f"2023/05/{10 + i:02d} (Sat) 09:00" for i in range(sessions)],
                haystack_sessions=[[{"role": "user", "content": f"{qid} session {i}", "has_answer": i == answer_at},
                                    {"role": "assistant", "content": f"reply {i}"}] for i in range(sessions)])
    return inst


def test_padded_haystacks_keep_their_evidence_and_take_only_fillers_dated_within_their_span():
    from lightmem.datasets.longmemeval import pad_haystacks

    pool = parse_longmemeval([_lme(f"q{i}", 6, answer_at=i % 6) for i in range(8)])
    padded = pad_haystacks(pool[:3], pool, n_sessions=20, seed=1)
    again = pad_haystacks(pool[:3], pool, n_sessions=20, seed=1)
    for before, after, same in zip(pool[:3], padded, again):
        ids = [s.session_id for s in after.sessions]
        assert len(ids) == len(set(ids)) == 20 and ids == [s.session_id for s in same.sessions]  # seeded
        assert {s.session_id for s in before.sessions} <= set(ids) and after.qa == before.qa
        span = (before.sessions[0].timestamp, before.sessions[-1].timestamp)
        times = [s.timestamp for s in after.sessions]
        assert times == sorted(times) and span[0] <= min(times) and max(times) <= span[1]
        added = [s for s in after.sessions if not s.session_id.startswith(before.conv_id + "-")]
        assert not any(t.metadata["has_answer"] for s in added for t in s.turns)  # no other question's evidence
        assert all(t.timestamp == s.timestamp for s in added for t in s.turns)
    with pytest.raises(ValueError, match="filler sessions"):
        pad_haystacks(pool[:1], pool, n_sessions=500)


def test_the_memo_embedder_encodes_each_text_once():
    from lightmem.models.embedder import HashingEmbedder, MemoEmbedder

    calls = []
    inner = HashingEmbedder(32)
    real = inner.encode
    inner.encode = lambda texts, is_query=False: calls.append(list(texts)) or real(texts, is_query=is_query)
    memo = MemoEmbedder(inner)
    a = memo.encode(["x", "y", "x"])
    b = memo.encode(["y", "z"])
    assert calls == [["x", "y"], ["z"]] and memo.dim == 32 and memo.name == inner.name
    assert np.array_equal(a, real(["x", "y", "x"])) and np.array_equal(b, real(["y", "z"]))
    assert memo.encode([]).shape == (0, 32)
