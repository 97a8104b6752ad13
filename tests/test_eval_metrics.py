"""The suite's metrics and statistics against hand-computed cases."""
from __future__ import annotations

import math

import pytest

from lightmem.evaluation.harnesses.qa import (
    clean_answer,
    locomo_scores,
    longmemeval_judge_prompt,
    parse_locomo_label,
    parse_yes_no,
)
from lightmem.metrics.answers import answer_coverage, bleu1, content_words, rouge_l
from lightmem.metrics.ranking import dedupe, ndcg_at_k, recall_at_k
from lightmem.metrics.stats import mean_std, paired_bootstrap


def test_answer_coverage_counts_the_gold_answers_content_words_in_the_context():
    # gold content words {7, may, 2023}: "07" is the number 7, "may" is absent
    assert answer_coverage("7 May 2023", "- [2023-05-07] Caroline: I went to the support group") == pytest.approx(2 / 3)
    assert answer_coverage("painting sunsets", "- [knowledge] [PERSON] likes to paint a sunset") == 1.0  # stems match
    assert answer_coverage("The", "anything") is None  # nothing but a stop word: not scorable
    assert answer_coverage(2022, "in 2022 she moved") == 1.0
    assert content_words("Went to the Museum, twice!") == {"went", "museum", "twice"}


def test_bleu1_brevity_penalty_and_clipping():
    # 3 of 3 predicted unigrams match; the prediction is half the reference: BP = exp(1 - 6/3)
    assert bleu1("the cat sat", "the cat sat on the mat") == pytest.approx(math.exp(-1))
    # "the" counted at most as often as in the reference: 1 of 3; longer than the reference: BP = 1
    assert bleu1("the the the", "the cat") == pytest.approx(1 / 3)
    assert bleu1("", "anything") == 0.0 and bleu1("Biscuit!", "biscuit") == 1.0


def test_rouge_l_is_the_lcs_f1():
    # LCS of (a b c d) and (a c d e) is (a c d): P = R = 3/4
    assert rouge_l("a b c d", "a c d e") == pytest.approx(0.75)
    # LCS 2 ("x z"), P = 2/2, R = 2/4 -> F = 2/3
    assert rouge_l("x z", "x y z w") == pytest.approx(2 / 3)
    assert rouge_l("q", "r") == 0.0 and rouge_l("", "r") == 0.0


def test_ranked_recall_and_ndcg():
    assert recall_at_k(["s1", "s2", "s3"], {"s2", "s4"}, 2) == (1.0, 0.0)
    assert recall_at_k(["s1", "s2", "s3"], {"s1", "s3"}, 3) == (1.0, 1.0)
    assert recall_at_k(["s1"], {"s9"}, 5) == (0.0, 0.0)
    # one gold id at rank 2: (1/log2 3) / 1
    assert ndcg_at_k(["a", "b", "c"], {"b"}, 3) == pytest.approx(1 / math.log2(3))
    # gold at ranks 1 and 3: (1 + 1/2) / (1 + 1/log2 3)
    assert ndcg_at_k(["a", "b", "c"], {"a", "c"}, 3) == pytest.approx(1.5 / (1 + 1 / math.log2(3)))
    assert ndcg_at_k(["a", "b"], {"a"}, 1) == 1.0
    with pytest.raises(ValueError):
        recall_at_k(["a"], set(), 1)
    with pytest.raises(ValueError):
        ndcg_at_k(["a"], {"a"}, 0)
    assert dedupe(["s1", "s2", "s1", "s3", "s2"]) == ["s1", "s2", "s3"]


def test_mean_std_over_seeds():
    ms = mean_std([1.0, 2.0, 3.0])
    assert (ms.mean, ms.std, ms.n) == (2.0, 1.0, 3)  # sample std
    assert mean_std([0.5]).std == 0.0 and str(mean_std([0.5])) == "0.500"
    assert mean_std([1.0, float("nan"), 3.0]).n == 2
    assert mean_std([]).n == 0


def test_paired_bootstrap_cases():
    same = paired_bootstrap([0.2, 0.4, 0.9], [0.2, 0.4, 0.9])
    assert (same.diff, same.ci_low, same.ci_high, same.p_value) == (0.0, 0.0, 0.0, 1.0)
    better = paired_bootstrap([1.0] * 20, [0.0] * 20, resamples=200)
    assert (better.diff, better.ci_low, better.ci_high, better.p_value) == (1.0, 1.0, 1.0, 0.0)
    # half the questions gain 1, half lose 0: mean diff 0.5, every resample is >= 0
    mixed = paired_bootstrap([1, 0, 1, 0] * 10, [0, 0, 0, 0] * 10, resamples=1000, seed=3)
    assert mixed.diff == 0.5 and 0.0 < mixed.ci_low < 0.5 < mixed.ci_high <= 1.0 and mixed.p_value < 0.05
    assert paired_bootstrap([1, 0, 1, 0] * 10, [0] * 40, seed=3) == mixed  # the seed reproduces it
    # a noisy zero-mean difference is not significant
    noise = paired_bootstrap([1, 0] * 20, [0, 1] * 20, seed=1)
    assert noise.diff == 0.0 and noise.p_value == 1.0
    with pytest.raises(ValueError):
        paired_bootstrap([1, 2], [1])
    with pytest.raises(ValueError):
        paired_bootstrap([], [])


def test_judge_outputs_are_parsed_or_left_unscored():
    assert parse_locomo_label('The answer names the same dog. {"label": "CORRECT"}') == 1.0
    assert parse_locomo_label("It refers to another city, so WRONG") == 0.0
    assert parse_locomo_label('{"label": "maybe"} hmm') is None
    assert parse_yes_no("Yes.") == 1.0 and parse_yes_no("no, it does not") == 0.0 and parse_yes_no("unsure") is None


def test_answers_are_cleaned_and_scored_per_category():
    assert clean_answer("Answer: Biscuit\nsecond line") == "Biscuit"
    assert clean_answer('  "Lisbon"  ') == "Lisbon"
    assert locomo_scores("Not mentioned", "pizza", 5)["f1"] == 1.0
    s = locomo_scores("golden retriever", "golden retriever, running shoes", 1)
    assert s["f1"] == pytest.approx(0.5)  # sub-answers: 1.0 and 0.0
    assert "off-by-one" in longmemeval_judge_prompt("temporal-reasoning")
    assert "unanswerable" in longmemeval_judge_prompt("multi-session", "q12_abs")
    assert "Rubric" in longmemeval_judge_prompt("single-session-preference")
