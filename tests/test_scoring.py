"""Scoring functions against brute-force references on random inputs."""
from __future__ import annotations

import math

import numpy as np
import pytest

from lightmem.retrieval import scoring
from lightmem.retrieval.composer import pack_by_budget

rng = np.random.default_rng(0)


def test_cosine_matches_bruteforce():
    q, m = rng.normal(size=16), rng.normal(size=(50, 16))
    m[3] = 0.0
    ref = [0.0 if not row.any() else float(q @ row / (np.linalg.norm(q) * np.linalg.norm(row))) for row in m]
    np.testing.assert_allclose(scoring.cosine(q, m), ref, atol=1e-12)


def test_normalize_max_scales_to_unit_and_handles_zeros():
    s = rng.uniform(0, 7, size=20)
    out = scoring.normalize_max(s)
    assert out.max() == pytest.approx(1.0)
    np.testing.assert_allclose(out, s / s.max())
    assert not scoring.normalize_max(np.zeros(4)).any()


def test_recency_decay_halves_per_half_life_and_clamps_future():
    now = 1_000_000.0
    times = np.array([now, now - 7 * 86400, now - 14 * 86400, now + 86400])
    np.testing.assert_allclose(scoring.recency_decay(times, now, 7.0), [1.0, 0.5, 0.25, 1.0])
    with pytest.raises(ValueError):
        scoring.recency_decay(times, now, 0)


def test_rrf_matches_bruteforce():
    rankings = [list(rng.permutation(30)[:15]) for _ in range(3)]
    weights = [1.0, 0.5, 2.0]
    got = scoring.reciprocal_rank_fusion(rankings, k=60, weights=weights)
    for doc in range(30):
        ref = sum(w / (60 + r.index(doc) + 1) for r, w in zip(rankings, weights) if doc in r)
        assert got.get(doc, 0.0) == pytest.approx(ref)


def test_weighted_fusion_is_the_linear_combination():
    d, l, m, r = (rng.uniform(size=10) for _ in range(4))
    got = scoring.weighted_fusion(d, l, m, r, 0.7, 0.2, 0.05, 0.05)
    np.testing.assert_allclose(got, 0.7 * d + 0.2 * l + 0.05 * m + 0.05 * r)
    np.testing.assert_allclose(scoring.weighted_fusion(d, l), d + l)


def test_metadata_match_indicator():
    tags = [frozenset({"Paris", "travel"}), frozenset(), frozenset({"work"})]
    np.testing.assert_array_equal(scoring.metadata_match(tags, {"paris"}), [1, 0, 0])
    np.testing.assert_array_equal(scoring.metadata_match(tags, None), [0, 0, 0])


def test_retention_prefers_recent_used_useful_items():
    now = 100 * 86400.0
    last = np.array([now, now - 60 * 86400, now, now])
    count = np.array([0, 0, 10, 0])
    util = np.array([1.0, 1.0, 1.0, 0.1])
    from lightmem.stores.rows import retention_score

    s = retention_score(last, count, util, now, 30.0)
    assert s[2] > s[0] > s[1] and s[0] > s[3]
    assert s[0] == pytest.approx(1.0) and s[2] == pytest.approx(1 + math.log(11))


def test_pack_by_budget_matches_bruteforce_greedy():
    for _ in range(200):
        costs = rng.integers(0, 50, size=rng.integers(0, 12)).tolist()
        budget = int(rng.integers(0, 120))
        kept, used = [], 0
        for i, c in enumerate(costs):
            if used + c <= budget:
                kept.append(i)
                used += c
        assert pack_by_budget(costs, budget) == kept
        assert sum(costs[i] for i in kept) <= budget
