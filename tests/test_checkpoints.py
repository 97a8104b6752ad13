"""The committed checkpoints: adapters only, with a model card, and they load where retrieval uses them."""
from __future__ import annotations

import json

import pytest
from conftest import ROOT

NAMES = ("selector", "complexity", "compressor")


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


@pytest.mark.slow
def test_default_memory_uses_the_trained_selector(tmp_path):
    from lightmem.memory import Memory
    from lightmem.models.embedder import HashingEmbedder
    from lightmem.roles.selector import CrossEncoderSelector

    m = Memory.open(tmp_path, embedder=HashingEmbedder(64))
    try:
        assert isinstance(m.retriever.selector, CrossEncoderSelector)
        m.add([{"role": "user", "content": "My sister Anna moved to Lisbon."}, {"role": "user", "content": "I like tea."}], "u")
        hits = m.search("Where does Anna live?", "u", k=1)
        assert len(hits) == 1 and "selector" in hits[0].scores
    finally:
        m.close()


@pytest.mark.slow
def test_trained_complexity_and_compressor_load_and_run():
    from lightmem.roles.complexity import TrainedComplexity
    from lightmem.sensory.compressor import TokenClassifierCompressor

    c = TrainedComplexity(str(ROOT / "checkpoints" / "complexity"), device="cpu")
    assert all(0.0 <= p <= 1.0 for p in c.probabilities(["What is Ann's dog called?", "Why did they move twice after the wedding?"]))
    comp = TokenClassifierCompressor(str(ROOT / "checkpoints" / "compressor"), rate=0.5, device="cpu")
    text = "Yeah, so I went to the pottery workshop in Lisbon with my sister yesterday and it was honestly great"
    out = comp.compress(text)
    assert 0 < len(out.split()) <= len(text.split()) // 2 + 1
