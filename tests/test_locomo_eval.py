"""The LoCoMo retrieval evaluation end to end on a tiny LoCoMo-format file."""
from __future__ import annotations

import json

import pytest
from conftest import ROOT, TINY_LOCOMO, compose, entry_point

from lightmem.datasets import load_locomo, select_conversations
from lightmem.errors import InvalidInputError


def _load_entry(name: str):
    return entry_point(name)


def test_loader_reads_sessions_captions_and_qa():
    a, b = load_locomo(TINY_LOCOMO)
    assert [s.session_id for s in a.sessions] == ["session_1", "session_2"]  # a date without a session is ignored
    assert len(a.turns) == 7  # the empty turn is skipped
    assert a.turns[3].caption == "a photo of a violin on a chair"
    assert a.qa[4].category == 5 and a.qa[4].answer == "pizza"
    assert b.sessions[0].timestamp == pytest.approx(1685613600.0)


def test_conversation_selection():
    convs = load_locomo(TINY_LOCOMO)
    assert [c.conv_id for c in select_conversations(convs, "0-1")] == ["tiny-a", "tiny-b"]
    assert [c.conv_id for c in select_conversations(convs, "tiny-b")] == ["tiny-b"]
    assert [c.conv_id for c in select_conversations(convs, [1])] == ["tiny-b"]
    with pytest.raises(InvalidInputError, match="out of range"):
        select_conversations(convs, "5-9")


def test_run_writes_results_and_scores_evidence(tmp_path, capsys):
    cfg = compose("locomo", [f"data.path={TINY_LOCOMO}", "data.conversations=0-1", "encoder=hashing", f"out_dir={tmp_path}", "ks=[1,3]", "budget=40"])
    results = _load_entry("locomo").run(cfg)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert {"retrieval", "latency", "cost", "config"} <= set(saved)
    overall = saved["retrieval"]["overall"]
    # categories 1-4 only; the question with junk evidence ("D") is not scorable
    assert overall["n"] == 6
    assert set(saved["retrieval"]["by_category"]) == {"1-multi-hop", "2-temporal", "3-open-domain", "4-single-hop"}
    # K=3 of a 7-item store covers more than K=1; the budget never exceeds 40 tokens
    assert overall["recall_mean@3"] >= overall["recall_mean@1"]
    rows = [json.loads(line) for line in (tmp_path / "questions.jsonl").read_text().splitlines()]
    assert all(r["tokens"]["@budget"] <= 40 for r in rows)
    puppy = next(r for r in rows if r["question"] == "What is the name of Ava's puppy?")
    assert puppy["evidence"] == ["D1:1"] and puppy["recall"]["@3"]["all"] == 1.0
    # answer coverage reads the packed memories' text: "Biscuit" counts exactly when a packed line holds it
    assert puppy["coverage"] == float(any("Biscuit" in p["line"] for p in puppy["packed"]))
    # strict recall credits the evidence only where its memory is packed whole
    assert puppy["recall"]["@budget"]["all"] == float(any(p["whole"] and "D1:1" in p["provenance"] for p in puppy["packed"]))
    assert 0.0 <= overall["answer_coverage@budget"] <= 1.0
    # the Stage-1 pool (5K candidates at the largest K) bounds what Stage 2 can keep
    for r in rows:
        pool = r["candidate_recall"]
        assert pool["n"] <= 5 * 3 and pool["all"] >= r["recall"]["@3"]["all"] and pool["mean"] >= r["recall"]["@3"]["mean"]
    assert overall["pool_recall_all"] >= overall["recall_all@3"]
    lisbon = next(r for r in rows if r["question"] == "Which city did Cleo move to?")
    assert lisbon["evidence"] == ["D1:1"]  # "D:1:1" repaired
    assert results["retrieval"]["overall"] == overall
    assert "| **overall** | 6 |" in capsys.readouterr().out
    assert (tmp_path / "results.md").exists() and (tmp_path / "recall.png").stat().st_size > 0
    assert not (tmp_path / "stores").exists()  # scratch stores are removed


