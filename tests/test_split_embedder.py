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
    from lightmem.retrieval.stage2 import Stage1Selector
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
    int8_e = SentenceTransformerEmbedder(backend="onnx_int8", **kw)
    assert np.sum(int8_e.encode(FACTS) * tv, axis=1).min() > 0.97
    import onnx  # the projection stays fp32 in the int8 graph (quantized, a trained one's vectors fell to cosine -0.1)

    nodes = onnx.load(str(int8_e.graph)).graph.node
    assert any(n.op_type == "MatMulInteger" for n in nodes)
    assert not [n.name for n in nodes if n.name.startswith("/projection/") and n.op_type == "MatMulInteger"]
    # the projection is part of the adapter's fingerprint: the same LoRA without it names other vectors
    assert adapter_fingerprint(folder) != adapter_fingerprint(plain)
    assert adapter_fingerprint(folder) in torch_e.name


# -- the distillation recipe (lightmem/training/doc_encoder.py) on a tiny BERT ------------------------------------
def _student(tiny_models, dim_out=16):
    from lightmem.training.doc_encoder import DistilledEncoder
    from lightmem.training.lora import LoraSpec, apply_lora

    bert = tiny_models.bert("sequence", 1).bert  # the encoder without its head
    return DistilledEncoder(apply_lora(bert, LoraSpec(r=4, alpha=8, dropout=0.0, target_modules=["query", "value"]),
                                       "FEATURE_EXTRACTION"), 64, dim_out)


def test_chunks_hold_texts_of_similar_length_and_every_text_once(tiny_models):
    from lightmem.training.doc_encoder import DocEncoderTask, length_chunks

    texts = [("word " * n).strip() for n in (30, 2, 17, 5, 29, 3, 16, 4)]
    targets = np.arange(len(texts) * 3, dtype=np.float32).reshape(len(texts), 3)
    chunks = length_chunks(tiny_models.tok, texts, targets, DocEncoderTask(chunk=2))
    assert sorted(t for c in chunks for t, _ in c) == sorted(texts) and all(len(c) == 2 for c in chunks)
    assert [[len(t.split()) for t, _ in c] for c in chunks] == [[2, 3], [4, 5], [16, 17], [29, 30]]
    assert all(np.array_equal(v, targets[texts.index(t)]) for c in chunks for t, v in c)  # each target stays with its text


TEXTS = [f"{name} likes {thing} on {day}" for name in ("Ava", "Ben", "Cleo", "Dan", "Eve", "Finn")
         for thing in ("tea", "jazz", "chess", "rain", "maps") for day in ("Monday", "Friday", "noon", "May")]


def test_the_projection_starts_at_the_least_squares_map_to_the_targets(tiny_models):
    import torch

    from lightmem.training.doc_encoder import DocEncoderTask, fidelity, init_projection, tokenize

    task = DocEncoderTask(max_length=32, init_sample=200)
    model = _student(tiny_models)
    with torch.no_grad():  # targets a linear map of the student's own pooled output: least squares recovers it
        g = torch.Generator().manual_seed(1)
        pooled = model.pooled(**tokenize(tiny_models.tok, TEXTS, 32))
        targets = torch.nn.functional.normalize(pooled @ torch.randn(64, 16, generator=g) + torch.randn(16, generator=g), dim=1)
    assert fidelity(model, tiny_models.tok, TEXTS, targets.numpy(), task)["cosine"] < 0.5  # the random start
    start = init_projection(model, tiny_models.tok, TEXTS, targets.numpy(), task)
    assert start > 0.99 and fidelity(model, tiny_models.tok, TEXTS, targets.numpy(), task)["cosine"] > 0.99


def test_training_on_the_cosine_loss_brings_the_student_to_its_targets(tiny_models, tmp_path):
    import random

    import torch

    from lightmem.training.doc_encoder import DocEncoderTask, batcher, cosine_loss, fidelity, length_chunks

    tok, task = tiny_models.tok, DocEncoderTask(max_length=32, chunk=8)
    targets = np.random.default_rng(0).normal(size=(len(TEXTS), 16)).astype(np.float32)
    targets /= np.linalg.norm(targets, axis=1, keepdims=True)
    model = _student(tiny_models)
    before = fidelity(model, tok, TEXTS, targets, task)["cosine"]
    make, chunks = batcher(tok, task), length_chunks(tok, TEXTS, targets, task)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    rng = random.Random(0)
    for _ in range(10):
        rng.shuffle(chunks)
        for c in chunks:
            loss = cosine_loss(model, make([c], rng))
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert fidelity(model, tok, TEXTS, targets, task)["cosine"] > before + 0.1  # 0.00 -> 0.20 measured
    model.save_pretrained(str(tmp_path / "best"))
    assert {"adapter_model.safetensors", "adapter_config.json", PROJECTION_FILE} <= {p.name for p in (tmp_path / "best").iterdir()}


