"""The fact-key ceiling (eval/fact_keys.py): LoCoMo observations as extra keys of the turns they cite."""
from __future__ import annotations

import json
import runpy
import sys

import numpy as np
from conftest import ROOT, TINY_LOCOMO

from lightmem.datasets import load_locomo
from lightmem.evaluation.fact_keys import KEYS, cited_facts, conversation_ranks, recall_table, turn_keys, worst_rank
from lightmem.models.embedder import HashingEmbedder


def test_cited_facts_split_citations_and_drop_turns_that_do_not_exist():
    raw = {"observation": {"s1": {"Ava": [["Ava has a puppy.", "D1:1; D2:2"], ["Nothing cited.", "D9:9"]],
                                  "Ben": [["Ben plays violin.", ["D1:4"]]]}}}
    assert cited_facts(raw, ["D1:1", "D1:4", "D2:2"]) == [("Ava has a puppy.", ["D1:1", "D2:2"]), ("Ben plays violin.", ["D1:4"])]
    assert cited_facts({}, ["D1:1"]) == []


def test_merged_keys_put_each_turns_facts_beside_its_text():
    keys = turn_keys(["Ava: hi", "Ben: yo"], ["D1:1", "D1:2"], [("Ava is kind.", ["D1:1"])])
    assert keys["text"] == ["Ava: hi", "Ben: yo"]
    assert keys["text+facts"] == ["Ava: hi Ava is kind.", "Ben: yo"] and keys["facts+text"] == ["Ava is kind. Ava: hi", "Ben: yo"]


def test_worst_rank_is_the_rank_of_the_last_evidence_turn():
    assert worst_rank(np.array([0.1, 0.9, 0.5, 0.7]), [1]) == 0
    assert worst_rank(np.array([0.1, 0.9, 0.5, 0.7]), [1, 2]) == 2
    assert worst_rank(np.array([0.5, 0.5]), [1]) == 1  # a tie goes to the earlier turn


def test_a_fact_that_says_what_the_question_asks_brings_its_turn_first_as_a_key_item():
    conv, raw = load_locomo(TINY_LOCOMO)[0], json.loads(TINY_LOCOMO.read_text())[0]
    q = next(q for q in conv.qa if q.evidence == ["D1:1"])  # "What is the name of Ava's puppy?"
    raw = {**raw, "observation": {"s": {"Ava": [[q.question, "D1:1"]]}}}  # the fact is the question's own words
    rows = conversation_ranks(conv, raw, HashingEmbedder(dim=256))
    assert rows and all(set(r["ranks"]) == set(KEYS) for r in rows)
    asked = next(r for r in rows if r["question"] == q.question)
    assert asked["ranks"]["text|fact items"] == 0  # the fact item is the question itself: cosine 1
    table = recall_table(rows, [1, 100])
    assert all(table[k]["all"][100] == [1.0] * len(rows) for k in KEYS)  # every turn within 100 of a tiny conversation


def test_the_entry_point_writes_its_numbers_and_refuses_a_file_without_observations(tmp_path, monkeypatch, capsys):
    out = tmp_path / "fk.json"
    monkeypatch.setattr(sys, "argv", ["fact_keys.py", "--data", str(TINY_LOCOMO), "--encoder", "hashing", "--ns", "1,5",
                                      "--resamples", "50", "--json", str(out)])
    try:
        runpy.run_path(str(ROOT / "eval" / "fact_keys.py"), run_name="__main__")
    except SystemExit as e:
        assert e.code == 0
    got = json.loads(out.read_text())
    assert got["n"] > 0 and set(got["recall_all"]) == set(KEYS)
    assert all(0.0 <= v <= 1.0 for by in got["recall_all"].values() for c in by.values() for v in c.values())
    assert "text+facts − text" in capsys.readouterr().out
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps([{k: v for k, v in s.items() if k != "observation"} for s in json.loads(TINY_LOCOMO.read_text())]))
    monkeypatch.setattr(sys, "argv", ["fact_keys.py", "--data", str(bare), "--encoder", "hashing"])
    try:
        runpy.run_path(str(ROOT / "eval" / "fact_keys.py"), run_name="__main__")
        code = 0
    except SystemExit as e:
        code = e.code
    assert code == 2 and "no `observation`" in capsys.readouterr().err