@pytest.mark.slow
def test_run_with_minilm_finds_the_obvious_evidence(tmp_path):
    cfg = compose("locomo", [f"data.path={TINY_LOCOMO}", "data.conversations=all", f"out_dir={tmp_path}", "ks=[2]", "budget=600"])
    results = _load_entry("locomo").run(cfg)
    single = results["retrieval"]["by_category"]["4-single-hop"]
    assert single["recall_all@2"] == 1.0
    assert results["latency"]["embed_ms_p50"] > 0  # the timed search embedded its query


@pytest.mark.slow  # the latency benchmark end to end
def test_latency_benchmark_runs_on_tiny_sizes(tmp_path):
    cfg = compose("latency", [f"corpus=[{TINY_LOCOMO}]", "sizes=[3,9]", "n_queries=4", "encoder=hashing", f"out_dir={tmp_path}", "k=2"])
    results = _load_entry("latency").run(cfg)
    rows = results["latency"]
    assert [r["items"] for r in rows] == [3, 9]
    assert all(r["search_ms_p95"] >= r["search_ms_p50"] > 0 for r in rows)
    # what seeing another connection's commits costs, measured at every size
    assert all(r["freshness_check_us_p95"] >= r["freshness_check_us_p50"] > 0 and r["replay_add_ms_p50"] > 0 for r in rows)
    assert (tmp_path / "latency.png").exists() and "replay 1 added item" in (tmp_path / "results.md").read_text()


@pytest.mark.slow  # the latency benchmark end to end
def test_latency_benchmark_can_time_searches_that_pack_a_budget(tmp_path):
    base = [f"corpus=[{TINY_LOCOMO}]", "sizes=[9]", "n_queries=4", "encoder=hashing", "k=2"]
    best_k = _load_entry("latency").run(compose("latency", [*base, f"out_dir={tmp_path / 'k'}"]))["latency"][0]
    packed = _load_entry("latency").run(compose("latency", [*base, f"out_dir={tmp_path / 'b'}", "budget=5000"]))["latency"][0]
    assert best_k["hits_mean"] == 2.0
    assert packed["hits_mean"] > 2.0  # a budget is filled from all 3K candidates, not only the best K


def test_generative_roles_report_llm_usage_per_turn_and_question(tmp_path):
    cfg = compose("locomo", [f"data.path={TINY_LOCOMO}", "data.conversations=0", "encoder=hashing", f"out_dir={tmp_path}",
                             "ks=[2]", "writer=experimental/generative", "controller=experimental/generative", "controller.fallback.nlp=false",
                             "llm._target_=fakes.ScriptedLLM"])
    results = _load_entry("locomo").run(cfg)
    llm = results["cost"]["llm"]
    # the scripted model answers '{"memories": []}': every batch falls back to extractive entries
    assert llm["writer"]["calls"] >= 1 and llm["writer"]["unit"] == "turn"
    assert llm["controller"]["calls"] >= results["retrieval"]["overall"]["n"]
    assert results["retrieval"]["overall"]["n"] == 4 and results["cost"]["items"] == 7
    rows = [json.loads(line) for line in (tmp_path / "questions.jsonl").read_text().splitlines()]
    assert rows and all(r["queries"] and all(isinstance(q, str) and q for q in r["queries"]) for r in rows)  # SLM-1's plan


def test_fact_keys_run_as_a_consolidation_step_before_the_questions(tmp_path):
    cfg = compose("locomo", [f"data.path={TINY_LOCOMO}", "data.conversations=0", "encoder=hashing", f"out_dir={tmp_path}",
                             "ks=[2]", "ltm=fact_keys", "llm._target_=fakes.ScriptedLLM"])
    results = _load_entry("locomo").run(cfg)
    # SLM-3 read the conversation's memories in windows of 8 during the cycles that ran before the questions
    assert results["cost"]["llm"]["fact_keys"]["calls"] >= 1 and results["cost"]["ltm"]["cycles"] >= 1
    assert results["retrieval"]["overall"]["n"] == 4


def test_questions_record_the_queries_the_controller_ran(tmp_path):
    cfg = compose("locomo", [f"data.path={TINY_LOCOMO}", "data.conversations=0", "encoder=hashing", f"out_dir={tmp_path}",
                             "ks=[2]", "selector=none"])
    _load_entry("locomo").run(cfg)
    rows = [json.loads(line) for line in (tmp_path / "questions.jsonl").read_text().splitlines()]
    assert rows and all(r["queries"] == [r["question"]] for r in rows)  # the default plan: the question alone


