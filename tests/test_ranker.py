"""The learned Stage-2 ranker: its features, its fit and the selector that loads it."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

from lightmem.retrieval.features import FEATURES, candidate_features, linear_scores, named_speakers, speaker_of
from lightmem.retrieval.stage2 import LearnedRanker
from lightmem.text import analyze
from lightmem.training.ranker import evaluate, fit_linear
from lightmem.types import Filters, Hit, HypotheticalQuery, ItemKind, MemoryItem, RetrievalPlan

F = {name: i for i, name in enumerate(FEATURES)}


def _hit(text, score, row=None, session="s1", n_tokens=10, speaker=None, **scores):
    meta = {"session_id": session, **({"speaker": speaker} if speaker else {})}
    item = MemoryItem(id=f"i{row}{text[:5]}", user_id="u", text=text, provenance=[str(row)], created_at=0, event_time=0,
                      last_access=0, n_tokens=n_tokens, metadata=meta)
    return Hit(item, {"stage1": score, **scores}, score, row=row)


def test_speakers_come_from_metadata_or_a_short_name_prefix():
    assert speaker_of(_hit("Ava: hi", 1.0, speaker="Ava")) == "Ava"
    assert speaker_of(_hit("Ben: I moved to Porto", 1.0)) == "Ben"
    assert speaker_of(_hit("no prefix here", 1.0)) == ""
    assert speaker_of(_hit("Time: 10:30 at the dentist", 1.0)) == "Time"  # capitalised: indistinguishable from a name
    assert speaker_of(_hit("note to self: buy milk", 1.0)) == "" and speaker_of(_hit("Mary Ann Lee: hi", 1.0)) == "Mary Ann Lee"
    assert named_speakers("When did ava move?", {"Ava", "Ben", ""}) == {"Ava"}
    assert named_speakers("When did Avalon open?", {"Ava"}) == set()  # whole words only


def test_candidate_features_describe_each_hit_relative_to_its_group():
    hits = [
        _hit("Ava: I moved to Porto last year.", 0.9, row=10, n_tokens=12, dense=0.8, bm25_norm=1.0),
        _hit("Ben: Did you like it?", 0.5, row=11),
        _hit("Ava: The 2 dogs love the beach", 0.4, row=30, session="s2"),
    ]
    x = candidate_features("When did Ava move to Porto?", hits)
    assert x.shape == (3, len(FEATURES))
    assert x[0, F["stage1"]] == 0.9 and x[0, F["dense"]] == 0.8 and x[0, F["bm25"]] == 1.0
    assert x[0, F["gap_top"]] == 0.0 and x[1, F["gap_top"]] == pytest.approx(-0.4)
    assert x[:, F["rank"]].tolist() == pytest.approx([0, 1 / 3, 2 / 3])
    assert x[:, F["speaker_named"]].tolist() == [1, 0, 1] and x[:, F["speaker_other"]].tolist() == [0, 1, 0]
    assert x[1, F["neighbor"]] == 0.9 and x[0, F["neighbor"]] == 0.5 and x[2, F["neighbor"]] == 0.0  # rows 10, 11 adjacent
    assert x[:, F["session_share"]].tolist() == pytest.approx([2 / 3, 2 / 3, 1 / 3])
    assert x[1, F["session_gap"]] == pytest.approx(0.4) and x[2, F["session_gap"]] == 0.0
    assert x[:, F["is_question"]].tolist() == [0, 1, 0]
    q_words = set(analyze("When did Ava move to Porto?"))
    assert x[0, F["overlap"]] == pytest.approx(len(q_words & {"ava", "move", "porto"}) / len(q_words))  # stems match
    assert x[:, F["digits"]].tolist() == [0, 0, 1]
    assert x[0, F["when_x_time"]] == 1.0 and x[2, F["when_x_time"]] == 0.0 and x[:, F["when"]].tolist() == [1, 1, 1]
    assert candidate_features("anything", []).shape == (0, len(FEATURES))
    dated = [_hit("Ava: We moved in MARCH", 0.9, row=1, session="s1"), _hit("Ava: Moving was hard", 0.8, row=5, session="s1")]
    assert candidate_features("When did Ava move?", dated)[:, F["when_x_time"]].tolist() == [1, 0]  # any case


def test_linear_scores_standardise_then_weigh():
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    got = linear_scores(x, np.array([1.0, 2.0]), np.array([2.0, 1.0]), np.array([1.0, -1.0]), 0.5)
    assert got.tolist() == pytest.approx([0.5, 1.0 - 2.0 + 0.5])


def test_memories_without_a_session_or_speaker_stand_alone():
    a, b = _hit("we met at the pier", 0.9, row=4), _hit("a knowledge line", 0.5, row=5)
    a.item.metadata, b.item.metadata = {}, {}
    b.item.kind = ItemKind.KNOWLEDGE
    b.scores = {"ltm": 0.7, "stage1": 0.5}
    x = candidate_features("What did Ava do at the pier?", [a, b, _hit("Ava: I fished", 0.4, row=6)])
    assert x[:2, F["neighbor"]].tolist() == [0.0, 0.0] and x[:2, F["session_share"]].tolist() == pytest.approx([1 / 3, 1 / 3])
    assert x[:2, F["speaker_other"]].tolist() == [0.0, 0.0]  # no speaker is not "another speaker"
    assert x[1, F["dense"]] == 0.7  # an LTM hit's score stands in for its cosine


def _groups(n, rng):
    """Groups where feature 'overlap' marks the evidence and Stage 1 (the 'stage1' feature) is noise."""
    out = []
    for g in range(n):
        m = 12
        labels = [0] * m
        for i in rng.sample(range(m), 2):
            labels[i] = 1
        feats = np.zeros((m, len(FEATURES)))
        feats[:, F["stage1"]] = [rng.random() for _ in range(m)]
        feats[:, F["overlap"]] = [(0.8 if y else 0.2) + 0.1 * rng.random() for y in labels]
        out.append({"features": feats.tolist(), "labels": labels, "provenance": [[f"t{i}"] for i in range(m)],
                    "tokens": [30] * m, "evidence": [f"t{i}" for i in range(m) if labels[i]], "category": 1 + g % 2})
    return out


def test_fit_linear_learns_the_informative_feature_and_beats_stage1_order():
    rng = random.Random(0)
    w = fit_linear(_groups(40, rng))
    assert w["features"] == list(FEATURES)
    assert np.argmax(np.abs(w["coef"])) == F["overlap"] and w["coef"][F["overlap"]] > 0
    held_out = _groups(30, rng)
    learned, stage1 = evaluate(held_out, w, k=2, budget=60), evaluate(held_out, None, k=2, budget=60)
    assert learned["overall/recall_all@2"] == 1.0 > stage1["overall/recall_all@2"]
    assert evaluate(held_out, w, k=2, budget=30)["overall/recall_all@budget"] == 0.0  # only one 30-token item fits
    # a budget of 4 items: filled from every ranked candidate, not only the best K = 1
    assert evaluate(held_out, w, k=1, budget=120)["overall/recall_all@budget"] == 1.0
    assert evaluate(held_out, w, k=1, budget=120, fill=False)["overall/recall_all@budget"] == 0.0
    assert {"category_1/recall_all@2", "category_2/recall_all@budget", "n"} <= set(learned)
    with pytest.raises(ValueError, match="no ranker groups"):
        fit_linear([])


def _write(tmp_path, coef, features=FEATURES):
    n = len(features)
    (tmp_path / "ranker.json").write_text(json.dumps(
        {"features": list(features), "mean": [0.0] * n, "scale": [1.0] * n, "coef": coef, "intercept": 0.0}))
    return str(tmp_path)


def test_learned_ranker_orders_by_its_weights_and_records_the_score(tmp_path):
    coef = [0.0] * len(FEATURES)
    coef[F["speaker_other"]] = -2.0
    ranker = LearnedRanker(_write(tmp_path, coef))
    hits = [_hit("Ben: lovely day", 0.9, row=1), _hit("Ava: I adopted a cat", 0.5, row=5), _hit("Ava: hello", 0.4, row=9)]
    plan = RetrievalPlan("What pet did Ava adopt?", (HypotheticalQuery("What pet did Ava adopt?"),), Filters(), 2)
    kept = ranker.select(plan, hits, 2)
    assert [h.item.text for h in kept] == ["Ava: I adopted a cat", "Ava: hello"]  # ties keep the Stage-1 order
    assert kept[0].scores["ranker"] == 0.0
    assert ranker.select(plan, [], 2) == []


def test_learned_ranker_refuses_a_missing_or_stale_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match="train/ranker.py"):
        LearnedRanker(str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="retrain"):
        LearnedRanker(_write(tmp_path, [1.0], features=("stage1",)))


def test_where_lost_counts_pool_misses_packed_questions_and_the_ranks_of_what_the_budget_cut():
    from lightmem.training.ranker import where_lost

    w = {"mean": [0.0] * len(FEATURES), "scale": [1.0] * len(FEATURES), "coef": [0.0] * len(FEATURES), "intercept": 0.0}
    w["coef"][F["overlap"]] = 1.0  # the ranker orders by 'overlap'

    def group(overlaps, evidence, category=1):
        feats = np.zeros((len(overlaps), len(FEATURES)))
        feats[:, F["overlap"]] = overlaps
        return {"features": feats.tolist(), "provenance": [[f"t{i}"] for i in range(len(overlaps))],
                "tokens": [100] * len(overlaps), "evidence": evidence, "category": category}

    groups = [group([0.9, 0.5, 0.1], ["t0", "t1"]),  # both evidence memories in the first two: packed
              group([0.9, 0.5, 0.1], ["t0", "t2"]),  # t2 ranked third: the 200-token budget cuts it
              group([0.9, 0.5, 0.1], ["t0", "t1", "t9"]),  # t9 never retrieved; a list question
              group([0.9, 0.5, 0.1], ["t1"], category=4)]
    lost = where_lost(groups, w, budget=200)
    assert lost["category_1"] == {"n": 3, "in_pool": 2, "packed": 1, "missed_ranks": [2], "list_questions": 1,
                                  "list_in_pool": 0}
    assert lost["category_4"]["packed"] == 1 and list(lost) == ["category_1", "category_4"]


def _overhead(packing, query: str) -> int:
    """Prompt tokens a question's block takes before any memory (the composer's layout)."""
    return 1000 - packing.composer.layout(query, (), 1000).memory_budget


def test_served_packing_scores_the_composed_prompt_and_gives_an_excerpt_no_credit():
    from lightmem.models.tokens import WhitespaceTokenCounter
    from lightmem.retrieval.engine import pack_items
    from lightmem.training.ranker import ServedPacking, evaluate_orders

    filler = "We talked about the weather and the traffic on the long drive home that evening."
    texts = [f"[2023-05-0{i + 1}] {filler} Nothing else happened." for i in range(3)]
    texts.append("[2023-05-04] " + filler + " " + filler + " Caroline adopted a puppy named Rex.")
    group = {"query": "What is the name of Caroline's puppy?", "texts": texts,
             "tokens": [len(t.split()) - 1 for t in texts], "provenance": [["D1:1"], ["D1:2"], ["D1:3"], ["D1:4"]],
             "evidence": ["D1:4"], "category": 1, "labels": [0, 0, 0, 1]}
    counter, pool = WhitespaceTokenCounter(), [0, 1, 2, 3]
    whole_only = ServedPacking(counter, 1.0)
    items = whole_only.items(group, pool)
    # three whole memories under their own date lines, and room for a sentence more
    room = sum(whole_only.composer.line_cost(m) for m in items[:3]) + 15
    budget = _overhead(whole_only, group["query"]) + room
    assert whole_only.composer.layout(group["query"], (), budget).memory_budget == room
    assert whole_only.kept(group, pool, budget) == whole_only.composer.pack(items, room) == [0, 1, 2]
    # with excerpts the evidence reaches the prompt as one sentence: packed, and not credited
    packing = ServedPacking(counter, 0.75)
    packed = pack_items(packing.composer, items, [group["query"]], room, 0.75, 1.0, lambda t: counter.count([t])[0])
    assert any(i == 3 and cut is not None and "Rex" in cut.text for i, cut in packed)
    assert packing.kept(group, pool, budget) == [i for i, cut in packed if cut is None] and 3 not in packing.kept(group, pool, budget)
    served = evaluate_orders([group], [pool], k=2, budget=budget, packing=packing)
    assert served["overall/recall_all@budget"] == 0.0
    assert ServedPacking(counter, 1.0).kept(group, pool, 5) == []  # the question alone fills the prompt
    with pytest.raises(ValueError):
        ServedPacking(counter, 1.5)


def test_served_packing_squeezes_excerpts_with_the_write_paths_word_scores():
    from lightmem.models.tokens import WhitespaceTokenCounter
    from lightmem.training.ranker import ServedPacking

    class LengthScorer:  # longer words score higher; counts its calls
        calls = 0

        def word_scores_many(self, docs):
            LengthScorer.calls += 1
            return [[len(w) / 20 for w in d] for d in docs]

    sentence = "Yesterday evening Caroline finally adopted a playful little puppy named Rexford."
    texts = [f"[2023-05-0{i + 1}] Ann: {sentence} The drive home was long." for i in range(6)]
    group = {"query": "Which puppy did Caroline adopt?", "texts": texts, "tokens": [len(t.split()) - 1 for t in texts],
             "provenance": [[f"D1:{i}"] for i in range(6)], "evidence": ["D1:5"], "category": 1, "labels": [0] * 5 + [1]}
    counter, pool = WhitespaceTokenCounter(), list(range(6))
    scorer = LengthScorer()
    squeezed = ServedPacking(counter, 0.5, "never", excerpt_rate=0.5, word_scorer=scorer)
    items = squeezed.items(group, pool)
    assert all(m.metadata.get("keep") for m in items) and LengthScorer.calls == 1
    squeezed.items(group, pool)
    assert LengthScorer.calls == 1  # each text is scored once
    plain = ServedPacking(counter, 0.5, "never", excerpt_rate=1.0, word_scorer=scorer)
    assert not any(m.metadata for m in plain.items(group, pool))  # unsqueezed: no word scores asked for
    assert ServedPacking(counter, 0.0, "never", excerpt_rate=0.5, word_scorer=scorer).kept(group, pool, 60) == []
    with pytest.raises(ValueError, match="excerpt_rate"):
        ServedPacking(counter, 0.5, excerpt_rate=0.0)


def test_the_groups_cache_key_ignores_packing_only_settings_and_follows_the_candidates():
    import dataclasses

    from conftest import compose

    from lightmem.retrieval.engine import PACKING_SETTINGS
    from lightmem.retrieval.spec import PackingSpec
    from lightmem.training.ranker import groups_key

    assert set(PACKING_SETTINGS) <= {f.name for f in dataclasses.fields(PackingSpec)}
    key = lambda *o: groups_key(compose("train_ranker", list(o)), "an-embedder")  # noqa: E731
    base = key()
    assert key("retrieval.anchor_dates=never", "retrieval.whole_share=0.5", "retrieval.session_spread=1") == base
    assert key("retrieval.candidate_factor=4") != base and key("retrieval.hop_seeds=3") != base
    assert groups_key(compose("train_ranker", []), "another-embedder") != base


def test_each_ranker_kind_trains_into_its_own_folders():
    """`model=trees` alone must not overwrite the linear ranker that SLM-2 is stacked on."""
    from conftest import compose

    linear, trees = compose("train_ranker", []), compose("train_ranker", ["model=trees"])
    assert (linear.out_dir, linear.export_dir) == ("checkpoints/runs/ranker", "checkpoints/ranker")
    assert (trees.out_dir, trees.export_dir) == ("checkpoints/runs/ranker_trees", "checkpoints/ranker_trees")
    assert compose("train_ranker", ["model=trees", "export_dir=null"]).export_dir is None
    assert compose("train_slm", []).export_dir == "checkpoints/slm"
