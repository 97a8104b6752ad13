"""Smoke runs of the data_gen and train entry points on CPU with tiny data (real MiniLM base)."""
from __future__ import annotations

import json
import sys

import pytest
from conftest import ROOT, TINY_LOCOMO, compose

sys.path.insert(0, str(ROOT))


def _lme(path):
    def inst(qid, qtype, answer_turn):
        turns = [{"role": "user", "content": f"I adopted a cat named Miso {qid}.", "has_answer": answer_turn == 0},
                 {"role": "assistant", "content": "Congratulations on the new cat!", "has_answer": False},
                 {"role": "user", "content": f"My sister lives in Oslo {qid}.", "has_answer": answer_turn == 2}]
        return {"question_id": qid, "question_type": qtype, "question": "What is my cat's name?", "answer": "Miso",
                "question_date": "2023/05/30 (Tue) 10:00", "haystack_dates": ["2023/05/20 (Sat) 09:00"],
                "haystack_session_ids": [f"s-{qid}"], "haystack_sessions": [turns], "answer_session_ids": [f"s-{qid}"]}

    path.write_text(json.dumps([inst(f"q{i}", "multi-session" if i % 2 else "single-session-user", 0 if i % 2 else 2) for i in range(12)]))
    return path


@pytest.mark.slow
def test_data_gen_and_all_six_trainers_run_end_to_end(tmp_path):
    from data_gen import distill as distill_script
    from data_gen import synth as synth_script
    from train import complexity, word_scorer
    from train import cross_encoder as selector_script
    from train import embedder as embedder_script
    from train import ranker as ranker_script

    data = tmp_path / "data"
    synth_cfg = compose("synth", [f"out_dir={data}/synth", "n_samples=60", "queries_per_user=6", "seed=1"])
    card = synth_script.run(synth_cfg)
    assert sum(card["samples"].values()) == 60
    dcfg = compose("distill", [f"out_dir={data}", f"synth_dir={data}/synth", f"locomo_path={TINY_LOCOMO}", "locomo_train=0",
                               "locomo_test=1", f"lme_path={_lme(tmp_path / 'lme.json')}", "encoder=hashing"])
    dcard = distill_script.run(dcfg)
    assert dcard["selector"]["train"]["synth"] > 0 and dcard["selector"]["train"]["locomo"] > 0
    assert dcard["compressor"]["train"]["turns"] > 0 and dcard["compressor"]["test"]["turns"] > 0
    rows = [json.loads(x) for x in (data / "selector_train.jsonl").read_text().splitlines()]
    assert all(len(r["texts"]) == len(r["labels"]) for r in rows) and any(sum(r["labels"]) for r in rows)

    common = ["optim.max_steps=2", "optim.eval_every=2",  # evaluated untrained and after the last step
              "optim.cpu=true", "optim.batch_size=4", f"data_dir={data}"]
    s = selector_script.run(compose("train_cross_encoder", common + [f"out_dir={tmp_path}/run_sel", f"export_dir={tmp_path}/ck/selector",
                                                                "max_eval_groups=4", "task.group_size=4", "task.max_length=32"]))
    assert s["train"]["steps"] == 2 and any(k.startswith("test/locomo/selector/recall_all") for k in s["test"])
    card = json.loads((tmp_path / "ck/selector/card.json").read_text())
    assert card["base_model"] == "all-MiniLM-L6-v2" and len(card["data_sha256"]) == 64 and card["metrics"]
    c = complexity.run(compose("train_complexity", common + [f"out_dir={tmp_path}/run_cx", f"export_dir={tmp_path}/ck/cx"]))
    assert 0.0 <= c["test"]["test/synth/accuracy"] <= 1.0
    p = word_scorer.run(compose("train_word_scorer", common + [f"out_dir={tmp_path}/run_comp", f"export_dir={tmp_path}/ck/comp"]))
    assert 0.0 <= p["test"]["test/trained/answer_kept@r0.5"] <= 1.0
    assert (tmp_path / "ck/comp/adapter_model.safetensors").exists()
    e = embedder_script.run(compose("train_embedder", common + [f"out_dir={tmp_path}/run_emb", f"export_dir={tmp_path}/ck/emb",
                                                               "max_eval_groups=4", "lora.r=4", "task.max_length=32"]))
    assert e["train"]["steps"] == 2 and 0.0 <= e["test"]["test/locomo/tuned_cosine/recall_all@10"] <= 1.0
    assert (tmp_path / "ck/emb/adapter_model.safetensors").exists()
    r = ranker_script.run(compose("train_ranker", [f"out_dir={tmp_path}/run_rk", f"export_dir={tmp_path}/ck/rk", "encoder=hashing",
                                                   f"locomo_path={TINY_LOCOMO}", "locomo_train=0", "locomo_test=1",
                                                   f"lme_path={tmp_path / 'lme.json'}", "k=3",
                                                   f"cache_dir={tmp_path}/rk_cache"]))
    weights = json.loads((tmp_path / "ck/rk/ranker.json").read_text())
    assert weights["features"] == r["weights"]["features"] and len(weights["coef"]) == len(weights["features"])
    assert 0.0 <= r["test"]["test/locomo/ranker/overall/recall_all@budget"] <= 1.0
    assert json.loads((tmp_path / "ck/rk/card.json").read_text())["training"]["n_train_groups"] > 0
    again = ranker_script.run(compose("train_ranker", [f"out_dir={tmp_path}/run_rk2", "export_dir=null", "encoder=hashing", "l2=0.1",
                                                       f"locomo_path={TINY_LOCOMO}", "locomo_train=0", "locomo_test=1",
                                                       f"lme_path={tmp_path / 'lme.json'}", "k=3", f"cache_dir={tmp_path}/rk_cache"]))
    assert again["card"]["training"]["groups_from_cache"]  # the second fit reuses the mined groups
    assert again["card"]["training"]["n_train_groups"] == r["card"]["training"]["n_train_groups"]
    from train import slm as slm_script

    m = slm_script.run(compose("train_slm", common[:4] + [
        f"out_dir={tmp_path}/run_slm", f"export_dir={tmp_path}/ck/slm", f"ranker={tmp_path}/ck/rk", "encoder=hashing",
        f"locomo_path={TINY_LOCOMO}", "locomo_train=0", "locomo_test=1", f"lme_path={tmp_path / 'lme.json'}", "k=3",
        f"cache_dir={tmp_path}/rk_cache", "stack_share=0.5", "top_ns=[0,4]", "alphas=[1.0]", "task.group_size=4"]))
    stack = json.loads((tmp_path / "ck/slm/stack.json").read_text())
    assert stack["top_n"] in (0, 4) and stack["num_layers"] == 3 and stack["alpha"] == 1.0
    assert {"adapter_config.json", "adapter_model.safetensors", "stack.json", "card.json"} <= {p.name for p in (tmp_path / "ck/slm").iterdir()}
    assert 0.0 <= m["test"]["test/locomo/slm/overall/recall_all@budget"] <= 1.0 and "test/locomo/gain/ci_low" in m["test"]
    # the whole-memories gain is reported at that metric's own choice of N, beside the served one
    assert m["test"]["stack/whole_only/top_n"] in (0, 4) and "test/locomo/gain_whole_only/ci_low" in m["test"]


