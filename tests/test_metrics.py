"""Evaluation metrics on hand-computed cases."""
from __future__ import annotations

import pytest

from lightmem.metrics.answers import locomo_f1, normalize_answer, token_f1
from lightmem.metrics.evidence import evidence_recall, normalize_evidence
from lightmem.metrics.stats import percentile


def test_normalize_answer_follows_the_official_rules():
    assert normalize_answer("The cat, and a Dog!") == "cat dog"
    assert normalize_answer("  7 May   2023. ") == "7 may 2023"


def test_token_f1_known_values():
    assert token_f1("7 May 2023", "7 May 2023") == 1.0
    # pred {on, 7, may, 2023}, gold {7, may, 2023}: p = 3/4, r = 1 -> 6/7
    assert token_f1("on 7 May 2023", "7 May 2023") == pytest.approx(6 / 7)
    assert token_f1("running", "runs") == 1.0  # Porter: run / run
    assert token_f1("nothing", "7 May") == 0.0
    assert token_f1("", "x") == 0.0


def test_category_rules():
    # 1: mean over gold sub-answers of the best predicted part
    assert locomo_f1("golden retriever, shoes", "golden retriever, running shoes", 1) == pytest.approx((1 + 2 / 3) / 2)
    # 3: only the gold before ';'
    assert locomo_f1("violin", "violin; music", 3) == 1.0
    assert locomo_f1("music", "violin; music", 3) == 0.0
    # 2 and 4: plain token F1; int answers are stringified
    assert locomo_f1("2022", 2022, 2) == 1.0
    assert locomo_f1("Biscuit", "Biscuit", 4) == 1.0
    # 5: abstention phrases
    assert locomo_f1("No information available.", None, 5) == 1.0
    assert locomo_f1("That was not mentioned", None, 5) == 1.0
    assert locomo_f1("pizza", None, 5) == 0.0
    with pytest.raises(ValueError):
        locomo_f1("x", "y", 9)


def test_evidence_recall_all_any_mean():
    r = evidence_recall([["D1:1"], ["D2:3", "D2:4"], ["D9:9"]], ["D1:1", "D2:3", "D3:1"])
    assert (r.all, r.any, r.mean) == (0.0, 1.0, pytest.approx(2 / 3))
    r = evidence_recall([["D1:1", "D3:1"], ["D2:3"]], ["D1:1", "D2:3", "D3:1"])
    assert (r.all, r.any, r.mean) == (1.0, 1.0, 1.0)
    r = evidence_recall([], ["D1:1"])
    assert (r.all, r.any, r.mean) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError):
        evidence_recall([["D1:1"]], [])


def test_normalize_evidence_repairs_locomo_quirks():
    assert normalize_evidence(["D8:6; D9:17"]) == ["D8:6", "D9:17"]
    assert normalize_evidence(["D:11:26", "D30:05", "D"]) == ["D11:26", "D30:5"]
    assert normalize_evidence(["answer_abc:3", "D1:1", "D1:1"]) == ["answer_abc:3", "D1:1"]


def test_percentile():
    assert percentile([1, 2, 3, 4, 5], 50) == 3
    assert percentile([10.0] * 3 + [100.0], 95) == pytest.approx(86.5)


def test_evidence_precision_counts_items_citing_evidence():
    from lightmem.metrics.evidence import evidence_precision

    assert evidence_precision([["D1:1"], ["D1:2", "D1:3"], ["D2:1"]], ["D1:3", "D9:9"]) == pytest.approx(1 / 3)
    assert evidence_precision([], ["D1:1"]) == 0.0
