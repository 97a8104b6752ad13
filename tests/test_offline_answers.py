"""Prompts recorded by ``llm=record``, answered elsewhere, scored back onto the run."""
from __future__ import annotations

import json

import pytest

from lightmem.evaluation.offline_answers import answers_by_id, compare, score_locomo_run, summarize
from lightmem.llm.recorder import PromptRecorder


def test_the_recorder_writes_every_prompt_and_answers_with_unique_ids(tmp_path):
    rec = PromptRecorder(str(tmp_path / "sub" / "p.jsonl"), prefix="defaults:")
    first = rec.generate(["Q one", "Q two"], role="generator", max_new_tokens=32)
    second = rec.generate(["Q three"])
    assert first == ["defaults:000000x", "defaults:000001x"] and second == ["defaults:000002x"]
    rows = [json.loads(line) for line in (tmp_path / "sub" / "p.jsonl").read_text().splitlines()]
    assert [r["prompt"] for r in rows] == ["Q one", "Q two", "Q three"]
    assert rows[0] == {"id": "defaults:000000x", "role": "generator", "prompt": "Q one", "max_new_tokens": 32}
    assert rec.meter.summary()["generator"]["calls"] == 2
    PromptRecorder(str(tmp_path / "sub" / "p.jsonl"))  # a new recording starts a new file
    assert (tmp_path / "sub" / "p.jsonl").read_text() == ""


def _question(conv, text, category, answer, pid, gold_pid=None):
    q = {"conv_id": conv, "question": text, "category": category, "answer": answer, "qa": {"prediction": pid}}
    if gold_pid:
        q["controls"] = {"gold": {"qa": {"prediction": gold_pid}}}
    return q


def test_answers_are_joined_by_id_and_scored_as_the_harness_scores_a_prediction(tmp_path):
    (tmp_path / "a.jsonl").write_text(json.dumps({"id": "r:1x", "answer": "Answer: 7 May 2023\nmore"}) + "\n"
                                      + json.dumps({"id": "r:2x", "answer": "Lisbon"}) + "\n"
                                      + json.dumps({"id": "r:3x", "answer": "Porto"}) + "\n")
    answers = answers_by_id([tmp_path / "a.jsonl"])
    run = [_question("c1", "When?", 2, "7 May 2023", "r:1x", gold_pid="r:3x"), _question("c1", "Where?", 4, "Porto", "r:2x")]
    scored = score_locomo_run(run, answers)
    assert scored[("c1", "When?")]["f1"] == 1.0  # "Answer:" and the second line are cut, as clean_answer does
    assert scored[("c1", "Where?")]["f1"] == 0.0
    assert score_locomo_run(run, answers, "gold") == {("c1", "When?"): {"f1": 0.0, "bleu1": 0.0, "category": 2}}
    s = summarize(scored)
    assert s["n"] == 2 and s["f1"] == 0.5 and s["f1_by_category"] == {"2-temporal": 1.0, "4-single-hop": 0.0}
    better = {k: {**v, "f1": 1.0} for k, v in scored.items()}
    d = compare(better, scored, resamples=200)
    assert d["diff"] == 0.5 and d["n"] == 2
    with pytest.raises(KeyError, match="no answer"):
        score_locomo_run([_question("c2", "Who?", 1, "Ann", "r:9x")], answers)
    (tmp_path / "b.jsonl").write_text(json.dumps({"id": "r:1x", "answer": "another"}) + "\n")
    with pytest.raises(ValueError, match="answered twice"):
        answers_by_id([tmp_path / "a.jsonl", tmp_path / "b.jsonl"])
    with pytest.raises(ValueError, match="share no"):
        compare(scored, {})


def test_the_record_llm_config_builds_the_recorder(tmp_path):
    from conftest import ROOT
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(ROOT / "conf" / "llm" / "record.yaml")
    cfg.path = str(tmp_path / "p.jsonl")
    rec = instantiate(cfg)
    assert isinstance(rec, PromptRecorder) and rec.generate(["x"]) == ["pid000000x"]


def test_answer_prompts_joins_split_parts_and_refuses_a_file_of_another_digest(tmp_path, capsys):
    import importlib.util

    from conftest import ROOT

    spec = importlib.util.spec_from_file_location("answer_prompts", ROOT / "eval" / "answer_prompts.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    parts = tmp_path / "parts"
    parts.mkdir()
    (parts / "part01").write_bytes(b"world")
    (parts / "part00").write_bytes(b"hello ")
    assert mod.joined(parts).read_bytes() == b"hello world"  # joined in name order
    (tmp_path / "p.jsonl").write_text(json.dumps({"id": "x", "prompt": "hi"}) + "\n")
    rc = mod.main([str(tmp_path / "p.jsonl"), "--parts", str(parts), "--sha256", "0" * 64, "--out", str(tmp_path / "a.jsonl")])
    assert rc == 1 and "refused" in capsys.readouterr().err and not (tmp_path / "a.jsonl").exists()
