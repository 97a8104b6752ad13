"""The persistent vector cache: a text is embedded once per encoder, and another encoder never reads its vectors."""
from __future__ import annotations

import numpy as np

from lightmem.models.embedder import HashingEmbedder
from lightmem.models.vector_cache import VectorCache


def test_texts_are_embedded_once_and_read_back_equal(tmp_path):
    real = HashingEmbedder(32)
    calls: list[list[str]] = []

    def encode(texts):
        calls.append(list(texts))
        return real.encode(texts)

    texts = ["I moved to Oslo.", "My cat is called Miso.", "I moved to Oslo."]
    cache = VectorCache(tmp_path / "v.sqlite", real.name, real.dim)
    first = cache.encode(texts, encode)
    assert calls == [["I moved to Oslo.", "My cat is called Miso."]]  # a repeated text is embedded once
    assert np.array_equal(first, real.encode(texts))
    cache.close()
    again = VectorCache(tmp_path / "v.sqlite", real.name, real.dim)  # another process, later
    assert np.array_equal(again.encode([*texts, "New text."], encode), real.encode([*texts, "New text."]))
    assert calls[-1] == ["New text."] and again.hits == 3 and again.misses == 1


def test_another_encoder_never_reads_the_vectors(tmp_path):
    a, b = HashingEmbedder(32, name="a"), HashingEmbedder(32, name="b")
    VectorCache(tmp_path / "v.sqlite", a.name, 32).encode(["same text"], a.encode)
    other = VectorCache(tmp_path / "v.sqlite", b.name, 32)
    other.encode(["same text"], b.encode)
    assert other.misses == 1 and other.hits == 0


def test_vectors_stored_under_an_older_key_format_are_not_read(tmp_path, monkeypatch):
    import lightmem.models.vector_cache as vc

    real = HashingEmbedder(32)
    monkeypatch.setattr(vc, "KEY_FORMAT", vc.KEY_FORMAT - 1)
    VectorCache(tmp_path / "v.sqlite", real.name, 32).encode(["same text"], lambda t: np.ones((len(t), 32), np.float32))
    monkeypatch.undo()
    now = VectorCache(tmp_path / "v.sqlite", real.name, 32)
    assert np.array_equal(now.encode(["same text"], real.encode), real.encode(["same text"]))
    assert now.misses == 1 and now.hits == 0
