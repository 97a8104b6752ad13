"""The ONNX encoder backends: same vectors as torch (fp32), close ones under a distinct name (int8),
a disk cache that is reused and never left half-written."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from lightmem.errors import StoreError
from lightmem.models.onnx_encoder import length_batches, write_atomically

TEXTS = [
    "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
    "Melanie: I painted a lake sunrise last year, it's special to me.",
    "Hello!",
    "",
    "Jon: my dance studio opened on 20 June 2023 and the first class was full " * 30,  # past max_seq_length
    "Gina lost her job at Door Dash in January.",
]
FACTS = ["Ava moved to Porto in 2021 for a job at a bakery.", "Ben's dog is called Biscuit and loves the beach.",
         "Cleo plays the cello in a string quartet every Friday.", "Dan is training for the Berlin marathon in September.",
         "Eve adopted two cats from the shelter last spring.", "Finn is learning Japanese to travel to Kyoto."]
QUERIES = ["Where does Ava live?", "What is the name of Ben's dog?", "Which instrument does Cleo play?",
           "What race is Dan preparing for?", "How many cats did Eve adopt?", "Which language is Finn studying?"]


# -- length-bucketed batches ---------------------------------------------------------------------
def test_length_batches_cover_every_row_once_and_pad_little():
    lengths = [256, 250, 240, 120, 118, 117, 20, 19, 12, 9, 8, 3, 3]  # sorted longest first
    rows = list(range(100, 100 + len(lengths)))
    batches = length_batches(lengths, rows, batch_size=4)
    assert [r for b in batches for r in b] == rows  # each row once, order kept
    assert all(1 <= len(b) <= 4 for b in batches)
    width = dict(zip(rows, lengths))
    for b in batches:  # no row pads past max(8 tokens, 25%) of its run's longest
        assert all(width[b[0]] - width[r] <= max(8, 0.25 * width[b[0]]) for r in b)
    # a 256-token row never shares a batch with a short one, equal rows fill batches
    assert batches[0] == [100, 101, 102] and length_batches([5] * 9, list(range(9)), 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]
    assert length_batches([], [], 4) == []


# -- the cache file: atomic writes ------------------------------------------------------------
def test_a_failed_write_leaves_no_file_and_keeps_the_old_one(tmp_path):
    target = tmp_path / "cache" / "model.onnx"

    def broken(tmp):
        tmp.write_bytes(b"half a graph")
        raise RuntimeError("export died")

    with pytest.raises(RuntimeError, match="export died"):
        write_atomically(target, broken)
    assert list(target.parent.iterdir()) == []
    write_atomically(target, lambda tmp: tmp.write_bytes(b"whole graph"))
    with pytest.raises(RuntimeError):
        write_atomically(target, broken)
    assert target.read_bytes() == b"whole graph" and list(target.parent.iterdir()) == [target]


@pytest.mark.multiprocess
def test_a_killed_writer_never_leaves_a_readable_partial_file(tmp_path):
    target = tmp_path / "model.onnx"
    script = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from lightmem.models.onnx_encoder import length_batches, write_atomically
        def write(tmp):
            tmp.write_bytes(b"x" * 1000)
            os.kill(os.getpid(), signal.SIGKILL)   # killed mid-export
        write_atomically(Path({str(target)!r}), write)
    """)
    assert subprocess.run([sys.executable, "-c", script]).returncode == -9
    assert not target.exists()
    [orphan] = tmp_path.glob("model.onnx.*.tmp")
    old = time.time() - 2 * 3600
    os.utime(orphan, (old, old))
    write_atomically(target, lambda tmp: tmp.write_bytes(b"whole graph"))  # the next export sweeps stale temp files
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"] and target.read_bytes() == b"whole graph"


# -- names and errors, checked before any model loads -------------------------------------------
def test_int8_names_refuse_the_float_backends_and_back(tmp_path):
    from lightmem.models.embedder import SentenceTransformerEmbedder, embedder_for

    with pytest.raises(StoreError, match="backend='onnx_int8'"):
        embedder_for("all-MiniLM-L6-v2+int8", backend="torch")
    with pytest.raises(StoreError, match="backend='onnx'"):
        embedder_for("all-MiniLM-L6-v2+lora-000000000000", backend="onnx_int8")
    with pytest.raises(StoreError, match="lora-000000000000"):  # the adapter check still applies under +int8
        embedder_for("all-MiniLM-L6-v2+lora-000000000000+int8")
    with pytest.raises(ValueError, match="onnx_int8"):
        SentenceTransformerEmbedder(backend="tensorrt")
    with pytest.raises(ValueError, match="CPU"):
        SentenceTransformerEmbedder(backend="onnx", device="cuda", cache_dir=str(tmp_path))


