"""The transfer share: the pure statistic and the three-run reader behind experiments/transfer/."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from experiments.transfer.share import read_scores, transfer_share
from lightmem.metrics.stats import share_bootstrap


def test_share_is_the_part_gain_over_the_full_gain():
    rng = np.random.default_rng(0)
    base = rng.integers(0, 2, 300).astype(float)
    full = np.maximum(base, rng.random(300) < 0.5)  # gains on about half of the misses
    same = share_bootstrap(base, full, full)
    assert same.share == pytest.approx(1.0) and same.ci_low == pytest.approx(1.0) and same.ci_high == pytest.approx(1.0)
    none = share_bootstrap(base, base, full)
    assert none.share == 0.0 and none.gain_part == 0.0 and none.gain_full > 0
    half = np.where(np.arange(300) % 2 == 0, full, base)  # the part keeps every other question's gain
    res = share_bootstrap(base, half, full, resamples=500)
    assert res.share == pytest.approx((half - base).mean() / (full - base).mean())
    assert res.ci_low < res.share < res.ci_high and res.n == 300 and res.resamples == 500


def test_share_is_undefined_when_the_reference_gains_nothing():
    res = share_bootstrap([0.0, 1.0], [1.0, 1.0], [0.0, 1.0])
    assert math.isnan(res.share) and math.isnan(res.ci_low) and math.isnan(res.ci_high)


@pytest.mark.parametrize("bad", [([1.0], [1.0, 0.0], [1.0]), ([], [], [])])
def test_share_needs_paired_nonempty_scores(bad):
    with pytest.raises(ValueError):
        share_bootstrap(*bad)


def _locomo_run(path, hits, coverage):
    path.mkdir()
    rows = [{"conv_id": "c", "category": 1 + i % 4, "question": f"q{i}", "recall": {"@budget": {"all": h}}, "coverage": c}
            for i, (h, c) in enumerate(zip(hits, coverage))]
    rows.append({"conv_id": "c", "category": 5, "question": "adversarial", "recall": {"@budget": {"all": 0.0}}, "coverage": None})
    (path / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_three_locomo_runs_give_the_share_and_the_cli_prints_it(tmp_path, capsys):
    base = _locomo_run(tmp_path / "base", [0, 0, 0, 0, 1, 1], [0.0, 0.5, 0.0, 0.0, 1.0, 1.0])
    part = _locomo_run(tmp_path / "part", [1, 0, 0, 0, 1, 1], [0.5, 0.5, 0.0, 0.0, 1.0, 1.0])
    full = _locomo_run(tmp_path / "full", [1, 1, 0, 0, 1, 1], [1.0, 0.5, 0.0, 0.0, 1.0, 1.0])
    assert len(read_scores(base, "recall")) == 6  # the adversarial question is not scored
    res, means = transfer_share(base, part, full, "recall")
    assert res.share == pytest.approx(0.5) and means == pytest.approx({"base": 2 / 6, "part": 3 / 6, "full": 4 / 6})
    from experiments.transfer import run as transfer

    assert transfer.main([str(base), str(part), str(full), "--json", str(tmp_path / "share.json")]) == 0
    out = capsys.readouterr().out
    assert "| recall | 6 |" in out and "0.50 [" in out
    assert json.loads((tmp_path / "share.json").read_text())["coverage"]["share"] == pytest.approx(0.5)


def test_longmemeval_runs_leave_out_questions_without_evidence(tmp_path):
    def run(name, recalls):
        d = tmp_path / name
        d.mkdir()
        d.joinpath("questions.jsonl").write_text("".join(
            json.dumps({"question_id": f"q{i}", "question": "?", "metrics": {"turn_recall_all@budget": r, "answer_coverage@budget": 0.5}}) + "\n"
            for i, r in enumerate(recalls)))
        return d

    base, part, full = run("b", [0.0, 0.0, float("nan")]), run("p", [1.0, 0.0, float("nan")]), run("f", [1.0, 1.0, float("nan")])
    res, _ = transfer_share(base, part, full, "recall")
    assert res.n == 2 and res.share == pytest.approx(0.5)


def test_runs_over_different_questions_or_a_missing_folder_are_refused(tmp_path, capsys):
    a = _locomo_run(tmp_path / "a", [0, 1], [0.0, 1.0])
    b = _locomo_run(tmp_path / "b", [0, 1, 1], [0.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="different questions"):
        transfer_share(a, a, b)
    from experiments.transfer import run as transfer

    assert transfer.main([str(a), str(a), str(tmp_path / "nowhere")]) == 2
    assert "questions.jsonl" in capsys.readouterr().err


def test_a_question_asked_twice_in_a_conversation_counts_twice(tmp_path):
    def run(name, hits):
        d = tmp_path / name
        d.mkdir()
        d.joinpath("questions.jsonl").write_text("".join(
            json.dumps({"conv_id": "c", "category": 4, "question": "Where does Ana live?", "recall": {"@budget": {"all": h}},
                        "coverage": h}) + "\n" for h in hits))
        return d

    res, means = transfer_share(run("b", [0.0, 0.0]), run("p", [1.0, 0.0]), run("f", [1.0, 1.0]), "recall")
    assert res.n == 2 and res.share == pytest.approx(0.5) and means["full"] == 1.0
