"""The sensory stage's token classifier on ONNX Runtime: the compressor's keep probabilities and the
segmenter's attention equal torch's, and the exported graphs are cached per model weights."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import ROOT

from lightmem.models.onnx_encoder import INT8_FORMAT

CKPT = ROOT / "checkpoints" / "word_scorer"
TURNS = ["Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
         "Melanie: wow, that's great! I painted a lake sunrise last year, it's special to me.",
         "Caroline: thanks! I'm thinking of adoption, there's an agency that supports LGBTQ folks.",
         "Melanie: my kids love pottery, we made bowls on Saturday.",
         "Caroline: I bought a new car last week, a red one.",
         "Melanie: nice! how is your job search going?"]


@pytest.fixture(scope="module")
def pair():
    from lightmem.models.word_scorer import TokenClassifierWordScorer

    return (TokenClassifierWordScorer(str(CKPT), device="cpu", backend="torch"),
            TokenClassifierWordScorer(str(CKPT), device="cpu", backend="onnx"))


def test_auto_is_onnx_on_the_cpu_and_torch_on_a_gpu():
    from lightmem.models.word_scorer import _resolve_backend

    assert _resolve_backend("auto", "cpu") == "onnx"
    assert _resolve_backend("auto", "cuda:0") == "torch"
    with pytest.raises(ValueError, match="runs on the CPU"):
        _resolve_backend("onnx", "cuda")
    with pytest.raises(ValueError, match="backend must be"):
        _resolve_backend("tensorrt", "cpu")


def test_onnx_keep_probabilities_equal_torchs_including_windowed_long_inputs(pair):
    torch_c, onnx_c = pair
    docs = [t.split() for t in TURNS] + [[f"w{i}" for i in range(450)], ["hi"]]
    a, b = torch_c.word_scores_many(docs), onnx_c.word_scores_many(docs)
    assert [len(x) for x in b] == [len(d) for d in docs]
    assert max(abs(x - y) for u, v in zip(a, b) for x, y in zip(u, v)) < 1e-4
    assert torch_c.compress_many(TURNS, 0.5) == onnx_c.compress_many(TURNS, 0.5)


def test_onnx_attention_equals_torchs_and_gives_the_same_boundaries(pair):
    from lightmem.sensory.segmenter import TopicSegmenter

    torch_c, onnx_c = pair
    assert torch_c.attention_fn((-3, -2, -1)) is None  # torch: the segmenter runs the model itself
    st = TopicSegmenter(torch_c.model, torch_c.tok, method="attention")
    so = TopicSegmenter(None, onnx_c.tok, method="attention", attention=onnx_c.attention_fn((-3, -2, -1)))
    a, b = st.attention_matrix(TURNS), so.attention_matrix(TURNS)
    assert a.shape == b.shape == (6, 6)
    assert np.allclose(a, b, atol=1e-5)
    assert st.boundaries(TURNS) == so.boundaries(TURNS)


def test_graphs_are_cached_per_weights_and_reused(pair, tiny_models):
    from lightmem.models.registry import ModelRegistry
    from lightmem.models.word_scorer import TokenClassifierWordScorer

    _, onnx_c = pair
    onnx_c.compress("warm up")  # the keep graph of the trained checkpoint exists now
    cache = ModelRegistry().cache_dir / "onnx"
    keep = sorted(cache.glob(f"token-classifier-{onnx_c._fingerprint}.keep.*.onnx"))
    assert len(keep) == 1
    mtime = keep[0].stat().st_mtime_ns
    again = TokenClassifierWordScorer(str(CKPT), device="cpu", backend="onnx")
    again.compress("reuse")
    assert again._fingerprint == onnx_c._fingerprint and keep[0].stat().st_mtime_ns == mtime

    tiny = tiny_models.bert("token", num_labels=2).eval()
    other = TokenClassifierWordScorer.from_objects(tiny, tiny_models.tok, backend="onnx")
    torch_tiny = TokenClassifierWordScorer.from_objects(tiny, tiny_models.tok, backend="torch")
    words = "a b c d e f".split()
    assert np.allclose(other.word_probs(words), torch_tiny.word_probs(words), atol=1e-5)
    assert other._fingerprint != onnx_c._fingerprint  # other weights, another graph


def test_the_int8_backend_quantizes_both_graphs_into_their_own_cache_files_and_scores_close_to_fp32(tiny_models):
    from lightmem.models.registry import ModelRegistry
    from lightmem.models.word_scorer import TokenClassifierWordScorer, _resolve_backend

    with pytest.raises(ValueError, match="runs on the CPU"):
        _resolve_backend("onnx_int8", "cuda")
    tiny = tiny_models.bert("token", num_labels=2).eval()
    fp32 = TokenClassifierWordScorer.from_objects(tiny, tiny_models.tok, backend="onnx")
    int8 = TokenClassifierWordScorer.from_objects(tiny, tiny_models.tok, backend="onnx_int8")
    docs = [t.split() for t in TURNS]
    a = np.concatenate([np.asarray(x) for x in fp32.word_scores_many(docs)])
    b = np.concatenate([np.asarray(x) for x in int8.word_scores_many(docs)])
    assert np.abs(a - b).mean() < 0.02 and np.corrcoef(a, b)[0, 1] > 0.9
    ids = tiny_models.tok(TURNS[0])["input_ids"]
    att = int8.attention_fn((-1,))(ids)
    assert att.shape == (len(ids), len(ids)) and np.allclose(att.sum(-1), 1.0, atol=1e-3)
    cache = ModelRegistry().cache_dir / "onnx"
    fmt = f"+int8.{INT8_FORMAT}"  # the int8 format is in the name: a graph quantized another way is made again
    assert {p.name.split(".v")[0] for p in cache.glob(f"token-classifier-{int8._fingerprint}.*{fmt}.v*.onnx")} == {
        f"token-classifier-{int8._fingerprint}.keep{fmt}", f"token-classifier-{int8._fingerprint}.attention_-1{fmt}"}
