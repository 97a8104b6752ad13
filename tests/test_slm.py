"""SLM-2 stacked on the ranker: the stacked order, the choice of alpha and N, and the selector that serves it."""
from __future__ import annotations

import json
import random

import pytest
from conftest import ROOT

from lightmem.training import slm
from lightmem.training.ranker import evaluate_orders

SLM_CKPT = ROOT / "checkpoints" / "slm"


def _group(n=6, evidence=(4,), tokens=10, category=1):
    """n candidates, the ranker prefers lower indices; the evidence sits at ``evidence``."""
    return {"query": "q", "texts": [f"t{i}" for i in range(n)], "labels": [int(i in evidence) for i in range(n)],
            "provenance": [[str(i)] for i in range(n)], "tokens": [tokens] * n, "evidence": [str(e) for e in evidence],
            "category": category, "r": [float(n - i) for i in range(n)], "order": list(range(n))}


def test_stacked_order_reorders_only_the_top_n():
    g = _group()
    ce = [0.0, 0.0, 0.0, 9.0]  # the cross-encoder likes the ranker's 4th
    assert slm.stacked_order(g["r"], g["order"], ce, alpha=1.0, n=4) == [3, 0, 1, 2, 4, 5]
    assert slm.stacked_order(g["r"], g["order"], ce, alpha=0.0, n=4) == g["order"]  # alpha 0: the ranker
    assert slm.stacked_order(g["r"], g["order"], [], alpha=5.0, n=0) == g["order"]  # N 0: the ranker
    assert sorted(slm.stacked_order(g["r"], g["order"], [3, 2, 1, 0, 5, 4], 2.0, 6)) == list(range(6))  # a permutation


def test_fit_stack_takes_the_gain_and_prefers_the_cheaper_tie():
    # A budget of 3 candidates; the evidence at the ranker's position 4 enters only when the cross-encoder lifts it.
    groups = [_group() for _ in range(5)]
    useful = [[0.0, 0.0, 0.0, 0.0, 2.5] for _ in groups]
    best = slm.fit_stack(groups, useful, alphas=[0.5, 1.0, 4.0], ns=[0, 3, 5], k=3, budget=30)
    assert best["top_n"] == 5 and best["fit_recall_all@budget"] == 1.0
    assert best["alpha"] == 1.0  # 2 + 0.5 * 2.5 stays below the third (4); 2 + 2.5 passes it: the smallest alpha that pays
    assert len(best["grid"]) == 9
    noise = [[random.Random(i).random() * 1e-3 for _ in range(5)] for i in range(5)]
    flat = slm.fit_stack(groups, noise, alphas=[0.5, 1.0], ns=[0, 3, 5], k=3, budget=30)
    assert flat["top_n"] == 0 and flat["alpha"] == 0.5  # no gain: the ranker alone, the cheapest setting
    with pytest.raises(ValueError, match="held-apart"):
        slm.fit_stack([], [], alphas=[1.0], ns=[0], k=3, budget=30)


def test_paired_gain_is_new_minus_base_with_a_ci():
    groups = [_group() for _ in range(8)]
    base = [g["order"] for g in groups]
    new = [[4, 0, 1, 2, 3, 5] for _ in groups]
    gain = slm.paired_gain(groups, base, new, k=3, budget=30)
    assert gain["diff"] == 1.0 and gain["ci_low"] == 1.0 and gain["n"] == 8
    assert evaluate_orders(groups, new, 3, 30)["category_1/recall_all@budget"] == 1.0


def test_hard_negatives_come_from_the_ranker_top_m():
    g = _group(n=40, evidence=(30,))
    task = slm.SLMTask(top_m=10, group_size=6, max_pos=2)
    texts, labels = slm.sample_hard(g, task, random.Random(0))
    assert labels.count(1) == 1 and len(texts) == 6
    assert all(int(t[1:]) < 10 for t, y in zip(texts, labels) if not y)  # negatives only from the top 10
    assert "t30" in texts  # the positive, wherever Stage 1 ranked it


