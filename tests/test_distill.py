"""Supervision distilled from dev-format data: word labels, complexity labels, mined groups, splits."""
from __future__ import annotations

import json

from conftest import TINY_LOCOMO

from lightmem.datasets.locomo import load_locomo
from lightmem.datasets.splits import split_of
from lightmem.training import distill


def test_compressor_labels_follow_the_observation_facts():
    raw = [{"sample_id": "c", "conversation": {"session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "Yeah, I adopted a puppy named Biscuit!"},
                                                             {"speaker": "Bo", "dia_id": "D1:2", "text": "Cute"}]},
            "observation": {"session_1_observation": {"Ann": [["Ann adopted a puppy named Biscuit.", "D1:1"]]}},
            "qa": [{"question": "Name of Ann's puppy?", "answer": "Biscuit", "evidence": ["D1:1"], "category": 4}]}]
    (ex,) = distill.compressor_examples(raw)  # D1:2 is cited by no fact: not labelled
    assert ex["words"] == ["Yeah,", "I", "adopted", "a", "puppy", "named", "Biscuit!"]
    assert ex["labels"] == [0, 0, 1, 1, 1, 1, 1]
    assert ex["answer"] == [0, 0, 0, 0, 0, 0, 1]


def test_complexity_labels_from_category_and_evidence():
    convs = load_locomo(TINY_LOCOMO)
    rows = distill.complexity_examples_locomo(convs)
    by_q = {r["text"]: r["label"] for r in rows}
    assert by_q["What is the name of Ava's puppy?"] == 0
    assert by_q["What breed is Biscuit and what did Biscuit chew?"] == 1  # multi-hop, two evidence turns
    assert all(r["source"] == "locomo" for r in rows)
    assert all(r["label"] == int(r["n_evidence"] >= 2) and r["type"] in distill.LOCOMO_TYPES.values() for r in rows)


def test_complexity_labels_mean_the_same_for_every_source():
    """HIGH is two or more evidence units: LongMemEval answer sessions, synthetic path facts."""
    from lightmem.datasets.formats import Conversation
    from lightmem.datasets.formats import QAItem as QA

    lme = [Conversation("q1", [], [QA("Which of my trips came first?", "Oslo", [], "temporal-reasoning", {"answer_session_ids": ["s1"]}),
                                  QA("How many plants did I buy?", "3", [], "multi-session", {"answer_session_ids": ["s1", "s2"]})])]
    rows = distill.complexity_examples_lme(lme)
    assert [(r["label"], r["type"]) for r in rows] == [(0, "temporal-reasoning"), (1, "multi-session")]
    synth = [{"query": "Where does Noah's sister live?", "hops": 2, "kind": "2-hop", "conversation": "s"},
             {"query": "Is there a boat?", "hops": 0, "kind": "unanswerable", "conversation": "s"}]
    assert [r["label"] for r in distill.complexity_examples_synth(synth)] == [1, 0]


def test_split_is_stable_and_roughly_proportional():
    keys = [f"q{i}" for i in range(2000)]
    splits = [split_of(k) for k in keys]
    assert splits == [split_of(k) for k in keys]
    assert 0.75 < splits.count("train") / 2000 < 0.85 and splits.count("test") > 100


def test_mined_groups_label_stage1_candidates_by_evidence(tmp_path, embedder):
    from lightmem.memory import Memory
    from lightmem.retrieval.stage2 import Stage1Selector

    convs = load_locomo(TINY_LOCOMO)[:1]
    mk = lambda cid: Memory.open(tmp_path / cid, embedder=embedder, selector=Stage1Selector(),  # noqa: E731
                                 retrieval={"candidate_factor": 2})
    groups = distill.mine_selector_groups(mk, convs, "locomo", k=2, categories=(1, 2, 3, 4))
    assert groups and all(len(g["texts"]) == len(g["labels"]) == len(g["stage1"]) for g in groups)
    for g in groups:
        n_cands = sum(1 for s in g["stage1"] if s != float("-inf"))
        assert n_cands <= 4  # 2K for K = 2
        assert sum(g["labels"]) == g["n_evidence"]  # missed evidence appended as positives
        assert all(t.startswith("[20") for t in g["texts"])
    json.dumps(groups)  # JSONL-serialisable
