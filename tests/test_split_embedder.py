"""Queries and memories through two encoders of one space: the split embedder, a document encoder's projection
(served by torch and ONNX alike), the pair's name in a store, and the distillation recipe's pieces."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from lightmem.errors import StoreError
from lightmem.models.embedder import PROJECTION_FILE, HashingEmbedder, adapter_fingerprint
from lightmem.models.split import SEPARATOR, SplitEmbedder, split_name

FACTS = ["Ava moved to Porto in 2021 for a job at a bakery.", "Ben's dog is called Biscuit and loves the beach.",
         "Cleo plays the cello in a string quartet every Friday.", "Dan is training for the Berlin marathon in September."]


class Recording(HashingEmbedder):
    def __init__(self, dim: int, name: str) -> None:
        super().__init__(dim, name=name)
        self.calls: list[tuple[list[str], bool]] = []

    def encode(self, texts, *, is_query: bool = False):
        self.calls.append((list(texts), is_query))
        return super().encode(texts, is_query=is_query)


def test_queries_go_to_one_encoder_and_memories_to_the_other():
    q, d = Recording(64, "q"), Recording(64, "d")
    split = SplitEmbedder(q, d)
    split.encode(["where does Ava live?"], is_query=True)
    split.encode(FACTS)
    assert q.calls == [(["where does Ava live?"], True)] and d.calls == [(FACTS, False)]
    assert split.dim == 64 and split.name == f"q-64{SEPARATOR}d-64" and split_name(split.name) == ("q-64", "d-64")
    assert split_name("all-mpnet-base-v2+lora-abc") is None
    assert split.token_counter() is q.token_counter() or split.token_counter().name == q.token_counter().name


def test_encoders_of_two_sizes_are_refused():
    with pytest.raises(ValueError, match="one vector space"):
        SplitEmbedder(HashingEmbedder(64), HashingEmbedder(32))


def test_the_document_side_reads_and_fills_a_vector_cache(tmp_path):
    d = Recording(64, "d")
    split = SplitEmbedder(Recording(64, "q"), d, vector_cache=str(tmp_path / "v.sqlite"))
    first = split.encode(FACTS)
    again = SplitEmbedder(Recording(64, "q"), d, vector_cache=str(tmp_path / "v.sqlite")).encode(FACTS)
    assert np.array_equal(first, again) and len(d.calls) == 1  # the second run read every vector back


def test_a_store_written_by_a_split_embedder_reopens_with_the_same_pair(tmp_path):
    from lightmem.memory import Memory
    from lightmem.models.embedder import embedder_for
    from lightmem.roles.selector import Stage1Selector
    from lightmem.stores.factory import stored_embedder

    split = SplitEmbedder(HashingEmbedder(64), HashingEmbedder(64))  # names lightmem can rebuild
    m = Memory.open(tmp_path / "s", embedder=split, selector=Stage1Selector())
    for fact in FACTS:
        m.add(fact, user_id="u")
    m.close()
    assert stored_embedder(tmp_path / "s") == split.name
    again = embedder_for(split.name)
    assert isinstance(again, SplitEmbedder) and again.name == split.name == f"hashing-64{SEPARATOR}hashing-64"
    assert np.array_equal(again.encode(FACTS), split.encode(FACTS))
    with pytest.raises(StoreError, match="embedder"):
        Memory.open(tmp_path / "s", embedder=HashingEmbedder(64), selector=Stage1Selector())


# -- a document encoder with a projection: MiniLM (its retrieval adapter) + a random 384 -> 768 map ----------------
@pytest.fixture(scope="module")
def projected(tmp_path_factory):
    import torch
    from safetensors.torch import save_file

    from lightmem.models.embedder import tuned_adapter

    folder = tmp_path_factory.mktemp("docs-adapter")
    src = tuned_adapter("embedder_minilm")
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        shutil.copy2(f"{src}/{name}", folder / name)
    g = torch.Generator().manual_seed(0)
    save_file({"weight": torch.randn(768, 384, generator=g) / 20, "bias": torch.randn(768, generator=g) / 50},
              str(folder / PROJECTION_FILE))
    return folder, str(tmp_path_factory.mktemp("onnx-cache")), src


@pytest.mark.slow
def test_a_projection_serves_the_same_vectors_on_torch_and_onnx_and_changes_the_name(projected):
    from lightmem.models.embedder import SentenceTransformerEmbedder

    folder, cache, plain = projected
    kw = {"adapter": str(folder), "cache_dir": cache, "query_cache_size": 0}
    torch_e, onnx_e = SentenceTransformerEmbedder(backend="torch", **kw), SentenceTransformerEmbedder(backend="onnx", **kw)
    tv, ov = torch_e.encode(FACTS), onnx_e.encode(FACTS)
    assert tv.shape == ov.shape == (len(FACTS), 768) and torch_e.dim == onnx_e.dim == 768
    assert np.abs(tv - ov).max() < 1e-5 and np.allclose(np.linalg.norm(ov, axis=1), 1.0, atol=1e-5)
    int8 = SentenceTransformerEmbedder(backend="onnx_int8", **kw).encode(FACTS)
    assert np.sum(int8 * tv, axis=1).min() > 0.97
    # the projection is part of the adapter's fingerprint: the same LoRA without it names other vectors
    assert adapter_fingerprint(folder) != adapter_fingerprint(plain)
    assert adapter_fingerprint(folder) in torch_e.name