def test_with_ranker_adds_the_linear_order_without_touching_the_input():
    from lightmem.retrieval.features import FEATURES

    w = {"features": list(FEATURES), "mean": [0.0] * len(FEATURES), "scale": [1.0] * len(FEATURES),
         "coef": [1.0] + [0.0] * (len(FEATURES) - 1), "intercept": 0.0}
    g = {"features": [[0.1] + [0.0] * (len(FEATURES) - 1), [0.9] + [0.0] * (len(FEATURES) - 1)]}
    out = slm.with_ranker([g], w)
    assert out[0]["order"] == [1, 0] and out[0]["r"] == pytest.approx([0.1, 0.9]) and "order" not in g


def test_selector_without_a_stack_file_says_how_to_train_one(tmp_path):
    from lightmem.roles.selector import SLMSelector

    with pytest.raises(FileNotFoundError, match="train/slm.py"):
        SLMSelector(str(tmp_path), str(ROOT / "checkpoints" / "ranker"))


def _hits():
    from lightmem.types import Hit, MemoryItem

    texts = ["Caroline: I went to the LGBTQ support group yesterday.", "Melanie: I painted a lake at sunrise.",
             "Caroline: The adoption agency called me back!", "Melanie: We went camping with the kids.",
             "Caroline: I'm reading a book about transgender stories.", "Melanie: Pottery class was fun today."]
    hits = []
    for i, t in enumerate(texts):
        item = MemoryItem(id=f"m{i}", user_id="u", text=t, provenance=[str(i)], created_at=0, event_time=1_683_500_000 + i,
                          last_access=0, n_tokens=12, metadata={"session_id": "s1", "speaker": t.split(":")[0]})
        hits.append(Hit(item, {"dense": 0.5 - i / 20, "bm25_norm": 0.3}, 1.0 - i / 10, row=i))
    return hits


def test_committed_slm_selector_reorders_only_the_ranker_top_n():
    from lightmem.retrieval.stage2 import LearnedRanker
    from lightmem.roles.selector import SLMSelector
    from lightmem.types import Filters, HypotheticalQuery, RetrievalPlan

    ranker_dir = str(ROOT / "checkpoints" / "ranker")
    stack = json.loads((SLM_CKPT / "stack.json").read_text())
    assert stack["num_layers"] >= 1 and stack["top_n"] >= 0 and stack["max_length"] > 0
    assert {p.name for p in SLM_CKPT.iterdir()} == {"adapter_config.json", "adapter_model.safetensors", "stack.json", "card.json",
                                                    "README.md"}
    card = json.loads((SLM_CKPT / "card.json").read_text())
    assert not card["commit"].endswith("+dirty") and card["metrics"]["test/longmemeval/gain/n"] > 0
    q = "What activities does Melanie do with her family?"
    plan = RetrievalPlan(q, (HypotheticalQuery(q),), Filters(), 6)
    ranked = [h.item.id for h in LearnedRanker(ranker_dir).select(plan, _hits(), 6)]
    sel = SLMSelector(str(SLM_CKPT), ranker_dir, top_n=3, alpha=100.0)
    got = sel.select(plan, _hits(), 6)
    assert [h.item.id for h in got[3:]] == ranked[3:]  # below N: the ranker's order
    assert {h.item.id for h in got[:3]} == set(ranked[:3])  # the top N among themselves
    assert all("slm" in h.scores for h in got[:3]) and not any("slm" in h.scores for h in got[3:])
    stacked = [h.scores["ranker"] + 100.0 * h.scores["slm"] for h in got[:3]]
    assert stacked == sorted(stacked, reverse=True)  # ranker logit + alpha x cross-encoder logit, best first
    assert [h.item.id for h in SLMSelector(str(SLM_CKPT), ranker_dir, top_n=0).select(plan, _hits(), 4)] == ranked[:4]
    assert sel.select(plan, [], 3) == []
