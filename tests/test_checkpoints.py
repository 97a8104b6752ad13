"""The committed checkpoints: adapters only, with a model card, and they load where retrieval uses them."""
from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import ROOT

NAMES = ("embedder", "embedder_minilm", "cross_encoder", "complexity", "word_scorer")


@pytest.mark.parametrize("name", NAMES)
def test_checkpoint_holds_only_an_adapter_and_a_card(name):
    folder = ROOT / "checkpoints" / name
    files = {p.name for p in folder.iterdir()}
    assert files == {"adapter_config.json", "adapter_model.safetensors", "card.json", "README.md"}
    assert (folder / "adapter_model.safetensors").stat().st_size < 5_000_000  # small enough to commit
    card = json.loads((folder / "card.json").read_text())
    for key in ("base_model", "data_sha256", "config", "metrics", "commit", "training", "params"):
        assert card[key], key
    assert card["params"]["trainable"] < card["params"]["total"] / 10


def test_ranker_checkpoint_holds_its_weights_and_a_card():
    from lightmem.retrieval.features import FEATURES

    folder = ROOT / "checkpoints" / "ranker"
    assert {p.name for p in folder.iterdir()} == {"ranker.json", "card.json", "README.md"}
    weights = json.loads((folder / "ranker.json").read_text())
    assert tuple(weights["features"]) == FEATURES and len(weights["coef"]) == len(FEATURES) == len(weights["mean"])
    card = json.loads((folder / "card.json").read_text())
    for key in ("base_model", "data_sha256", "config", "metrics", "commit", "training"):
        assert card[key], key
    held_out = card["metrics"]
    assert held_out["test/locomo/ranker/overall/recall_all@budget"] > held_out["test/locomo/stage1/overall/recall_all@budget"]


def test_the_served_trees_ranker_was_fitted_on_the_linear_rankers_groups():
    from lightmem.retrieval.features import FEATURES
    from lightmem.retrieval.trees import ranker_scorer

    folder = ROOT / "checkpoints" / "ranker_trees"
    assert {p.name for p in folder.iterdir()} == {"ranker.json", "card.json", "README.md"}
    model = json.loads((folder / "ranker.json").read_text())
    assert model["kind"] == "trees" and tuple(model["features"]) == FEATURES and len(model["trees"]) == model["params"]["max_iter"]
    assert ranker_scorer(model)(np.zeros((3, len(FEATURES)))).shape == (3,)
    card = json.loads((folder / "card.json").read_text())
    linear = json.loads((ROOT / "checkpoints" / "ranker" / "card.json").read_text())
    assert card["data_sha256"] == linear["data_sha256"]  # the same mined groups
    assert card["config"]["model"] == "trees" and card["config"]["trees"] == model["params"]
    for source in ("locomo", "longmemeval"):
        assert card["metrics"][f"test/{source}/ranker_served/overall/recall_all@budget"] > \
            card["metrics"][f"test/{source}/stage1_served/overall/recall_all@budget"]


@pytest.mark.slow
def test_default_memory_uses_the_trained_embedder_and_ranker(tmp_path):
    from lightmem.memory import Memory
    from lightmem.models.embedder import HashingEmbedder
    from lightmem.retrieval.stage2 import LearnedRanker

    m = Memory.open(tmp_path / "new")
    try:
        assert isinstance(m.retriever.selector, LearnedRanker) and m.retriever.candidate_factor == 5
        assert m.retriever.selector.kind == "trees"
        assert m.embedder.name.startswith("all-mpnet-base-v2+lora-") and m.store.embedder == m.embedder.name
        m.add([{"role": "user", "content": "My sister Anna moved to Lisbon."}, {"role": "user", "content": "I like tea."}], "u")
        hits = m.search("Where does Anna live?", "u", k=1)
        assert len(hits) == 1 and "ranker" in hits[0].scores and "Lisbon" in hits[0].item.text
    finally:
        m.close()
    again = Memory.open(tmp_path / "new")  # reopened without an embedder: the one that wrote it
    try:
        assert again.embedder.name == m.embedder.name and len(again.search("Where does Anna live?", "u", k=1)) == 1
    finally:
        again.close()
    Memory.open(tmp_path / "hashed", embedder=HashingEmbedder(64)).close()
    hashed = Memory.open(tmp_path / "hashed")  # a store written by another embedder keeps it
    try:
        assert isinstance(hashed.embedder, HashingEmbedder) and hashed.embedder.dim == 64
    finally:
        hashed.close()


@pytest.mark.slow
def test_trained_complexity_and_compressor_load_and_run():
    from lightmem.models.word_scorer import TokenClassifierWordScorer
    from lightmem.roles.complexity import TrainedComplexity

    c = TrainedComplexity(str(ROOT / "checkpoints" / "complexity"), device="cpu")
    assert all(0.0 <= p <= 1.0 for p in c.probabilities(["What is Ann's dog called?", "Why did they move twice after the wedding?"]))
    comp = TokenClassifierWordScorer(str(ROOT / "checkpoints" / "word_scorer"), rate=0.5, device="cpu")
    text = "Yeah, so I went to the pottery workshop in Lisbon with my sister yesterday and it was honestly great"
    out = comp.compress(text)
    assert 0 < len(out.split()) <= len(text.split()) // 2 + 1


@pytest.mark.parametrize("name", ("embedder", "embedder_minilm", "ranker", "ranker_trees", "slm", "cross_encoder", "complexity",
                                  "word_scorer"))
def test_every_checkpoint_names_a_commit_one_can_check_out(name):
    """A card exported from a tree with uncommitted changes (``+dirty``) names code nobody can check out."""
    import re

    card = json.loads((ROOT / "checkpoints" / name / "card.json").read_text())
    assert re.fullmatch(r"[0-9a-f]{40}", card["commit"]), card["commit"]
    assert f"commit: `{card['commit']}`" in (ROOT / "checkpoints" / name / "README.md").read_text()


def test_a_card_commit_is_dirty_for_changed_code_and_not_for_changed_checkpoints(tmp_path):
    """``make train`` exports one checkpoint after another: a later step must not call the tree dirty
    because an earlier step wrote its checkpoint, but any uncommitted code change must show."""
    import subprocess

    from lightmem.training.export import git_commit

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "checkpoints" / "ranker").mkdir(parents=True)
    (tmp_path / "checkpoints" / "ranker" / "ranker.json").write_text("{}")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    clean = git_commit(tmp_path / "checkpoints")  # run from a subfolder: the whole tree still counts
    assert len(clean) == 40 and not clean.endswith("+dirty")
    (tmp_path / "checkpoints" / "ranker" / "ranker.json").write_text('{"coef": [1]}')
    assert git_commit(tmp_path) == clean
    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_commit(tmp_path) == clean + "+dirty"
    assert git_commit(tmp_path / "checkpoints") == clean + "+dirty"
