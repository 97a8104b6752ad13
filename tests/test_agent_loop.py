"""The agent-loop benchmark (eval/agent_loop.py): arms, canned replies, echoes and told facts, end to end on tiny data."""
from __future__ import annotations

import json

from conftest import TINY_LOCOMO, compose, entry_point

from lightmem.datasets.formats import QAItem
from lightmem.evaluation.benchmarks.agent_loop import (
    DONT_KNOW,
    LOOP,
    WRONG,
    NaivePolicy,
    is_echo,
    paired_delta,
    reply_kind,
    reply_to,
    summarize,
)
from lightmem.language.exchange import content_words
from lightmem.types import Turn

LME = [{
    "question_id": "q-7", "question_type": "single-session-user", "question": "Where did I park my car?", "answer": "level 3",
    "question_date": "2023/05/30 (Tue) 10:00", "answer_session_ids": ["s-2"],
    "haystack_session_ids": ["s-1", "s-2"], "haystack_dates": ["2023/05/20 (Sat) 09:00", "2023/05/23 (Tue) 19:11"],
    "haystack_sessions": [
        [{"role": "user", "content": "I like green tea in the morning."}, {"role": "assistant", "content": "Noted."}],
        [{"role": "user", "content": "I parked my car on level 3 of the mall garage.", "has_answer": True},
         {"role": "assistant", "content": "OK."}],
    ],
}]


def test_the_reply_model_is_fixed_and_says_what_it_is():
    kinds = [reply_kind(i) for i in range(10)]
    assert kinds == ["right"] * 3 + ["verbose"] + ["wrong"] * 3 + ["unsure"] * 3
    qa = QAItem("Where?", "Lisbon", ["D1:1"], 4)
    replies = [reply_to(i, qa) for i in range(10)]
    assert replies[0] == "Lisbon." and "Lisbon" in replies[3] and len(content_words(replies[3])) >= 12
    assert all(r.rstrip(".") in WRONG for r in replies[4:7])  # wrong answers never come from the data
    assert DONT_KNOW in replies[7:] and any("maybe" in r for r in replies[7:])
    assert [reply_to(i, qa) for i in range(10)] == replies  # no randomness
    assert is_echo([f"{LOOP}q1"]) and is_echo([f"{LOOP}q1", f"{LOOP}a1"])
    assert not is_echo(["D1:1"]) and not is_echo(["D1:1", f"{LOOP}q3"]) and not is_echo([])
    naive = NaivePolicy().judge([Turn("a", "user", "Where?", 0.0), Turn("b", "assistant", "Lisbon.", 0.0),
                                 Turn("c", "user", "Thanks!", 0.0)])
    assert [v.keep for v in naive] == [False, False, True]


def test_summary_and_paired_delta():
    recs = [{"category": "a", "recall_all": 1.0, "coverage": 1.0, "lines": 4, "echo_lines": 1, "told": True, "tokens": 10},
            {"category": "b", "recall_all": 0.0, "coverage": None, "lines": 6, "echo_lines": 0, "told": False, "tokens": 20}]
    s = summarize(recs)
    assert s["overall"]["echo_share"] == 0.1 and s["overall"]["recall_all"] == 0.5 and s["overall"]["coverage"] == 1.0
    assert s["overall"]["told_questions"] == 1 and s["a"]["told_recall_all"] == 1.0
    d = paired_delta(recs, [{**r, "recall_all": 1.0} for r in recs])
    assert d["delta"] == 0.5 and d["low"] <= 0.5 <= d["high"]


def test_the_benchmark_runs_every_arm_end_to_end(tmp_path, capsys):
    lme = tmp_path / "lme.json"
    lme.write_text(json.dumps(LME))
    cfg = compose("agent_loop", [f"locomo_path={TINY_LOCOMO}", "locomo_conversations=0-1", "encoder=hashing",
                                 f"longmemeval_path={lme}", "tell_every=2", "thanks_every=2", "vector_cache=null",
                                 f"out_dir={tmp_path / 'out'}", "budget=200"])
    results = entry_point("agent_loop").run(cfg)
    out = tmp_path / "out"
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    arms = ("none", "all", "naive", "agent")
    assert {(r["dataset"], r["arm"]) for r in records} == {(d, a) for d in ("locomo", "longmemeval") for a in arms}
    loc = {a: [r for r in records if r["dataset"] == "locomo" and r["arm"] == a] for a in arms}
    # the same questions, in the same order, in every arm
    assert [r["question"] for r in loc["none"]] == [r["question"] for r in loc["all"]] == [r["question"] for r in loc["agent"]]
    summary = results["summary"]["locomo"]
    assert summary["none"]["overall"]["echo_share"] == 0.0  # nothing saved: no echo can be packed
    # session 2 of each conversation was told through the loop (in "none", ingested: the same questions are marked)
    assert summary["all"]["overall"]["told_questions"] == summary["none"]["overall"]["told_questions"] > 0
    assert all(r["tokens"] <= 200 for r in records)
    # saving every turn packs echoes of the earlier questions; the agent policy packs none
    assert summary["all"]["overall"]["echo_share"] > 0
    assert summary["agent"]["overall"]["echo_share"] == 0.0
    lme_agent = next(r for r in records if r["dataset"] == "longmemeval" and r["arm"] == "agent")
    assert lme_agent["told"] and lme_agent["echo_lines"] == 0
    assert set(results["paired"]["locomo"]) == {"all", "naive", "agent"}
    assert "| locomo | agent | overall |" in capsys.readouterr().out and (out / "results.md").exists()
    assert not (out / "stores").exists()  # scratch stores removed


def test_the_reader_answers_every_arm_and_its_f1_is_paired(tmp_path):
    cfg = compose("agent_loop", [f"locomo_path={TINY_LOCOMO}", "locomo_conversations=0", "encoder=hashing", "tell_every=2",
                                 "vector_cache=null", f"out_dir={tmp_path / 'out'}", "qa.enabled=true",
                                 "llm._target_=fakes.ScriptedLLM", "+llm.script=[Biscuit]"])
    results = entry_point("agent_loop").run(cfg)
    records = [json.loads(line) for line in (tmp_path / "out" / "records.jsonl").read_text().splitlines()]
    assert records and all(r["prediction"] == "Biscuit" and r["f1"] is not None for r in records)
    puppy = next(r for r in records if r["question"] == "What is the name of Ava's puppy?")
    assert puppy["f1"] == 1.0 and puppy["prompt"].rstrip().endswith(puppy["question"])  # scored from its own prompt
    assert set(results["paired"]["locomo"]) == {"all", "all_f1", "naive", "naive_f1", "agent", "agent_f1"}
    assert results["paired"]["locomo"]["agent_f1"]["delta"] == 0.0  # the same answer everywhere: no change
    assert "reader F1" in (tmp_path / "out" / "results.md").read_text()
