"""Prompts recorded by ``llm=record``, answered elsewhere, scored back onto the run."""
from __future__ import annotations

import json

import pytest

from lightmem.evaluation.reports.offline_answers import answers_by_id, compare, score_locomo_run, score_run, summarize
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
    assert score_locomo_run(run, answers, "gold") == {("c1", "When?"): {"f1": 0.0, "bleu1": 0.0, "category": "2-temporal",
                                                                         "counted": True}}
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


def test_a_longmemeval_run_is_scored_by_token_f1_over_every_question_type():
    answers = {"r:1x": "Answer: a blue bike", "r:2x": "Not mentioned.", "r:3x": "blue bike"}
    run = [{"question_id": "q1", "question_type": "multi-session", "question": "What did I buy?", "answer": "a blue bike",
            "qa": {"prediction": "r:1x"}, "controls": {"gold": {"qa": {"prediction": "r:3x"}}}},
           {"question_id": "q2", "question_type": "temporal-reasoning", "question": "When?", "answer": "in May",
            "qa": {"prediction": "r:2x"}}]
    scored = score_run(run, answers)
    assert scored["q1"]["f1"] == 1.0 and scored["q2"]["f1"] == 0.0 and all(r["counted"] for r in scored.values())
    s = summarize(scored)
    assert s["n"] == 2 and s["f1_by_category"] == {"multi-session": 1.0, "temporal-reasoning": 0.0}
    gold = score_run(run, answers, "gold")
    assert list(gold) == ["q1"] and gold["q1"]["f1"] == 1.0  # "a" is an article: the F1 drops it on both sides
    assert score_locomo_run([], answers) == {} and score_run([], answers) == {}


def test_the_record_llm_config_builds_the_recorder(tmp_path):
    from conftest import ROOT
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(ROOT / "conf" / "llm" / "record.yaml")
    cfg.path = str(tmp_path / "p.jsonl")
    rec = instantiate(cfg)
    assert isinstance(rec, PromptRecorder) and rec.generate(["x"]) == ["pid000000x"]


def test_answer_prompts_joins_split_parts_and_refuses_a_file_of_another_digest(tmp_path, capsys):
    mod = _answer_prompts()
    parts = tmp_path / "parts"
    parts.mkdir()
    (parts / "part01").write_bytes(b"world")
    (parts / "part00").write_bytes(b"hello ")
    assert mod.joined(parts).read_bytes() == b"hello world"  # joined in name order
    (tmp_path / "p.jsonl").write_text(json.dumps({"id": "x", "prompt": "hi"}) + "\n")
    rc = mod.main([str(tmp_path / "p.jsonl"), "--parts", str(parts), "--sha256", "0" * 64, "--out", str(tmp_path / "a.jsonl")])
    assert rc == 1 and "refused" in capsys.readouterr().err and not (tmp_path / "a.jsonl").exists()


def _answer_prompts():
    from conftest import entry_point

    return entry_point("answer_prompts", "tools")


def test_answer_prompts_answers_each_file_in_batches_and_writes_every_id(tmp_path):
    import torch

    class Tok:  # one token per character; the chat template wraps the user message
        pad_token_id, eos_token_id = 0, 0

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            return f"<u>{messages[0]['content']}<a>"

        def __call__(self, texts, return_tensors, padding, add_special_tokens):
            width = max(len(t) for t in texts)
            ids = torch.tensor([[0] * (width - len(t)) + [ord(c) for c in t] for t in texts])  # padded on the left
            return _Enc({"input_ids": ids, "attention_mask": (ids > 0).long()})

        def decode(self, ids, skip_special_tokens):
            return "".join(chr(int(i)) for i in ids)

    class _Enc(dict):
        def to(self, device):
            return self

    class Model:  # answers with the prompt's last character, repeated max_new_tokens times
        device = "cpu"

        def generate(self, input_ids, attention_mask, max_new_tokens, do_sample, pad_token_id):
            last = input_ids[:, -4:-3]  # the prompt's last character, before the template's "<a>"
            return torch.cat([input_ids, last.repeat(1, max_new_tokens)], dim=1)

    mod = _answer_prompts()
    rows = [{"id": f"r:{i}", "prompt": "x" * i + str(i), "max_new_tokens": 2} for i in range(5)]
    mod.answer_file(Tok(), Model(), rows, batch_size=2, out=tmp_path / "o" / "a.jsonl")
    got = [json.loads(line) for line in (tmp_path / "o" / "a.jsonl").read_text().splitlines()]
    assert [g["id"] for g in got] == [r["id"] for r in rows]  # the file's order, though batches ran longest first
    assert [g["answer"] for g in got] == [f"{i}{i}" for i in range(5)]  # each answer belongs to its own prompt
    assert mod._stem(tmp_path / "lme_val.jsonl.gz") == "lme_val"