def test_train_configs_compose_with_every_lora_option_and_the_optuna_search():
    for name in ("train_cross_encoder", "train_complexity", "train_word_scorer", "train_embedder"):
        for lora in ("attention", "causal_lm", "full"):
            cfg = compose(name, [f"lora={lora}"])
            assert cfg.lora.enabled == (lora != "full")
    cfg = compose("train_cross_encoder", ["hparams_search=cross_encoder_optuna"])
    assert cfg.metric == "recall_all@10"


def test_sweep_config_names_an_installed_sweeper():
    from hydra import compose as hc
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = hc(config_name="train_cross_encoder", overrides=["hparams_search=cross_encoder_optuna"], return_hydra_config=True)
    assert "optuna" in cfg.hydra.sweeper._target_ and "lora.r" in cfg.hydra.sweeper.params


def test_complexity_refuses_sources_that_leave_no_validation_rows(tmp_path):
    from train import complexity

    row = {"text": "Where does Ana live?", "label": 0, "n_evidence": 1, "type": "single-hop", "source": "locomo", "conversation": "c"}
    for split in ("train", "val", "test"):
        (tmp_path / f"complexity_{split}.jsonl").write_text(json.dumps(row) + "\n" if split != "val" else "")
    with pytest.raises(ValueError, match="no validation rows"):
        complexity.run(compose("train_complexity", [f"data_dir={tmp_path}", "sources=[locomo]", f"out_dir={tmp_path}/run",
                                                    "export_dir=null", "optim.cpu=true"]))
