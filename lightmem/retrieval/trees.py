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
    """The trees of a ``"kind": "trees"`` model as one flat node array per field, each tree's children indexed into
    it, with every tree's root and the depth to walk: built once, so a query only walks them.

    Raises:
        ValueError: the model has no trees, or a tree's arrays disagree in length or point outside the tree.
    """
    trees = model.get("trees") or []
    if not trees:
        raise ValueError("the tree model has no trees")
    roots = []
    out: dict[str, list] = {f: [] for f in TREE_FIELDS}
    for i, t in enumerate(trees):
        n = len(t["value"])
        if any(len(t[f]) != n for f in TREE_FIELDS):
            raise ValueError(f"tree {i}: its node arrays differ in length")
        leaf = np.asarray(t["leaf"], bool)
        children = np.concatenate([np.asarray(t["left"])[~leaf], np.asarray(t["right"])[~leaf]])
        if children.size and (children.min() <= 0 or children.max() >= n):
            raise ValueError(f"tree {i}: a child index points outside the tree")
        base = len(out["value"])
        roots.append(base)
        for f in TREE_FIELDS:
            out[f].extend(np.asarray(t[f]) + base if f in ("left", "right") else t[f])
    types = {"feature": np.int64, "left": np.int64, "right": np.int64, "leaf": bool, "missing_left": bool}
    arrays = {f: np.asarray(v, dtype=types.get(f, np.float64)) for f, v in out.items()}
    arrays["roots"] = np.asarray(roots, np.int64)
    arrays["depth"] = np.asarray(int(model.get("max_depth") or max(len(t["value"]) for t in trees)))
    return arrays


def tree_scores(features: np.ndarray, arrays: Mapping[str, np.ndarray], baseline: float) -> np.ndarray:
    """Logits of the ensemble for ``features`` ``[n, n_features]``: ``baseline`` plus the leaf value each tree
    sends every row to (``x[feature] <= threshold`` goes left; a NaN goes where the tree sent missing values)."""
    x = np.ascontiguousarray(features, dtype=np.float64)
    n, n_features = x.shape
    x_flat = x.ravel()
    node = np.repeat(arrays["roots"][:, None], n, axis=1)  # [trees, rows]: each tree's root for every row
    row = np.broadcast_to(np.arange(n, dtype=np.int64) * n_features, node.shape)
    for _ in range(int(arrays["depth"])):
        active = ~arrays["leaf"][node]
        if not active.any():
            break
        at = node[active]
        value = x_flat[row[active] + arrays["feature"][at]]
        left = np.where(np.isnan(value), arrays["missing_left"][at], value <= arrays["threshold"][at])
        node[active] = np.where(left, arrays["left"][at], arrays["right"][at])
    return baseline + arrays["value"][node].sum(0)


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
