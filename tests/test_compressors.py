"""The word scorers and the segmenter's attention on real models: the committed checkpoint, a
full (LLMLingua-2 format) token-classification folder, and the Eq. 2 cross-entropy scorer."""
from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import ROOT

CKPT = ROOT / "checkpoints" / "word_scorer"


@pytest.fixture(scope="module")
def compressor():
    from lightmem.models.word_scorer import TokenClassifierWordScorer

    return TokenClassifierWordScorer(str(CKPT), rate=0.6, device="cpu")


@pytest.mark.slow  # the committed compressor on the packaged MiniLM
def test_a_full_token_classifier_folder_loads_like_an_llmlingua2_checkpoint(compressor, tmp_path):
    from lightmem.models.word_scorer import TokenClassifierWordScorer

    compressor.model.save_pretrained(tmp_path / "full")  # config.json + weights, no adapter
    compressor.tok.save_pretrained(tmp_path / "full")
    full = TokenClassifierWordScorer(str(tmp_path / "full"), rate=0.6, device="cpu")
    words = "Caroline went to the LGBTQ support group yesterday and loved it".split()
    assert np.allclose(full.word_probs(words), compressor.word_probs(words), atol=1e-5)


@pytest.mark.slow  # the committed compressor on the packaged MiniLM
def test_batched_scores_match_one_by_one_and_long_inputs_are_windowed(compressor):
    docs = [["hello", "there"], "I adopted a puppy named Max last week".split(), [f"w{i}" for i in range(450)]]
    batched = compressor.word_scores_many(docs)
    assert [len(b) for b in batched] == [2, 8, 450]
    for d, b in zip(docs, batched):
        assert np.allclose(compressor.word_probs(d), b, atol=1e-5)


@pytest.mark.slow  # the committed compressor on the packaged MiniLM
def test_fit_compresses_until_the_limit(compressor):
    text = " ".join(f"topic{i % 50} detail" for i in range(2000))
    short = compressor.fit(text, 128, compressor.count_tokens)
    assert compressor.count_tokens(short) <= 128 and set(short.split()) <= set(text.split())


@pytest.mark.slow  # the committed compressor on the packaged MiniLM
def test_segmenter_attention_on_the_compressor_encoder(compressor):
    from lightmem.sensory.segmenter import TopicSegmenter

    seg = TopicSegmenter(compressor.model, compressor.tok, method="attention")
    texts = ["I love hiking", "we climbed a mountain", "the view was great", "my cat is sick", "the vet said rest",
             "I bought a new car"]
    m = seg.attention_matrix(texts)
    assert m.shape == (6, 6) and np.isfinite(m).all() and (m >= 0).all()
    assert all(0 < b < 6 for b in seg.boundaries(texts))
    assert compressor.model.config._attn_implementation != "eager"  # restored for compression


def test_cross_entropy_compressor_keeps_the_least_predictable_words(tiny_models):
    from lightmem.models.word_scorer import CrossEntropyWordScorer

    lm, tok = tiny_models.gpt2().eval(), tiny_models.tok
    ce = CrossEntropyWordScorer.from_objects(lm, tok, rate=0.5, max_tokens=16)
    words = "the quick brown fox jumps over the lazy dog again and again".split() * 3
    scores = ce.word_scores_many([words])[0]
    assert len(scores) == len(words) and math.isinf(scores[0]) and all(s > 0 for s in scores)
    out = ce.compress(" ".join(words))
    assert out.split()[0] == "the" and len(out.split()) == math.ceil(0.5 * len(words))


def test_the_former_names_of_the_word_scorers_still_resolve_with_a_warning(monkeypatch):
    import lightmem.models.word_scorer as word_scorer
    from lightmem import deprecation

    monkeypatch.setattr(deprecation, "_warned", set())  # each old name warns once per process
    for old, new in (("Compressor", "WordScorer"), ("CrossEntropyCompressor", "CrossEntropyWordScorer"),
                     ("TokenClassifierCompressor", "TokenClassifierWordScorer")):
        with pytest.warns(DeprecationWarning, match=f"{old} is now"):
            assert getattr(word_scorer, old) is getattr(word_scorer, new)


def test_a_checkpoint_folder_with_its_former_name_is_still_read(tmp_path, monkeypatch):
    from lightmem import deprecation
    from lightmem.models.registry import checkpoint_path

    monkeypatch.setattr(deprecation, "_warned", set())
    monkeypatch.setenv("LIGHTMEM_CHECKPOINTS", str(tmp_path))
    (tmp_path / "compressor").mkdir()
    with pytest.warns(DeprecationWarning, match="word_scorer"):
        assert checkpoint_path("word_scorer") == tmp_path / "compressor"
    (tmp_path / "word_scorer").mkdir()
    assert checkpoint_path("word_scorer") == tmp_path / "word_scorer"
