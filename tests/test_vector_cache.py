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


def test_a_model_given_by_path_is_keyed_by_its_weights(tmp_path):
    from lightmem.models.vector_cache import folder_fingerprint

    (tmp_path / "model.safetensors").write_bytes(b"weights one")
    (tmp_path / "README.md").write_text("notes")
    first = folder_fingerprint(tmp_path)
    (tmp_path / "README.md").write_text("other notes")  # not weights: the same key
    assert folder_fingerprint(tmp_path) == first
    (tmp_path / "model.safetensors").write_bytes(b"weights two")  # retrained in place: vectors made before are not read
    assert folder_fingerprint(tmp_path) != first and first.startswith("w-")


def test_an_evaluation_records_the_vectors_it_read_back(tmp_path):
    from lightmem.models import vector_cache as vc

    real = HashingEmbedder(32)
    before = vc.totals()
    cache = VectorCache(tmp_path / "v.sqlite", real.name, real.dim)
    cache.encode(["a", "b", "c"], real.encode)
    cache.encode(["a", "b", "c", "d"], real.encode)
    results: dict = {"latency": {"ingest_turns_per_s": 100.0}}
    vc.note_use(results, before)
    assert results["cost"]["vector_cache"] == {"read": 3, "embedded": 4}
    assert results["latency"]["ingest_vectors_from_cache"] == 3 / 7
    untouched: dict = {"latency": {}}
    vc.note_use(untouched, vc.totals())
    assert untouched["cost"]["vector_cache"] == {"read": 0, "embedded": 0} and "ingest_vectors_from_cache" not in untouched["latency"]


class Recorder:
    """An encoder target that takes a vector cache (what SentenceTransformerEmbedder takes)."""

    def __init__(self, dim: int = 8, vector_cache: str | None = None) -> None:
        self.dim, self.vector_cache = dim, vector_cache


def test_the_evaluation_cache_reaches_an_encoder_that_takes_one_and_its_own_setting_wins():
    from omegaconf import OmegaConf

    from lightmem.config.builders import build_embedder

    def cfg(encoder: dict, cache):
        return OmegaConf.create({"encoder": encoder, "vector_cache": cache})

    assert build_embedder(cfg({"_target_": "test_vector_cache.Recorder"}, "runs/v.sqlite")).vector_cache == "runs/v.sqlite"
    assert build_embedder(cfg({"_target_": "test_vector_cache.Recorder"}, "")).vector_cache is None  # off
    own = {"_target_": "test_vector_cache.Recorder", "vector_cache": "mine.sqlite"}
    assert build_embedder(cfg(own, "runs/v.sqlite")).vector_cache == "mine.sqlite"
    hashing = build_embedder(cfg({"_target_": "lightmem.models.embedder.HashingEmbedder", "dim": 16}, "runs/v.sqlite"))
    assert hashing.dim == 16  # takes no cache: built without one


def test_evaluations_default_to_the_shared_cache_file_unless_the_environment_turns_it_off(monkeypatch):
    from conftest import compose

    monkeypatch.delenv("LIGHTMEM_VECTOR_CACHE", raising=False)
    for name in ("locomo", "longmemeval"):
        assert compose(name, []).vector_cache == "outputs/vector_cache.sqlite"
    monkeypatch.setenv("LIGHTMEM_VECTOR_CACHE", "")
    assert not compose("locomo", []).vector_cache
    assert compose("latency", []).encoder.vector_cache is None  # a throughput benchmark embeds every turn