def test_recall_counts_a_question_only_when_all_its_evidence_is_in_the_top_k():
    from lightmem.training.doc_encoder import recall_with, vector_fidelity

    docs = np.eye(4, dtype=np.float32)
    q = np.array([[1.0, 0.9, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]], dtype=np.float32)
    assert recall_with(q, docs, [[0, 1], [2, 3]], k=2) == 0.5  # the second misses doc 3 at k=2
    assert recall_with(q, docs, [[0, 1], [2, 3]], k=4) == 1.0
    fid = vector_fidelity(docs, docs[[0, 1, 2, 2]])
    assert fid["cosine"] == 0.75 and fid["cosine_min"] == 0.0


def test_query_cache_size_reaches_the_query_encoder():
    class Cached(HashingEmbedder):
        size = None

        def set_query_cache_size(self, size: int) -> None:
            self.size = size

    q = Cached(64)
    SplitEmbedder(q, HashingEmbedder(64), query_cache_size=0)
    assert q.size == 0


def test_a_distillation_set_keeps_texts_and_unit_vectors_and_refuses_what_is_not_one(tmp_path):
    from lightmem.errors import InvalidInputError
    from lightmem.training.doc_encoder import load_distill_set, save_distill_set

    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(3, 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    path = save_distill_set(tmp_path / "set.npz", teacher="t", texts=["a", "b", "ü c"], targets=vecs, val=["v"],
                            val_targets=vecs[:1], recipe={"writer": {"k": 1}})
    data = load_distill_set(path)
    assert data["texts"] == ["a", "b", "ü c"] and data["val"] == ["v"] and data["teacher"] == "t"
    assert data["recipe"] == {"writer": {"k": 1}} and data["targets"].dtype == np.float32
    assert np.allclose(np.linalg.norm(data["targets"], axis=1), 1.0, atol=1e-6)
    assert np.sum(data["targets"] * vecs, axis=1).min() > 0.9999  # float16 on disk costs nothing a cosine sees
    assert not list(tmp_path.glob("*.tmp"))
    (tmp_path / "bad.npz").write_bytes(b"not a set")
    with pytest.raises(InvalidInputError, match="not a distillation set"):
        load_distill_set(tmp_path / "bad.npz")
    (tmp_path / "cut.npz").write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # a copy cut short
    with pytest.raises(InvalidInputError, match="not a distillation set"):
        load_distill_set(tmp_path / "cut.npz")


def test_a_distillation_set_made_another_way_or_by_another_teacher_is_refused(tmp_path):
    from omegaconf import OmegaConf

    from lightmem.errors import InvalidInputError
    from lightmem.training.doc_encoder import distill_set, save_distill_set, set_recipe

    data = tmp_path / "conv.json"
    data.write_text("[]")
    cfg = OmegaConf.create({"writer": {"_target_": "lightmem.roles.writer.TurnWriter", "compact": True}, "locomo_train": "0-2",
                            "locomo_path": str(data), "lme_path": str(data), "lme_s_path": None, "val_texts": 3,
                            "optim": {"seed": 0}, "distill_set": str(tmp_path / "set.npz")})
    vec = np.eye(2, dtype=np.float32)
    save_distill_set(cfg.distill_set, teacher="t", texts=["a", "b"], targets=vec, val=["v"], val_targets=vec[:1],
                     recipe=set_recipe(cfg))
    assert distill_set(cfg, None, None)["texts"] == ["a", "b"]  # no teacher needed once the set exists

    class Teacher:
        name = "another"

    with pytest.raises(InvalidInputError, match="vectors of t"):
        distill_set(cfg, Teacher(), None)
    data.write_text("[ ]")  # the data file changed: the texts it would give may differ
    with pytest.raises(InvalidInputError, match="another writer, split or data file"):
        distill_set(cfg, None, None)
