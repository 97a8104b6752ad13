"""The aggregate-memory ceiling (experiments/aggregates/): LoCoMo's observations grouped per speaker and topic into
memories that cite every turn their facts cite, written beside the turns and served like any memory."""
from __future__ import annotations

import copy
import dataclasses
import json

import numpy as np
import pytest
from conftest import TINY_LOCOMO

from experiments.aggregates.annotated import Aggregate, AnnotatedAggregates, Fact, annotated_facts, group_facts, topic_text
from lightmem import Memory
from lightmem.datasets import load_locomo
from lightmem.metrics.evidence import evidence_recall
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.types import ItemKind

OBSERVATION = {
    "session_1_observation": {"Ava": [["Ava adopted a golden retriever puppy named Biscuit.", "D1:1; D1:3"],
                                      ["Ava cites a turn that does not exist.", "D9:9"]],
                              "Ben": [["Ben asked about the breed.", ["D1:2"]]]},
    "session_2_observation": {"Ava": [["Biscuit chewed Ava's running shoes last week.", "D2:3"]]},
}


@pytest.fixture
def raw_file(tmp_path):
    """The tiny LoCoMo file, its first sample annotated with OBSERVATION."""
    raw = json.loads(TINY_LOCOMO.read_text())
    raw[0] = copy.deepcopy(raw[0]) | {"observation": OBSERVATION}
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(raw))
    return path, raw[0]


def test_facts_carry_their_sessions_time_and_drop_turns_that_do_not_exist(raw_file):
    _, raw = raw_file
    conv = load_locomo(TINY_LOCOMO)[0]
    when = {s.session_id: s.timestamp for s in conv.sessions}
    facts = annotated_facts(raw, conv)
    assert [(f.speaker, f.turns) for f in facts] == [("Ava", ("D1:1", "D1:3")), ("Ben", ("D1:2",)), ("Ava", ("D2:3",))]
    assert [f.time for f in facts] == [when["session_1"], when["session_1"], when["session_2"]]
    assert annotated_facts({}, conv) == []


def test_groups_keep_to_one_speaker_stop_at_max_facts_and_drop_single_facts():
    facts = [Fact(f"f{i}", "Ava" if i != 2 else "Ben", float(i), (f"D1:{i}",)) for i in range(5)]
    same = np.tile(np.array([[1.0, 0.0]], dtype=np.float32), (5, 1))  # every fact on one topic
    groups = group_facts(facts, same, tau=0.5, max_facts=3)
    assert [[f.text for f in g.facts] for g in groups] == [["f0", "f1", "f3"]]  # Ben's fact alone, f4 alone: no aggregate
    apart = np.eye(5, dtype=np.float32)  # five topics: no fact joins another
    assert group_facts(facts, apart, tau=0.5, max_facts=3) == []


def test_an_aggregate_reads_with_each_facts_day_and_its_relative_dates_resolved():
    day1, day2 = 1683504000.0, 1685000000.0  # 8 May 2023, 25 May 2023
    agg = Aggregate("Ava", [Fact("Ava painted a lake last year.", "Ava", day1, ("D1:1",)),
                            Fact("Ava ran a race.", "Ava", day2, ("D2:4", "D1:1"))])
    text = agg.text()
    assert text.startswith("Ava, from 2 days: [8 May 2023] Ava painted a lake last year [2022].")
    assert "[25 May 2023] Ava ran a race." in text
    assert agg.turns == ["D1:1", "D2:4"]
    assert topic_text(Fact("Ava's dog likes Ava's garden", "Ava", day1, ())) == "dog likes garden"


def test_the_hook_writes_cited_aggregates_that_the_read_path_packs_and_recall_credits(raw_file, tmp_path):
    path, _ = raw_file
    conv = load_locomo(path)[0]
    question = next(q for q in conv.qa if set(q.evidence) == {"D1:3", "D2:3"})
    hook = AnnotatedAggregates(str(path), tau=-1.0, max_facts=6)  # tau -1: each speaker's facts form one group
    with Memory.open(tmp_path / "store", embedder=HashingEmbedder(64), selector=Stage1Selector()) as memory:
        for session in conv.sessions:
            memory.add_turns(conv.conv_id, session.turns)
        memory.flush(conv.conv_id)
        stats = hook(memory, conv)
        assert stats == {"injected_aggregates": 1, "injected_aggregate_facts": 2,
                         "injected_aggregate_tokens": hook.written[conv.conv_id][0].n_tokens}
        [item] = hook.written[conv.conv_id]
        assert item.kind is ItemKind.ABSTRACT and item.provenance == ["D1:1", "D1:3", "D2:3"]
        assert memory.get(item.id, conv.conv_id).text == item.text  # stored, beside the turns
        ctx = memory.build_context(question.question, conv.conv_id, budget=400)
        packed = [m for m in ctx.memories if m.id == item.id]
        assert packed, "the aggregate is found and packed like any memory"
        assert evidence_recall([m.provenance for m in packed], question.evidence).all == 1.0
        stranger = dataclasses.replace(conv, conv_id="not-in-the-file")  # a conversation the file does not annotate
        assert hook(memory, stranger) == {"injected_aggregates": 0, "injected_aggregate_facts": 0, "injected_aggregate_tokens": 0}
