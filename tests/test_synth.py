"""The synthetic (Query, Subgraph, Path) generator: deterministic, consistent, loadable."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from lightmem.datasets.locomo import parse_locomo
from lightmem.synth import SynthSpec, generate, write


@pytest.fixture(scope="module")
def data():
    return generate(SynthSpec(n_samples=120, seed=3))


def test_same_seed_same_data_and_other_seed_differs():
    a = generate(SynthSpec(n_samples=60, seed=7))
    b = generate(SynthSpec(n_samples=60, seed=7))
    c = generate(SynthSpec(n_samples=60, seed=8))
    assert json.dumps(a) == json.dumps(b)
    assert json.dumps(a) != json.dumps(c)


def test_sample_count_and_user_level_splits(data):
    samples, convs = data
    assert sum(len(v) for v in samples.values()) == 120
    users = {s: {x["conversation"] for x in v} for s, v in samples.items()}
    assert not (users["train"] & users["val"]) and not (users["train"] & users["test"]) and not (users["val"] & users["test"])


def test_positives_are_exactly_the_path_turns(data):
    samples, _ = data
    for s in (x for v in samples.values() for x in v):
        pos = {c["id"] for c in s["candidates"] if c["label"] == 1}
        assert pos == {p["turn"] for p in s["path"]}
        assert s["hops"] == len(s["path"])
        assert len({c["id"] for c in s["candidates"]}) == len(s["candidates"])  # no duplicates
        if s["kind"] == "unanswerable":
            assert not pos


def test_every_kind_and_hop_count_occurs(data):
    samples, _ = data
    allq = [x for v in samples.values() for x in v]
    assert {s["kind"] for s in allq} == {"1-hop", "2-hop", "3-hop", "temporal", "unanswerable"}
    assert {s["hops"] for s in allq} == {0, 1, 2, 3}
    assert any(c["kind"] == "hard" for s in allq for c in s["candidates"])


def test_conversations_load_as_locomo_and_evidence_exists(data):
    _, convs = data
    for conv in parse_locomo(convs["train"]):
        ids = {t.turn_id for t in conv.turns}
        assert conv.qa and all(set(q.evidence) <= ids for q in conv.qa)


def test_temporal_answers_match_relative_expressions(data):
    samples, convs = data
    by_conv = {c["sample_id"]: c["conversation"] for v in convs.values() for c in v}
    checked = 0
    for s in (x for v in samples.values() for x in v if x["kind"] == "temporal"):
        turn_id = s["path"][0]["turn"]
        session = turn_id.split(":")[0][1:]
        conv = by_conv[s["conversation"]]
        text = next(t["text"] for t in conv[f"session_{session}"] if t["dia_id"] == turn_id)
        assert text.split(" I went")[0] in {"This morning", "Yesterday", "Two days ago", "Three days ago", "Last week"} or text.startswith("Last ")
        event = datetime.fromtimestamp(s["path"][0]["date"], tz=timezone.utc)
        assert s["answer"] == f"{event.day} {event.strftime('%B')} {event.year}"
        checked += 1
    assert checked


def test_write_creates_files_and_a_card(tmp_path):
    card = write(SynthSpec(n_samples=40, seed=1), tmp_path)
    for split in ("train", "val", "test"):
        assert (tmp_path / f"{split}.jsonl").exists() and (tmp_path / f"{split}_locomo.json").exists()
    saved = json.loads((tmp_path / "data_card.json").read_text())
    assert saved["samples"] == card["samples"] and sum(card["samples"].values()) == 40
    assert saved["spec"]["seed"] == 1 and set(saved["hops"]) <= {"0", "1", "2", "3"}