def test_auto_backend_is_onnx_on_the_cpu_and_torch_on_a_gpu(monkeypatch):
    import lightmem.models.embedder as E

    assert E.resolve_backend("auto", "cpu") == "onnx"
    assert E.resolve_backend("torch", "cpu") == "torch" and E.resolve_backend("onnx_int8", "auto") == "onnx_int8"
    monkeypatch.setattr(E, "pick_device", lambda device: "cuda:0")
    assert E.resolve_backend("auto", "auto") == "torch"
    with pytest.raises(ValueError, match="auto, torch"):
        E.resolve_backend("tensorrt", "cpu")


def test_a_new_store_encodes_at_128_tokens_int8_on_the_cpu_and_fp32_torch_on_a_gpu(monkeypatch):
    import lightmem.models.embedder as E

    monkeypatch.setattr(E, "pick_device", lambda device: "cpu")
    assert E.default_encoding() == {"max_seq_length": 128, "backend": "onnx_int8", "device": "auto"}
    monkeypatch.setattr(E, "pick_device", lambda device: "cuda:0")
    assert E.default_encoding()["backend"] == "torch"
    assert E.length_suffix(256) == "" and E.length_suffix(128) == "+len128"


def test_missing_onnxruntime_names_the_package(tmp_path, monkeypatch):
    from lightmem.models.embedder import SentenceTransformerEmbedder

    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails as if not installed
    with pytest.raises(ImportError, match="pip install onnxruntime"):
        SentenceTransformerEmbedder(backend="onnx", cache_dir=str(tmp_path))
    assert not (tmp_path / "onnx").exists()  # refused before exporting anything


# -- the real MiniLM (with its trained adapter, checkpoints/embedder_minilm) ----------------------------
@pytest.fixture(scope="module")
def encoders(tmp_path_factory):
    from lightmem.models.embedder import SentenceTransformerEmbedder, tuned_adapter

    cache = str(tmp_path_factory.mktemp("onnx-cache"))
    kw = {"adapter": tuned_adapter("embedder_minilm"), "cache_dir": cache, "query_cache_size": 0}
    return {b: SentenceTransformerEmbedder(backend=b, **kw) for b in ("torch", "onnx", "onnx_int8")}, cache


@pytest.mark.slow
def test_onnx_vectors_match_torch_under_the_same_name(encoders):
    enc, _ = encoders
    torch_v, onnx_v = enc["torch"].encode(TEXTS), enc["onnx"].encode(TEXTS)
    assert onnx_v.shape == torch_v.shape == (len(TEXTS), 384) and onnx_v.dtype == np.float32
    assert np.min(np.sum(torch_v * onnx_v, axis=1)) > 0.9999 and np.abs(torch_v - onnx_v).max() < 1e-5
    # one at a time (the query path) gives what the length-bucketed batch gave
    single = np.stack([enc["onnx"].encode([t], is_query=True)[0] for t in TEXTS])
    assert np.abs(single - onnx_v).max() < 1e-5
    assert enc["onnx"].name == enc["torch"].name
    assert enc["onnx"].token_counter().count(TEXTS) == enc["torch"].token_counter().count(TEXTS)


@pytest.mark.slow
def test_int8_vectors_are_close_rank_the_same_and_carry_their_own_name(encoders):
    enc, _ = encoders
    sentences = FACTS + QUERIES
    cos = np.sum(enc["onnx"].encode(sentences) * enc["onnx_int8"].encode(sentences), axis=1)
    assert cos.mean() > 0.99 and cos.min() > 0.985
    q8 = enc["onnx_int8"].encode(TEXTS)  # the edge cases (empty, truncated) stay close too
    assert np.sum(enc["onnx"].encode(TEXTS) * q8, axis=1).min() > 0.97
    assert np.allclose(np.linalg.norm(q8, axis=1), 1.0, atol=1e-5)
    top1 = {b: (enc[b].encode(QUERIES, is_query=True) @ enc[b].encode(FACTS).T).argmax(1).tolist() for b in ("torch", "onnx_int8")}
    assert top1["onnx_int8"] == top1["torch"] == list(range(len(QUERIES)))
    assert enc["onnx_int8"].name == enc["torch"].name + "+int8"