@pytest.mark.slow  # the committed cross-encoder on the packaged MiniLM
def test_roles_benchmark_runs_every_listed_setting(tmp_path, monkeypatch):
    cfg = compose("roles", [f"data.path={TINY_LOCOMO}", "encoder=hashing", f"out_dir={tmp_path}", "llm._target_=fakes.ScriptedLLM",
                            "controllers=[passthrough,experimental/generative]", "selectors=[none,cross_encoder]",
                            "writers=[turn,experimental/generative]",
                            "n_queries=3", "n_queries_generative=2", "n_turns=4", "n_turns_generative=4", "turns_per_batch=2", "k=2"])
    rows = {(r["role"], r["setting"]): r for r in _load_entry("roles").run(cfg)["roles"]}
    assert set(rows) == {("controller", "passthrough"), ("controller", "experimental/generative"), ("selector", "none"),
                         ("selector", "cross_encoder"), ("writer", "turn"), ("writer", "experimental/generative")}
    assert rows[("controller", "experimental/generative")]["llm_calls_per_unit"] > 0 and rows[("controller", "passthrough")]["n"] == 3
    assert "skipped" not in rows[("selector", "cross_encoder")] and rows[("selector", "cross_encoder")]["n"] == 3  # the committed checkpoint
    assert rows[("writer", "experimental/generative")]["units"] == 4 and (tmp_path / "results.md").exists()
    # Without a trained checkpoint the setting is reported as skipped, not fatal.
    monkeypatch.setenv("LIGHTMEM_CHECKPOINTS", str(tmp_path / "no-checkpoints"))
    cfg = compose("roles", [f"data.path={TINY_LOCOMO}", "encoder=hashing", f"out_dir={tmp_path}/2", "llm._target_=fakes.ScriptedLLM",
                            "controllers=[passthrough]", "selectors=[cross_encoder]", "writers=[turn]", "n_queries=2", "n_turns=4", "k=2"])
    rows = {(r["role"], r["setting"]): r for r in _load_entry("roles").run(cfg)["roles"]}
    assert "make train" in rows[("selector", "cross_encoder")]["skipped"]


def test_main_returns_the_metric_optimized_metric_names(tmp_path):
    from lightmem.evaluation.runs import locomo
    from lightmem.evaluation.runs.common import optimized_metric

    cfg = compose("locomo", [f"data.path={TINY_LOCOMO}", "data.conversations=0", "encoder=hashing", f"out_dir={tmp_path}", "ks=[1,3]"])
    results = locomo.run(cfg, quiet=True)
    metrics = locomo.metrics(results)
    # the default is what main() returned before optimized_metric existed, so sweeps behave the same
    assert optimized_metric(metrics, cfg) == results["retrieval"]["overall"]["recall_all@budget"]
    cfg.optimized_metric = "latency/search_ms_p50"  # any logged metric, no code change
    assert optimized_metric(metrics, cfg) == results["latency"]["search_ms_p50"]
    cfg.optimized_metric = "qa/f1"  # QA is off: nothing to return, the sweep goes on
    assert optimized_metric(metrics, cfg) == 0.0
    cfg.optimized_metric = None
    assert optimized_metric(metrics, cfg) is None


def test_the_locomo_optuna_search_maximises_optimized_metric():
    from hydra import compose as hc
    from hydra import initialize_config_dir

    from lightmem.evaluation.runs.entry import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = hc(config_name="locomo", overrides=["hparams_search=locomo_optuna", "optimized_metric=qa/f1"], return_hydra_config=True)
        plain = hc(config_name="locomo", overrides=["hparams_search=locomo_optuna"])
    assert "optuna" in cfg.hydra.sweeper._target_ and cfg.hydra.sweeper.direction == "maximize"
    assert "retrieval.w_lexical" in cfg.hydra.sweeper.params
    assert cfg.optimized_metric == "qa/f1" and plain.optimized_metric == "eval/recall_all@budget"
