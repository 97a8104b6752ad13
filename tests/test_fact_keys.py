"""The fact-key ceiling (experiments/fact_keys/): LoCoMo observations as extra keys of the turns they cite."""
from __future__ import annotations

import json
import runpy
import sys

import numpy as np
from conftest import TINY_LOCOMO

from experiments.fact_keys.ceiling import KEYS, cited_facts, conversation_ranks, recall_table, turn_keys, worst_rank
from lightmem.datasets import load_locomo
from lightmem.models.embedder import HashingEmbedder


def run_entry_point(monkeypatch, argv: list[str]) -> int:
    """experiments/fact_keys/run.py run as ``python -m`` runs it, with ``argv``; its exit code (0 when it returns)."""
    monkeypatch.setattr(sys, "argv", ["fact_keys.py", *argv])
    try:
        runpy.run_module("experiments.fact_keys.run", run_name="__main__")
    except SystemExit as e:
        return e.code
    return 0


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
    assert run_entry_point(monkeypatch, ["--data", str(TINY_LOCOMO), "--encoder", "hashing", "--ns", "1,5",
                                         "--resamples", "50", "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["n"] > 0 and set(got["recall_all"]) == set(KEYS)
    assert all(0.0 <= v <= 1.0 for by in got["recall_all"].values() for c in by.values() for v in c.values())
    assert "text+facts − text" in capsys.readouterr().out
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps([{k: v for k, v in s.items() if k != "observation"} for s in json.loads(TINY_LOCOMO.read_text())]))
    code = run_entry_point(monkeypatch, ["--data", str(bare), "--encoder", "hashing"])
    assert code == 2 and "no `observation`" in capsys.readouterr().err


def test_a_fact_keyed_writer_stores_each_memory_under_its_facts_and_remembers_what_it_wrote(tmp_path, embedder):
    from experiments.fact_keys.ceiling import FactKeyedWriter, facts_by_turn, shown
    from lightmem.memory import Memory
    from lightmem.roles.writer import TurnWriter

    conv, raw = load_locomo(TINY_LOCOMO)[0], json.loads(TINY_LOCOMO.read_text())[0]
    raw = {**raw, "observation": {"s": {"Ava": [["Ava owns a dachshund.", "D1:1"], ["Ava owns a dachshund.", "D1:1"]]}}}
    facts = facts_by_turn(raw, conv)
    assert facts == {"D1:1": ["Ava owns a dachshund.", "Ava owns a dachshund."]}
    writer = FactKeyedWriter(TurnWriter(), facts)
    mem = Memory.open(tmp_path / "store", embedder=embedder, writer=writer, background_index=False)
    try:
        for s in conv.sessions:
            mem.add_turns("u", s.turns)
        keyed = [m for m in mem.get_all("u") if m.provenance == ["D1:1"]]
        assert len(keyed) == 1 and keyed[0].text.endswith(" Ava owns a dachshund.")  # each fact once
        written = writer.written[keyed[0].text]
        assert keyed[0].text == f"{written} Ava owns a dachshund." and "dachshund" not in written
        assert set(writer.written) == {keyed[0].text}  # the memories of turns no fact cites are stored as written
        hits = mem.retrieve("dachshund", "u").candidates  # a word of the fact alone finds the memory (BM25 on its key)
        assert hits and hits[0].item.provenance == ["D1:1"]
    finally:
        mem.close()
    group = {"texts": [f"[2023-05-08] {keyed[0].text}", "[2023-05-08] Ben: hi", keyed[0].text]}
    assert shown([group], writer.written)[0]["texts"] == [f"[2023-05-08] {written}", "[2023-05-08] Ben: hi", written]


def test_the_pipeline_ceiling_scores_both_keys_of_every_question(tmp_path, monkeypatch, capsys):
    out = tmp_path / "fk.json"
    assert run_entry_point(monkeypatch, ["--data", str(TINY_LOCOMO), "--pipeline", "--resamples", "50", "--set",
                                         "encoder=hashing", "--set", "vector_cache=null", "--json", str(out)]) == 0
    from lightmem.metrics.evidence import normalize_evidence

    got = json.loads(out.read_text())
    convs = load_locomo(TINY_LOCOMO)
    asked = [q for c in convs for q in c.qa if str(q.category) in ("1", "2", "3", "4") and normalize_evidence(q.evidence)]
    assert got["n"] == len(got["rows"]) == len(asked) > 0
    for row in got["rows"]:
        for key in ("text", "text+facts"):
            assert set(row[key]) == {"pool", "strict"} and row[key]["pool"] in (0.0, 1.0)
            assert row[key]["strict"] <= row[key]["pool"]  # packed whole implies found by Stage 1
    printed = capsys.readouterr().out
    assert "strict@600" in printed and "text+facts − text, all strict" in printed


def test_the_pipeline_ceiling_refuses_a_selector_without_a_trained_ranker(monkeypatch, capsys):
    code = run_entry_point(monkeypatch, ["--data", str(TINY_LOCOMO), "--pipeline", "--set", "encoder=hashing",
                                         "--set", "vector_cache=null", "--set", "selector=none"])
    assert code == 2 and "learned ranker" in capsys.readouterr().err