@pytest.mark.slow
def test_an_int8_vector_does_not_depend_on_the_texts_encoded_with_it(encoders):
    # Dynamic int8 quantization scales over a whole run: texts run one at a time, so a memory added on its own,
    # in a session, or in a background indexer's batch gets the same vector (and ingest order cannot move rankings).
    enc, _ = encoders
    sentences = FACTS + QUERIES + TEXTS
    together = enc["onnx_int8"].encode(sentences)
    alone = np.stack([enc["onnx_int8"].encode([t])[0] for t in sentences])
    reordered = enc["onnx_int8"].encode(sentences[::-1])[::-1]
    assert np.array_equal(together, alone) and np.array_equal(together, reordered)


@pytest.mark.slow
def test_a_store_opens_only_with_the_backend_family_that_wrote_it(encoders, tmp_path):
    from lightmem.memory import Memory
    from lightmem.models.embedder import embedder_for
    from lightmem.retrieval.stage2 import Stage1Selector
    from lightmem.stores.factory import stored_embedder

    enc, _ = encoders
    m = Memory.open(tmp_path / "int8", embedder=enc["onnx_int8"], selector=Stage1Selector())
    for fact in FACTS:
        m.add(fact, user_id="u")
    m.close()
    with pytest.raises(StoreError, match=r"\+int8"):
        Memory.open(tmp_path / "int8", embedder=enc["torch"], selector=Stage1Selector())
    stored = stored_embedder(tmp_path / "int8")
    assert stored == enc["onnx_int8"].name
    with pytest.raises(StoreError, match="backend='onnx_int8'"):
        embedder_for(stored, backend="onnx")
    Memory.open(tmp_path / "torch", embedder=enc["torch"], selector=Stage1Selector()).close()
    with pytest.raises(StoreError, match="embedder"):
        Memory.open(tmp_path / "torch", embedder=enc["onnx_int8"], selector=Stage1Selector())
    # an fp32 ONNX embedder writes the name torch writes, so it opens a torch-written store
    Memory.open(tmp_path / "torch", embedder=enc["onnx"], selector=Stage1Selector()).close()


@pytest.mark.slow
def test_embedder_for_rebuilds_the_int8_embedder_from_its_name(encoders, monkeypatch):
    from lightmem.models import embedder as embedder_mod

    enc, cache = encoders
    built = {}
    real = embedder_mod.SentenceTransformerEmbedder

    def recording(*args, **kw):  # keep the rebuilt embedder on the module's cache (no fresh export)
        built.update(kw)
        return real(*args, **{**kw, "cache_dir": cache})

    monkeypatch.setattr(embedder_mod, "SentenceTransformerEmbedder", recording)
    again = embedder_mod.embedder_for(enc["onnx_int8"].name)
    assert built["backend"] == "onnx_int8" and again.name == enc["onnx_int8"].name
    assert np.allclose(again.encode(FACTS), enc["onnx_int8"].encode(FACTS), atol=1e-6)


@pytest.mark.slow
def test_a_shorter_read_length_is_named_and_rebuilt_from_the_name(encoders, monkeypatch, tmp_path):
    from lightmem.memory import Memory
    from lightmem.models import embedder as embedder_mod
    from lightmem.retrieval.stage2 import Stage1Selector

    enc, cache = encoders
    short = embedder_mod.SentenceTransformerEmbedder(backend="onnx_int8", max_seq_length=32, adapter=embedder_mod.tuned_adapter("embedder_minilm"),
                                                     cache_dir=cache, query_cache_size=0)
    assert short.name == enc["onnx_int8"].name.removesuffix("+int8") + "+len32+int8"
    long_text = TEXTS[4]  # past 32 tokens: its vector depends on the read length
    assert np.sum(short.encode([long_text]) * enc["onnx_int8"].encode([long_text])) < 0.999
    built = {}
    real = embedder_mod.SentenceTransformerEmbedder
    monkeypatch.setattr(embedder_mod, "SentenceTransformerEmbedder",
                        lambda *a, **kw: built.update(kw) or real(*a, **{**kw, "cache_dir": cache}))
    again = embedder_mod.embedder_for(short.name)
    assert built["max_seq_length"] == 32 and built["backend"] == "onnx_int8" and again.name == short.name
    assert np.allclose(again.encode(TEXTS), short.encode(TEXTS), atol=1e-6)
    Memory.open(tmp_path / "m", embedder=short, selector=Stage1Selector()).close()
    with pytest.raises(StoreError, match="embedder"):  # the default read length would mix vectors
        Memory.open(tmp_path / "m", embedder=enc["onnx_int8"], selector=Stage1Selector())


