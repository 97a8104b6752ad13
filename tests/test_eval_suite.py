"""The evaluation suite's runners on tiny fixtures: LoCoMo QA, baselines, error injection,
LongMemEval, MTM growth, and the whole suite with its bootstrap tables."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, TINY_LOCOMO, compose, entry_point
from fakes import ScriptedLLM
from omegaconf import OmegaConf

from lightmem.evaluation.harnesses.baselines import FullContext
from lightmem.evaluation.harnesses.inject import NoisyController, NoisyWriter, noise_turns
from lightmem.evaluation.harnesses.longmemeval import ranked_metrics
from lightmem.evaluation.harnesses.qa import generate_answers
from lightmem.evaluation.reports.comparison import RunResult, compare, table
from lightmem.evaluation.runs.locomo import run as run_locomo
from lightmem.llm.base import GenerationError
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import ThresholdSelector
from lightmem.roles.controller import PassthroughController
from lightmem.roles.writer import TurnWriter
from lightmem.types import Filters, Hit, MemoryItem, RetrievalPlan, Turn

TINY = [f"data.path={TINY_LOCOMO}", "encoder=hashing", "selector=none", "ks=[1,3]", "budget=60"]
SCRIPTED = ["llm._target_=fakes.ScriptedLLM", "+llm.script=[Biscuit]"]
BACKEND_DOWN = ["llm._target_=fakes.ScriptedLLM", "+llm.script=[{_target_: lightmem.llm.base.GenerationError, _args_: [down]}]"]


def _rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "questions.jsonl").read_text().splitlines()]


@pytest.mark.slow  # a LoCoMo run with QA and a judge, end to end
def test_locomo_qa_scores_answers_per_category_with_the_judge(tmp_path):
    judge = "+qa.judge={_target_: fakes.ScriptedLLM, script: ['{\"label\": \"CORRECT\"}', 'so WRONG']}"
    cfg = compose("locomo", [*TINY, *SCRIPTED, "data.conversations=0", "qa.enabled=true", "data.categories=[1,2,3,4,5]",
                             judge, f"out_dir={tmp_path}"])
    results = run_locomo(cfg, quiet=True)
    qa = results["qa"]
    rows = {r["question"]: r for r in _rows(tmp_path)}
    # the scripted generator always says "Biscuit": right for the puppy question only
    assert rows["What is the name of Ava's puppy?"]["qa"]["f1"] == 1.0
    assert rows["When did Ava run the Boston marathon?"]["qa"]["f1"] == 0.0
    assert qa["overall"]["n"] == 4 and qa["overall"]["f1"] == pytest.approx(0.25)
    # the adversarial question is scored apart ("Biscuit" is not an abstention) and kept out of the overall
    assert qa["adversarial"]["n"] == 1 and qa["adversarial"]["f1"] == 0.0
    assert results["retrieval"]["overall"]["n"] == 4
    # the judge alternates CORRECT / WRONG over the 5 answers
    assert [rows[q]["qa"]["judge"] for q in rows] == [1.0, 0.0, 1.0, 0.0, 1.0]
    assert qa["overall"]["judged"] == 4
    assert results["cost"]["llm_qa"]["generator"]["calls"] == 5 and results["cost"]["llm_qa"]["judge"]["calls"] == 5
    assert results["latency"]["e2e_ms_p50"] >= results["latency"]["generate_ms_p50"]
    assert 0 < results["cost"]["context_tokens_per_question"] <= 60
    assert "| **overall (1-4)** | 4 |" in (tmp_path / "results.md").read_text()


def test_full_context_baseline_replays_the_newest_turns_within_the_window(tmp_path):
    cfg = compose("locomo", [*TINY, *SCRIPTED, "data.conversations=0", "qa.enabled=true", "+experiment=baseline_full_context",
                             "qa.window=2048", f"out_dir={tmp_path}"])
    results = run_locomo(cfg, quiet=True)
    # everything fits the window: every question's evidence is "retrieved" at any K
    assert results["retrieval"]["overall"]["recall_all@1"] == 1.0
    assert all(len(r["retrieved"]) == 7 for r in _rows(tmp_path))

    counter = HashingEmbedder(dim=8).token_counter()
    turns = [Turn(f"t{i}", "A", f"word{i} filler text", 1000.0 + i) for i in range(6)]
    probe = FullContext(counter, window=10**6, group_dates=False)
    costs = [probe.composer.line_cost(it) for it in probe.add_turns("u", turns)]
    fc = FullContext(counter, window=costs[-1] + costs[-2] + 1, group_dates=False)  # room for the two newest turns only
    fc.add_turns("u", turns)
    hits = fc.retrieve("anything", "u", k=1).hits
    assert [h.item.provenance[0] for h in hits] == ["t4", "t5"]  # the newest turns, in time order; k is ignored
    # its prompt: the newest turns that fit what the question leaves of the budget, all of it counted
    ctx = fc.build_context("what did A say?", "u", budget=costs[-1] + 16)
    assert [m.provenance[0] for m in ctx.memories] == ["t5"] and ctx.n_tokens <= costs[-1] + 16
    with pytest.raises(ValueError):
        FullContext(counter, window=0)


def test_threshold_selector_keeps_what_clears_the_cosine():
    plan = RetrievalPlan("q", (), Filters(), 3)
    hits = [Hit(MemoryItem(str(i), "u", "t", [], 0, 0, 0), {"dense": d}, score=s) for i, (d, s) in enumerate([(0.9, 0.1), (0.2, 0.9), (0.35, 0.5)])]
    assert [h.item.id for h in ThresholdSelector(0.30).select(plan, hits, 3)] == ["2", "0"]
    assert [h.item.id for h in ThresholdSelector(0.30).select(plan, hits, 1)] == ["2"]


def test_noisy_controller_and_writer_inject_reproducibly():
    pool = ["Where is the Eiffel tower?", "What is the boiling point of water?"]
    ctrl = NoisyController(PassthroughController(), pool, rate=0.5, seed=1)
    plan = ctrl.plan("What is Ava's puppy called?", 10, Filters())
    texts = sorted(h.text for h in plan.hqs)
    assert len(plan.hqs) == 2 and "What is Ava's puppy called?" in texts and set(texts) - {"What is Ava's puppy called?"} <= set(pool)
    assert all(h.quota == 0 for h in plan.hqs)  # the budget is split over real and noisy HQs
    again = NoisyController(PassthroughController(), pool, rate=0.5, seed=1).plan("What is Ava's puppy called?", 10, Filters())
    assert again.hqs == plan.hqs
    with pytest.raises(ValueError):
        NoisyController(PassthroughController(), pool, rate=1.0)
    with pytest.raises(ValueError):
        NoisyController(PassthroughController(), [], rate=0.5)

    turns = [Turn(f"t{i}", "A", f"I adopted puppy number {i}", 1000.0) for i in range(40)]
    writer = NoisyWriter(TurnWriter(), ["zebra quantum violin harbour"], rate=0.5, seed=0)
    drafts = writer.write(turns)
    noisy = [d for d in drafts if d.metadata.get("injected_noise")]
    assert 10 < len(noisy) < 30 and writer.injected == len(noisy)
    assert all(set(d.text.split()) <= {"zebra", "quantum", "violin", "harbour"} for d in noisy)
    assert [d.provenance for d in drafts] == [[t.turn_id] for t in turns]  # provenance survives
    assert [d.text for d in NoisyWriter(TurnWriter(), ["x y"], rate=0.0).write(turns)] == [d.text for d in TurnWriter().write(turns)]
    assert [t.turn_id for t in noise_turns(["a b"], 3, 5.0)] == ["noise:0", "noise:1", "noise:2"]


@pytest.mark.slow  # two LoCoMo runs end to end
def test_injection_runs_are_seeded_and_saturation_is_counted(tmp_path):
    base = [*TINY, "data.conversations=0", "inject.write_noise=0.5", "inject.hq_noise=0.5", "inject.saturation=1.0"]
    a = run_locomo(compose("locomo", [*base, "seed=7", f"out_dir={tmp_path}/a"]), quiet=True)
    b = run_locomo(compose("locomo", [*base, "seed=7", f"out_dir={tmp_path}/b"]), quiet=True)
    assert [r["retrieved"] for r in _rows(tmp_path / "a")] == [r["retrieved"] for r in _rows(tmp_path / "b")]
    assert a["cost"]["injected"]["injected_noise_turns"] == 7.0  # as many noise turns as the conversation has
    assert a["cost"]["items"] == 14 and b["retrieval"] == a["retrieval"]


def test_the_reader_instruction_is_a_setting_and_an_unknown_one_is_refused():
    from lightmem.evaluation.harnesses.qa import READER_INSTRUCTIONS

    llm = ScriptedLLM(script=["Answer: Lisbon\nbecause"])
    for name in ("decline", "guess"):
        gens = generate_answers(llm, ["- [1 May 2023] Ann: I moved to Lisbon.\n### Question\nWhere?"], instruction=name)
        assert gens[0].text == "Lisbon"
        assert llm.prompts[-1].startswith(READER_INSTRUCTIONS[name]) and llm.prompts[-1].endswith("Where?\nAnswer:")
    assert "Not mentioned" in llm.prompts[0] and "Not mentioned" not in llm.prompts[1]
    with pytest.raises(ValueError, match="choose one of"):
        generate_answers(llm, ["### Question\nWhere?"], instruction="verbose")


def test_the_harness_passes_qa_instruction_to_the_reader_and_leaves_recorded_prompts_unscored(tmp_path):
    from lightmem.evaluation.harnesses.qa import READER_INSTRUCTIONS
    from lightmem.evaluation.reports.tables import run_summary

    cfg = compose("locomo", [*TINY, "llm=record", f"llm.path={tmp_path}/p.jsonl", "data.conversations=0", "qa.enabled=true",
                             "qa.instruction=guess", f"out_dir={tmp_path}"])
    results = run_locomo(cfg, quiet=True)
    prompts = [json.loads(line)["prompt"] for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert len(prompts) == 4 and all(p.startswith(READER_INSTRUCTIONS["guess"] + "\n\n") for p in prompts)
    # the ids the recorder answers with are not answers: no F1 of 0 is reported for them
    overall = results["qa"]["overall"]
    assert overall["n"] == 4 and overall["recorded"] == 4 and overall["f1"] is None and overall["bleu1"] is None
    assert all(r["qa"]["recorded"] and r["qa"]["f1"] is None for r in _rows(tmp_path))
    assert "4 reader prompts were recorded" in (tmp_path / "results.md").read_text()
    assert "qa" not in run_summary(results)


def test_generation_failures_answer_empty():
    llm = ScriptedLLM(script=[GenerationError("down")])
    gens = generate_answers(llm, ["c1\n### Question\nq1", "c2\n### Question\nq2"], batch_size=2)
    assert [g.text for g in gens] == ["", ""]


def _lme_file(path: Path) -> Path:
    def inst(qid, qtype, sessions, answer_sid):
        return {"question_id": qid, "question_type": qtype, "question": "What breed is my dog Biscuit?", "answer": "golden retriever",
                "question_date": "2023/05/30 (Tue) 10:18", "answer_session_ids": [answer_sid],
                "haystack_session_ids": [s[0] for s in sessions], "haystack_dates": ["2023/05/20 (Sat) 07:47"] * len(sessions),
                "haystack_sessions": [s[1] for s in sessions]}
    dog = [{"role": "user", "content": "My dog Biscuit is a golden retriever.", "has_answer": True},
           {"role": "assistant", "content": "Golden retrievers are lovely dogs."}]
    other = [{"role": "user", "content": "I need a recipe for lentil soup."}, {"role": "assistant", "content": "Try red lentils with cumin."}]
    data = [inst("q1", "single-session-user", [("s_other", other), ("s_dog", dog)], "s_dog"),
            inst("q2_abs", "multi-session", [("s_dog", dog), ("s_other", other)], "s_dog")]
    path.write_text(json.dumps(data))
    return path


def _lme_entry_point():
    """eval/longmemeval.py loaded as a module (its ``run`` takes a composed config)."""
    return entry_point("longmemeval")


def test_longmemeval_runner_scores_sessions_and_turns(tmp_path):
    mod = _lme_entry_point()
    path = _lme_file(tmp_path / "lme.json")
    cfg = compose("longmemeval", [f"data.path={path}", "encoder=hashing", "selector=none", "ks=[1,4]", *SCRIPTED, "qa.enabled=true",
                                  "+qa.judge={_target_: fakes.ScriptedLLM, script: ['yes']}", f"out_dir={tmp_path}/out"])
    results = mod.run(cfg, quiet=True)
    overall = results["retrieval"]["overall"]
    assert overall["n"] == 2 and overall["session_recall_all@4"] == 1.0 and overall["turn_recall_any@4"] == 1.0
    assert overall["qa_accuracy"] == 1.0 and overall["qa_f1"] == 0.0  # "Biscuit" vs "golden retriever"
    # within the 600-token budget every retrieved turn fits: the evidence turn is in, and so is the answer
    assert overall["turn_recall_all@budget"] == 1.0 and overall["answer_coverage@budget"] == 1.0
    assert set(results["retrieval"]["by_type"]) == {"single-session-user", "multi-session"}
    assert (tmp_path / "out" / "results.md").exists() and (tmp_path / "out" / "recall.png").stat().st_size > 0


@pytest.mark.slow  # three LongMemEval runs end to end
def test_longmemeval_controls_stand_beside_each_prompt_and_the_reader_answers_them(tmp_path):
    mod = _lme_entry_point()
    path = _lme_file(tmp_path / "lme.json")
    # the gold control is the has_answer turn alone; the random one packs the whole small haystack in some order
    base = [f"data.path={path}", "encoder=hashing", "selector=none", "ks=[1,4]", "qa.enabled=true", "qa.controls=true",
            "llm._target_=fakes.ScriptedLLM", "+llm.script=[a golden retriever]"]
    results = mod.run(compose("longmemeval", [*base, f"out_dir={tmp_path}/a"]), quiet=True)
    overall = results["retrieval"]["overall"]
    assert overall["gold_recall_all"] == 1.0 and overall["gold_coverage"] == 1.0
    assert overall["random_recall_all"] == 1.0  # four turns fit 600 tokens whatever the order
    assert overall["qa_f1"] == overall["qa_gold_f1"] == overall["qa_random_f1"] == 1.0  # three prompts answered per question
    rows = [json.loads(line) for line in (tmp_path / "a" / "questions.jsonl").read_text().splitlines()]
    gold = rows[0]["controls"]["gold"]["prompt"]
    assert "golden retriever" in gold and "lentil" not in gold and gold.endswith("What breed is my dog Biscuit?")
    assert all(set(r["controls"]) == {"gold", "random"} and r["controls"]["random"]["qa"]["prediction"] for r in rows)
    assert "cov. gold ctx" in (tmp_path / "a" / "results.md").read_text()
    # the random context is drawn by the seed: the same seed composes the same prompt
    mod.run(compose("longmemeval", [*base, f"out_dir={tmp_path}/b"]), quiet=True)
    again = [json.loads(line) for line in (tmp_path / "b" / "questions.jsonl").read_text().splitlines()]
    assert [r["controls"]["random"]["prompt"] for r in again] == [r["controls"]["random"]["prompt"] for r in rows]
    # recorded, not answered: the prompts and their controls' are written, and no F1 is reported
    rec = [*base[:-2], "llm=record", f"llm.path={tmp_path}/p.jsonl", f"out_dir={tmp_path}/c"]
    overall = mod.run(compose("longmemeval", rec), quiet=True)["retrieval"]["overall"]
    assert overall["qa_f1"] is None and overall["qa_recorded"] == 2 and "qa_gold_f1" not in overall
    assert len((tmp_path / "p.jsonl").read_text().splitlines()) == 6  # two questions, three prompts each
    assert "2 reader prompts were recorded" in (tmp_path / "c" / "results.md").read_text()


def test_ranked_metrics_map_turns_to_sessions():
    m = ranked_metrics(["s2:0", "s2:1", "s1:3"], ["s1:3"], ["s1"], [1, 2])
    assert m["turn_recall_any@1"] == 0.0 and m["turn_recall_any@2"] == 0.0  # the gold turn is third
    assert m["session_recall_any@2"] == 1.0 and m["session_ndcg@2"] == pytest.approx(1 / np.log2(3))  # s1 is the 2nd session
    assert np.isnan(ranked_metrics(["s1:0"], [], ["s1"], [1])["turn_recall_any@1"])


def test_growth_scores_both_variants_at_each_size(tmp_path):
    from lightmem.evaluation.runs.growth import run as run_growth_cfg

    cfg = compose("growth", [f"locomo_path={TINY_LOCOMO}", "locomo_conversations=all", "filler_path=null", "encoder=hashing",
                             "selector=none", "sizes=[4,10,100]", "k=2", f"out_dir={tmp_path}"])
    rows = run_growth_cfg(cfg, quiet=True)["growth"]["rows"]
    scored = [r for r in rows if "variant" in r]
    assert [(r["size"], r["variant"]) for r in scored] == [(4, "reranking"), (4, "vector_only"), (10, "reranking"), (10, "vector_only")]
    assert all(r["entries"] >= r["size"] for r in scored)
    assert scored[0]["n"] <= scored[2]["n"]  # more questions become answerable as the trajectory grows
    assert "before sizes [100]" in rows[-1]["note"]
    assert (tmp_path / "growth.png").exists()
    # the size it never reached is a failure, recorded next to the sizes it did reach
    recorded = json.loads((tmp_path / "results.json").read_text())
    assert len(recorded["failures"]) == 1 and "before sizes [100]" in recorded["failures"][0]
    assert len(recorded["growth"]["rows"]) == 5 and "## failed" in (tmp_path / "results.md").read_text()


def _fake_run(name: str, scores: list[float], seeds: int = 1) -> RunResult:
    run = RunResult(name)
    for s in range(seeds):
        qs = [{"conv_id": "c", "question": f"q{i}", "category": 4, "recall": {"@budget": {"all": v}}, "qa": {"f1": v}} for i, v in enumerate(scores)]
        run.questions.append(qs)
        run.results.append({"retrieval": {"overall": {"recall_all@budget": float(np.mean(scores)) + 0.1 * s}, "by_category": {}},
                            "latency": {}, "cost": {}})
    return run


def test_suite_table_reports_mean_std_and_the_paired_difference():
    ref, better = _fake_run("ref", [0.0, 1.0, 0.0, 1.0] * 5), _fake_run("better", [1.0] * 20, seeds=3)
    cmp = compare(better, ref, "R_all@budget", resamples=500)
    assert cmp["diff"] == pytest.approx(0.5) and cmp["n"] == 20 and cmp["p_value"] < 0.05
    md, data = table([ref, better], ref, ["R_all@budget"], ["R_all@budget"], resamples=500)
    assert "| better | 3 | 1.100 ± 0.100 | +0.500 [" in md and "(reference)" in md
    assert data["better"]["columns"]["R_all@budget"]["std"] == pytest.approx(0.1)


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml")))
def test_every_experiment_config_composes(name):
    cfg = compose("locomo", [f"+experiment={name}"])
    assert cfg.system is None or cfg.system._target_ == "lightmem.evaluation.harnesses.baselines.FullContext"


@pytest.mark.slow  # the whole evaluation suite, every run and table
def test_whole_suite_runs_from_one_command_on_tiny_data(tmp_path):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from lightmem.evaluation.runs.entry import register_configs
    from lightmem.evaluation.runs.suite import run as run_suite

    register_configs()

    lme = _lme_file(tmp_path / "lme.json")
    common = [f"data.path={TINY_LOCOMO}", "data.conversations=all", "encoder=hashing", "ks=[1,3]", "budget=60", "qa.enabled=true",
              *SCRIPTED, "data.categories=[1,2,3,4,5]"]
    runs = {"ref": {"overrides": ["selector=none"]}, "bm25": {"overrides": ["+experiment=baseline_bm25"]},
            "noisy": {"overrides": ["selector=none", "inject.write_noise=0.5"], "stochastic": True}}
    tables = {"baselines": {"runs": ["ref", "bm25"], "columns": ["R_all@budget", "F1"], "paired": ["R_all@budget", "F1"]},
              "error_injection": {"runs": ["ref", "noisy"], "columns": ["R_all@budget"], "paired": ["R_all@budget"],
                                  "reference": "noisy"}}  # a table's own reference
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = hydra_compose(config_name="suite", overrides=[f"out_dir={tmp_path}/suite", "seeds=[0,1]", "bootstrap_resamples=200", "reference=ref"])
        cfg.locomo_common, cfg.runs, cfg.tables = common, runs, tables
        cfg.growth.overrides = [f"locomo_path={TINY_LOCOMO}", "locomo_conversations=all", "filler_path=null", "encoder=hashing", "selector=none", "sizes=[4]"]
        cfg.longmemeval.overrides = [f"data.path={lme}", "encoder=hashing", "selector=none"]
        summary = run_suite(cfg)
        md = (tmp_path / "suite" / "suite.md").read_text()
        assert "## baselines" in md and "## error injection" in md and "## MTM growth" in md and "## LongMemEval" in md
        assert sorted(p.name for p in (tmp_path / "suite" / "locomo" / "noisy").iterdir()) == ["seed0", "seed1"]  # stochastic: both seeds
        assert [p.name for p in (tmp_path / "suite" / "locomo" / "bm25").iterdir()] == ["seed0"]
        assert summary["tables"]["baselines"]["bm25"]["vs_reference"]["R_all@budget"]["n"] == 6  # the scorable non-adversarial questions
        injected = summary["tables"]["error_injection"]
        assert injected["noisy"]["vs_reference"]["R_all@budget"] is None and injected["ref"]["vs_reference"]["R_all@budget"]
        assert (tmp_path / "suite" / "baselines.png").exists() and (tmp_path / "suite" / "recall_vs_budget.png").exists()
        # a second invocation reuses every finished run
        again = run_suite(cfg)
        assert again["timings_s"] == {}
        # report-only over a folder where one run never finished: the tables are rebuilt and the gap is named
        shutil.rmtree(tmp_path / "suite" / "locomo" / "noisy")
        cfg.report_only = True
        partial = run_suite(cfg)
        assert partial["timings_s"] == {} and "noisy" not in partial["tables"]["error_injection"]
        assert "## not run" in (tmp_path / "suite" / "suite.md").read_text()


def test_max_questions_spreads_over_the_conversation():
    from lightmem.datasets import load_locomo
    from lightmem.evaluation.harnesses.locomo import sample_questions

    conv = load_locomo(TINY_LOCOMO)[0]
    every = sample_questions(conv, [1, 2, 3, 4, 5])
    assert [q.category for q in every] == [4, 2, 1, 3, 5]  # the question with junk evidence is not scorable
    assert [q.category for q in sample_questions(conv, [1, 2, 3, 4, 5], 2)] == [4, 5]  # first and last
    assert [q.category for q in sample_questions(conv, [1, 2, 3, 4, 5], 3)] == [4, 1, 5]
    assert sample_questions(conv, [1, 2], 10) == [q for q in every if q.category in (1, 2)]
    assert sample_questions(conv, [4], 0) == []


@pytest.mark.slow  # three LoCoMo and LongMemEval runs end to end
def test_qa_backend_failures_are_recorded_and_the_entry_point_exits_non_zero(tmp_path, capsys):
    from lightmem.evaluation.reports.failures import exit_on_failures
    from lightmem.evaluation.runs.longmemeval import run as run_lme

    cfg = compose("locomo", [*TINY, *BACKEND_DOWN, "data.conversations=0", "qa.enabled=true", f"out_dir={tmp_path}/locomo"])
    results = run_locomo(cfg, quiet=True)
    assert results["failures"] == ["QA generator: 1 LLM call(s) failed (their questions were answered with an empty string)"]
    assert json.loads((tmp_path / "locomo" / "results.json").read_text())["failures"] == results["failures"]
    assert results["retrieval"]["overall"]["n"] == 4  # what did finish is still written
    with pytest.raises(SystemExit) as exited:
        exit_on_failures(results, "LoCoMo", tmp_path / "locomo")
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert "LoCoMo FAILED (exit status 1)" in err and "QA generator: 1 LLM call(s) failed" in err

    lme = _lme_file(tmp_path / "lme.json")
    lme_results = run_lme(compose("longmemeval", [f"data.path={lme}", "encoder=hashing", "selector=none", "ks=[1,4]", *BACKEND_DOWN,
                                                  "qa.enabled=true", f"out_dir={tmp_path}/lme"]), quiet=True)
    assert lme_results["cost"]["llm_qa"]["generator"] == {"calls": 0, "failures": 1}
    assert lme_results["failures"] == ["QA generator: 1 LLM call(s) failed (their questions were answered with an empty string)"]
    # a run whose calls all succeed records no failures, and the entry point returns normally
    ok = run_locomo(compose("locomo", [*TINY, *SCRIPTED, "data.conversations=0", "qa.enabled=true", f"out_dir={tmp_path}/ok"]), quiet=True)
    assert ok["failures"] == []
    exit_on_failures(ok, "LoCoMo")


def test_ltm_bench_records_a_background_consolidation_that_raised():
    from types import SimpleNamespace

    from lightmem.datasets import load_locomo
    from lightmem.evaluation.benchmarks.ltm import latency_under_consolidation

    def broken_cycle(user):
        raise RuntimeError("graph store is gone")

    memory = SimpleNamespace(search=lambda *a, **kw: [], add_turns=lambda *a, **kw: None, flush_index=lambda *a: True,
                             ltm=SimpleNamespace(consolidator=SimpleNamespace(run=broken_cycle)))
    conv = load_locomo(TINY_LOCOMO)[0]
    lat = latency_under_consolidation(memory, conv, "u", ["q1", "q2"], k=3, copies=1, nice=0)
    assert "background consolidation failed: RuntimeError: graph store is gone" in lat["failures"]
    assert len(lat["idle_ms"]) == 2  # the idle half was measured


def _tiny_suite(tmp_path: Path, runs: dict, growth_sizes: str = "[4]") -> Path:
    """A suite config (conf/suite.yaml + tiny fixtures) in tmp_path/conf; returns that folder."""
    lme = _lme_file(tmp_path / "lme.json")
    common = [f"data.path={TINY_LOCOMO}", "data.conversations=all", "encoder=hashing", "ks=[1,10]", "budget=60", "qa.enabled=true",
              *SCRIPTED, "data.categories=[1,2,3,4,5]"]
    cfg = {"defaults": ["suite", "_self_"], "out_dir": str(tmp_path / "suite"), "seeds": [0], "reference": "ref",
           "bootstrap_resamples": 100, "locomo_common": common, "runs": runs,
           "tables": {"baselines": {"runs": list(runs), "columns": ["R_all@10", "R_all@budget", "F1", "retr. P50 ms"],
                                    "paired": ["R_all@budget"]},
                      "ablations": None, "paper_ablations": None, "error_injection": None, "update_gap": None},
           "growth": {"enabled": True, "overrides": [f"locomo_path={TINY_LOCOMO}", "locomo_conversations=all", "filler_path=null",
                                                     "encoder=hashing", "selector=none", f"sizes={growth_sizes}"]},
           "longmemeval": {"enabled": True, "overrides": [f"data.path={lme}", "encoder=hashing", "selector=none", *SCRIPTED,
                                                          "qa.enabled=true"]}}
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "tiny_suite.yaml").write_text(json.dumps(cfg))  # JSON is YAML
    return conf


@pytest.mark.multiprocess
def test_suite_entry_point_exits_non_zero_when_a_planned_run_fails(tmp_path):
    conf = _tiny_suite(tmp_path, {"ref": {"overrides": ["selector=none"]},
                                  "broken": {"overrides": ["selector=none", f"data.path={tmp_path}/no_such_locomo.json"]}})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(ROOT / "eval" / "suite.py"), "--config-dir", str(conf), "--config-name", "tiny_suite"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1, proc.stderr[-3000:]
    out = tmp_path / "suite"
    md = (out / "suite.md").read_text()
    # the failure is listed; the other runs still finished and are reported
    assert "## failed runs" in md and "1 of 4 planned runs did not complete" in md
    assert "- `broken/seed0`: FileNotFoundError" in md
    assert "| ref | 1 |" in md and "## MTM growth" in md and "## LongMemEval" in md
    summary = json.loads((out / "suite.json").read_text())
    assert list(summary["failures"]) == ["broken/seed0"]
    assert summary["planned"] == ["broken/seed0", "ref/seed0", "growth", "longmemeval"]
    assert (out / "locomo" / "ref" / "seed0" / "results.json").exists()
    # the closing lines: where the report is, headline numbers, and the failure count last
    tail = proc.stdout.strip().splitlines()[-6:]
    assert tail[0].startswith("lightmem suite: ") and f"report: {out / 'suite.md'}" in tail[0]
    assert tail[1].startswith("  LoCoMo `ref` (reference): R_all@10 ") and "R_all@budget" in tail[1] and "retr. P50" in tail[1]
    assert tail[2].startswith("  MTM growth R_all@budget, reranking / vector_only: 4 entries ")
    assert tail[3].startswith("  LongMemEval (2 questions): session R_all@")
    assert tail[4] == "FAILED: 1 of 4 planned runs did not complete: broken/seed0"
    assert tail[5] == f'  see the "failed runs" section of {out / "suite.md"}'


@pytest.mark.slow  # the evaluation suite end to end, twice
def test_suite_reruns_a_run_that_recorded_failures_and_reports_reused_ones(tmp_path):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from lightmem.evaluation.runs.entry import register_configs
    from lightmem.evaluation.runs.suite import closing_summary
    from lightmem.evaluation.runs.suite import run as run_suite

    register_configs()

    conf = _tiny_suite(tmp_path, {"ref": {"overrides": ["selector=none"]}, "flaky": {"overrides": ["selector=none", *BACKEND_DOWN]}},
                       growth_sizes="[4,100]")
    tiny = json.loads((conf / "tiny_suite.yaml").read_text())
    del tiny["defaults"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        base = hydra_compose(config_name="suite")
        OmegaConf.set_struct(base, False)
        cfg = OmegaConf.merge(base, tiny)
        first = run_suite(cfg)
        # a run that finished but recorded failures is listed, with the numbers it did finish in the table
        assert set(first["failures"]) == {"flaky/seed0", "growth"}
        assert "QA generator" in first["failures"]["flaky/seed0"] and "before sizes [100]" in first["failures"]["growth"]
        assert "flaky" in first["tables"]["baselines"]
        # resume: clean runs are reused, failed ones are retried (and fail again here); report-only re-reads them
        again = run_suite(cfg)
        assert set(again["timings_s"]) == {"flaky/seed0", "growth"} and set(again["failures"]) == {"flaky/seed0", "growth"}
        cfg.report_only = True
        assert set(run_suite(cfg)["failures"]) == {"flaky/seed0", "growth"}
        text = closing_summary(again, tmp_path / "suite" / "suite.md")
        assert text.splitlines()[-2] == "FAILED: 2 of 4 planned runs did not complete: flaky/seed0, growth"
        clean = {**again, "failures": {}}
        assert closing_summary(clean, tmp_path / "suite.md").splitlines()[-1] == "all 4 planned runs completed"


def _entry(name: str):
    return entry_point(name)


@pytest.mark.slow  # the role and sensory benchmarks end to end
def test_a_skipped_role_setting_is_a_failure_and_an_unknown_sensory_part_an_error(tmp_path, monkeypatch):
    from lightmem.evaluation.reports.failures import exit_on_failures

    monkeypatch.setenv("LIGHTMEM_CHECKPOINTS", str(tmp_path / "no-checkpoints"))  # the cross-encoder cannot be built
    cfg = compose("roles", [f"data.path={TINY_LOCOMO}", "encoder=hashing", f"out_dir={tmp_path}/roles", "llm._target_=fakes.ScriptedLLM",
                            "controllers=[passthrough]", "selectors=[cross_encoder]", "writers=[turn]", "n_queries=2", "n_turns=4", "k=2"])
    results = _entry("roles").run(cfg)
    assert [r["setting"] for r in results["roles"]] == ["passthrough", "cross_encoder", "turn"]  # the others still ran
    assert len(results["failures"]) == 1 and results["failures"][0].startswith("selector=cross_encoder skipped: ")
    assert json.loads((tmp_path / "roles" / "results.json").read_text())["failures"] == results["failures"]
    with pytest.raises(SystemExit):
        exit_on_failures(results, "Role benchmark")

    with pytest.raises(ValueError, match="segmentaton"):
        _entry("sensory").run(compose("sensory_bench", ["parts=[segmentaton]", f"out_dir={tmp_path}/sensory"]))
