"""The ranker as boosted trees: the numpy walk of ``retrieval/trees.py``, the fit and the selector that loads it."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

from lightmem.retrieval.features import FEATURES
from lightmem.retrieval.stage2 import LearnedRanker, weights_digest
from lightmem.retrieval.trees import from_sklearn, ranker_scorer, tree_arrays, tree_scores
from lightmem.training.ranker import evaluate, fit_linear, fit_trees, ranker_order
from lightmem.types import Filters, Hit, HypotheticalQuery, MemoryItem, RetrievalPlan

F = {name: i for i, name in enumerate(FEATURES)}


def _xor_groups(n, rng):
    """Groups whose evidence is the candidates where exactly one of 'overlap' and 'digits' is high: no linear
    model of the features separates them, trees do."""
    out = []
    for _ in range(n):
        m = 12
        feats = np.zeros((m, len(FEATURES)))
        feats[:, F["stage1"]] = [rng.random() for _ in range(m)]
        a, b = [rng.random() > 0.5 for _ in range(m)], [rng.random() > 0.5 for _ in range(m)]
        feats[:, F["overlap"]] = [0.9 if x else 0.1 for x in a]
        feats[:, F["digits"]] = [1.0 if y else 0.0 for y in b]
        labels = [int(x != y) for x, y in zip(a, b)]
        out.append({"features": feats.tolist(), "labels": labels, "provenance": [[f"t{i}"] for i in range(m)],
                    "tokens": [30] * m, "evidence": [f"t{i}" for i in range(m) if labels[i]], "category": 1})
    return [g for g in out if g["evidence"]]


def test_the_numpy_walk_gives_the_classifiers_own_logits_missing_values_included():
    from sklearn.ensemble import HistGradientBoostingClassifier

    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 6))
    x[rng.random(x.shape) < 0.05] = np.nan  # trained with missing values: each split learns where they go
    y = ((np.nan_to_num(x[:, 0]) * np.nan_to_num(x[:, 1]) + np.nan_to_num(x[:, 2])) > 0.3).astype(int)
    model = HistGradientBoostingClassifier(max_iter=40, max_leaf_nodes=9, random_state=0).fit(x, y)
    stored = json.loads(json.dumps(from_sklearn(model)))  # as ranker.json keeps it
    test = rng.normal(size=(300, 6))
    test[rng.random(test.shape) < 0.1] = np.nan
    assert np.allclose(tree_scores(test, tree_arrays(stored), stored["baseline"]), model.decision_function(test), atol=1e-9)
    assert tree_scores(test[:0], tree_arrays(stored), stored["baseline"]).shape == (0,)


def test_a_malformed_tree_is_refused():
    tree = {"feature": [0, 0, 0], "threshold": [0.5, 0, 0], "left": [1, 0, 0], "right": [3, 0, 0],
            "leaf": [False, True, True], "missing_left": [True, False, False], "value": [0.0, -1.0, 1.0]}
    with pytest.raises(ValueError, match="outside the tree"):
        tree_arrays({"trees": [tree], "baseline": 0.0})
    with pytest.raises(ValueError, match="differ in length"):
        tree_arrays({"trees": [{**tree, "right": [2, 0]}]})
    with pytest.raises(ValueError, match="no trees"):
        tree_arrays({"trees": []})
    ok = {"trees": [{**tree, "right": [2, 0, 0]}], "baseline": 0.5, "kind": "trees"}
    assert ranker_scorer(ok)(np.array([[0.2], [0.9]])).tolist() == [-0.5, 1.5]
    with pytest.raises(ValueError, match="unknown ranker kind"):
        ranker_scorer({"kind": "forest"})


def test_trees_learn_what_a_linear_ranker_cannot():
    rng = random.Random(0)
    train, held_out = _xor_groups(60, rng), _xor_groups(40, rng)
    trees = fit_trees(train, {"max_iter": 50, "learning_rate": 0.1, "max_leaf_nodes": 7})
    assert trees["kind"] == "trees" and trees["features"] == list(FEATURES)
    assert fit_trees(train, {"max_iter": 50, "learning_rate": 0.1, "max_leaf_nodes": 7}) == trees  # seeded
    linear = fit_linear(train)
    k = 6
    assert evaluate(held_out, trees, k, 10_000)["overall/recall_all@6"] > evaluate(held_out, linear, k, 10_000)["overall/recall_all@6"]
    logits, order = ranker_order(held_out[0], ranker_scorer(trees))
    assert order == sorted(range(len(logits)), key=lambda i: (-logits[i], i))
    with pytest.raises(ValueError, match="no ranker groups"):
        fit_trees([], {})


def test_learned_ranker_serves_a_trees_checkpoint(tmp_path):
    rng = random.Random(1)
    trees = fit_trees(_xor_groups(60, rng), {"max_iter": 30, "learning_rate": 0.2, "max_leaf_nodes": 7})
    (tmp_path / "ranker.json").write_text(json.dumps(trees))
    ranker = LearnedRanker(str(tmp_path))

    def hit(text, score, row):
        item = MemoryItem(id=f"i{row}", user_id="u", text=text, provenance=[str(row)], created_at=0, event_time=0,
                          last_access=0, n_tokens=10, metadata={"session_id": "s"})
        return Hit(item, {"stage1": score}, score, row=row)

    hits = [hit("Ava: a lovely day", 0.9, 1), hit("Ava: we paid 40 dollars", 0.5, 5), hit("Ava: I adopted a cat", 0.4, 9)]
    plan = RetrievalPlan("What pet did Ava adopt?", (HypotheticalQuery("What pet did Ava adopt?"),), Filters(), 3)
    kept = ranker.select(plan, hits, 3)
    from lightmem.retrieval.features import candidate_features

    expected = tree_scores(candidate_features(plan.query, hits), tree_arrays(trees), trees["baseline"])
    assert [h.scores["ranker"] for h in kept] == pytest.approx(sorted(expected, reverse=True))
    assert weights_digest(trees) != weights_digest({**trees, "baseline": trees["baseline"] + 1.0})