@pytest.mark.slow
def test_the_exported_graphs_are_cached_and_reused(encoders, monkeypatch):
    from lightmem.models import onnx_encoder
    from lightmem.models.embedder import SentenceTransformerEmbedder, tuned_adapter

    enc, cache = encoders
    files = sorted((p.name, p.stat().st_mtime_ns) for p in (Path(cache) / "onnx").iterdir())
    assert [n.split(".")[1] for n, _ in files] == ["onnx", "onnx_int8"]  # one fp32 graph, one int8, no temp files

    def no_export(*a, **k):
        raise AssertionError("the cached graph should have been loaded, not exported again")

    monkeypatch.setattr(onnx_encoder, "export_onnx", no_export)
    monkeypatch.setattr(onnx_encoder, "quantize_int8", no_export)
    for backend in ("onnx", "onnx_int8"):
        again = SentenceTransformerEmbedder(backend=backend, adapter=tuned_adapter("embedder_minilm"), cache_dir=cache, query_cache_size=0)
        assert np.array_equal(again.encode(FACTS), enc[backend].encode(FACTS))
    assert sorted((p.name, p.stat().st_mtime_ns) for p in (Path(cache) / "onnx").iterdir()) == files


@pytest.mark.slow
def test_a_model_with_fp32_exceptions_gets_its_own_graph_name_and_store_name(encoders, monkeypatch, tmp_path):
    import shutil

    import onnx

    from lightmem.models import embedder as embedder_mod
    from lightmem.models import onnx_encoder
    from lightmem.models.embedder import SentenceTransformerEmbedder, tuned_adapter

    enc, cache = encoders
    mine = tmp_path / "cache"
    shutil.copytree(cache, mine)  # the fp32 export is reused; the module's cache keeps its two files
    monkeypatch.setitem(onnx_encoder.FP32_MATMULS, "all-MiniLM-L6-v2", r"/layer\.3/output/dense/MatMul$")
    kw = {"adapter": tuned_adapter("embedder_minilm"), "cache_dir": str(mine), "query_cache_size": 0}
    mixed = SentenceTransformerEmbedder(backend="onnx_int8", **kw)
    uniform = SentenceTransformerEmbedder(backend="onnx_int8_all", **kw)
    assert mixed.name.startswith(enc["onnx"].name + "+int8mix-") and uniform.name == enc["onnx_int8"].name
    float_ops = [n.name for n in onnx.load(str(mixed.graph)).graph.node if n.op_type == "MatMul"
                 and n.name.endswith("dense/MatMul")]
    assert float_ops == ["/model/encoder/layer.3/output/dense/MatMul"]  # that one stays fp32, the others are int8
    assert uniform.graph.name.split(".")[1] == "onnx_int8" and mixed.graph.name.split(".")[1].startswith("onnx_int8mix-")
    assert np.allclose(uniform.encode(FACTS), enc["onnx_int8"].encode(FACTS), atol=1e-6)
    cos = np.sum(mixed.encode(FACTS) * enc["onnx"].encode(FACTS), axis=1)
    assert cos.min() > 0.985 and not np.allclose(mixed.encode(FACTS), uniform.encode(FACTS), atol=1e-4)
    real = embedder_mod.SentenceTransformerEmbedder
    monkeypatch.setattr(embedder_mod, "SentenceTransformerEmbedder", lambda *a, **k: real(*a, **{**k, "cache_dir": str(mine)}))
    again = embedder_mod.embedder_for(mixed.name)  # a store written mixed reopens mixed, one written before uniform
    assert again.name == mixed.name and np.allclose(again.encode(FACTS), mixed.encode(FACTS), atol=1e-6)
    assert embedder_mod.embedder_for(uniform.name, backend="onnx_int8_all").name == uniform.name
