"""The Stage-2 ranker's logits: a linear model, or a boosted tree ensemble kept as plain arrays.

``train/ranker.py model=trees`` fits scikit-learn's histogram gradient boosting on the candidate features
(``retrieval/features.py``) and writes each tree as parallel node arrays (``ranker.json``, ``"kind": "trees"``).
Serving needs numpy alone: every tree is walked at once, one level per step, for all candidates of a query.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from lightmem.retrieval.features import linear_scores

TREE_FIELDS = ("feature", "threshold", "left", "right", "leaf", "missing_left", "value")


def tree_arrays(model: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The trees of a ``"kind": "trees"`` model stacked into ``[n_trees, max_nodes]`` arrays (padded with leaves
    of value 0), with the depth to walk; checks that every child index points inside its tree.

    Raises:
        ValueError: the model has no trees, or a tree's arrays disagree in length or point outside the tree.
    """
    trees = model.get("trees") or []
    if not trees:
        raise ValueError("the tree model has no trees")
    width = max(len(t["value"]) for t in trees)
    out = {"feature": np.zeros((len(trees), width), np.int64), "threshold": np.zeros((len(trees), width)),
           "left": np.zeros((len(trees), width), np.int64), "right": np.zeros((len(trees), width), np.int64),
           "leaf": np.ones((len(trees), width), bool), "missing_left": np.zeros((len(trees), width), bool),
           "value": np.zeros((len(trees), width))}
    for i, t in enumerate(trees):
        n = len(t["value"])
        if any(len(t[f]) != n for f in TREE_FIELDS):
            raise ValueError(f"tree {i}: its node arrays differ in length")
        for f in TREE_FIELDS:
            out[f][i, :n] = t[f]
        inner = ~out["leaf"][i, :n]
        children = np.concatenate([out["left"][i, :n][inner], out["right"][i, :n][inner]])
        if children.size and (children.min() <= 0 or children.max() >= n):
            raise ValueError(f"tree {i}: a child index points outside the tree")
    out["depth"] = np.asarray(int(model.get("max_depth") or width))
    return out


def tree_scores(features: np.ndarray, arrays: Mapping[str, np.ndarray], baseline: float) -> np.ndarray:
    """Logits of the ensemble for ``features`` ``[n, n_features]``: ``baseline`` plus the leaf value each tree
    sends every row to (``x[feature] <= threshold`` goes left; a NaN goes where the tree sent missing values)."""
    x = np.ascontiguousarray(features, dtype=np.float64)
    n, n_features = x.shape
    n_trees, width = arrays["value"].shape
    flat = {f: arrays[f].ravel() for f in TREE_FIELDS}
    offset = (np.arange(n_trees, dtype=np.int64) * width)[:, None]
    cells = (np.arange(n, dtype=np.int64) * n_features)[None, :]
    x_flat = x.ravel()
    node = np.broadcast_to(offset, (n_trees, n)).copy()  # each tree's root, one column per row of x
    for _ in range(int(arrays["depth"])):
        active = ~flat["leaf"][node]
        if not active.any():
            break
        at = node[active]
        value = x_flat[cells.repeat(n_trees, 0)[active] + flat["feature"][at]]
        left = np.where(np.isnan(value), flat["missing_left"][at], value <= flat["threshold"][at])
        base = at - at % width
        node[active] = base + np.where(left, flat["left"][at], flat["right"][at])
    return baseline + flat["value"][node].sum(0)


def from_sklearn(model: Any) -> dict[str, Any]:
    """The trees of a fitted binary ``HistGradientBoostingClassifier`` as ``ranker.json`` stores them; their logits
    equal the classifier's ``decision_function``."""
    trees, depth = [], 0
    for (predictor,) in model._predictors:  # one predictor per boosting round (binary: one tree each)
        nodes = predictor.nodes
        trees.append({"feature": nodes["feature_idx"].astype(int).tolist(),
                      "threshold": nodes["num_threshold"].astype(float).tolist(),
                      "left": nodes["left"].astype(int).tolist(), "right": nodes["right"].astype(int).tolist(),
                      "leaf": nodes["is_leaf"].astype(bool).tolist(),
                      "missing_left": nodes["missing_go_to_left"].astype(bool).tolist(),
                      "value": nodes["value"].astype(float).tolist()})
        depth = max(depth, int(nodes["depth"].max()) + 1)
    return {"baseline": float(np.ravel(model._baseline_prediction)[0]), "max_depth": depth, "trees": trees}


RANKER_KINDS = ("linear", "trees")


def ranker_scorer(model: dict) -> Callable[[np.ndarray], np.ndarray]:
    """The logits function of a ``ranker.json`` model: ``"kind": "linear"`` (the default when absent; standardised
    weights, ``features.linear_scores``) or ``"trees"`` (the ensemble above). Built once per model: the trees are
    stacked into arrays here, not per query.

    Raises:
        ValueError: an unknown kind.
    """
    kind = model.get("kind", "linear")
    if kind == "linear":
        mean, scale, coef = (np.asarray(model[k], dtype=np.float64) for k in ("mean", "scale", "coef"))
        intercept = float(model["intercept"])
        return lambda x: linear_scores(np.asarray(x, dtype=np.float64), mean, scale, coef, intercept)
    if kind == "trees":
        arrays, baseline = tree_arrays(model), float(model["baseline"])
        return lambda x: tree_scores(x, arrays, baseline)
    raise ValueError(f"unknown ranker kind {kind!r}; expected one of {RANKER_KINDS}")
