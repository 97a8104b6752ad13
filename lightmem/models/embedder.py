"""Sentence embedders. They only encode; search lives in stores/ and retrieval/."""
from __future__ import annotations

import logging
import os
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from lightmem.models.registry import ModelRegistry, pick_device
from lightmem.models.tokens import HFTokenCounter, TokenCounter, WhitespaceTokenCounter

log = logging.getLogger(__name__)


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to L2-normalised float32 vectors of a fixed dimension."""

    name: str
    dim: int

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray: ...

    def token_counter(self) -> TokenCounter: ...


class _QueryCache:
    """A small LRU of query vectors: evaluation and agents repeat queries often."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._d: OrderedDict[str, np.ndarray] = OrderedDict()

    def get(self, key: str) -> np.ndarray | None:
        v = self._d.get(key)
        if v is not None:
            self._d.move_to_end(key)
        return v

    def clear(self) -> None:
        self._d.clear()

    def put(self, key: str, value: np.ndarray) -> None:
        if self.size <= 0:
            return
        self._d[key] = value
        self._d.move_to_end(key)
        while len(self._d) > self.size:
            self._d.popitem(last=False)


class SentenceTransformerEmbedder:
    """A sentence-transformers model resolved through the offline registry.

    Args:
        model: A packaged model name (default all-MiniLM-L6-v2) or a local folder.
        device: ``auto``, ``cpu`` or ``cuda[:N]``.
        batch_size: Encoding batch size.
        max_seq_length: Longer inputs are truncated by the encoder (MiniLM was trained on 256).
        query_cache_size: How many query vectors to keep in an LRU cache.
        cache_dir: Registry cache directory.
        adapter: Folder of a LoRA adapter trained by ``train/embedder.py`` (merged into the
            weights at load, so encoding costs what the base model costs). The embedder's
            ``name`` then carries the adapter's fingerprint: stores check it on reopen.
    """

    def __init__(
        self,
        model: str = "all-MiniLM-L6-v2",
        device: str = "auto",
        batch_size: int = 16,
        max_seq_length: int = 256,
        query_cache_size: int = 1024,
        cache_dir: str | None = None,
        adapter: str | None = None,
    ) -> None:
        from sentence_transformers import SentenceTransformer

        registry = ModelRegistry(cache_dir)
        path = registry.embedder_path(model)
        self.device = pick_device(device)
        self.name = registry.canonical(model)
        self._model = SentenceTransformer(str(path), device=self.device, local_files_only=True)
        self._model.max_seq_length = max_seq_length
        if adapter:
            self.name = f"{self.name}+{merge_adapter(self._model, adapter)}"
        get_dim = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        self.dim = int(get_dim())
        self.batch_size = batch_size
        self._cache = _QueryCache(query_cache_size)

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if is_query and len(texts) == 1:
            hit = self._cache.get(texts[0])
            if hit is not None:
                return hit[None, :]
        vecs = self._model.encode(
            texts,
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=len(texts) >= 2048 and log.isEnabledFor(logging.INFO),
        ).astype(np.float32, copy=False)
        if is_query and len(texts) == 1:
            self._cache.put(texts[0], vecs[0])
        return vecs

    def token_counter(self) -> TokenCounter:
        return HFTokenCounter(self._model.tokenizer, name=self.name)


def adapter_fingerprint(folder: str | Path) -> str:
    """``lora-<sha256[:12]>`` of an adapter's weights: the suffix a store records after the model name."""
    import hashlib

    weights = Path(folder) / "adapter_model.safetensors"
    if not weights.exists():
        raise FileNotFoundError(f"no embedder adapter at {folder} (expected adapter_model.safetensors); "
                                "train one with `python train/embedder.py` or drop `adapter`")
    return "lora-" + hashlib.sha256(weights.read_bytes()).hexdigest()[:12]


def merge_adapter(model, adapter: str) -> str:
    """Merge a peft LoRA adapter into a SentenceTransformer's transformer; return its fingerprint."""
    from peft import PeftModel

    fingerprint = adapter_fingerprint(adapter)
    module = model[0]
    module.auto_model = PeftModel.from_pretrained(module.auto_model, str(adapter)).merge_and_unload()
    module.auto_model.eval()
    return fingerprint


def tuned_adapter() -> str | None:
    """The trained memory-embedder adapter (checkpoints/embedder), or None when it is not installed."""
    from lightmem.models.registry import checkpoint_path

    folder = checkpoint_path("embedder")
    return str(folder) if (folder / "adapter_model.safetensors").exists() else None


def embedder_for(name: str) -> Embedder:
    """Rebuild the embedder a store records by name: ``hashing-<dim>``, a packaged model, or a packaged
    model with the trained adapter (``<model>+lora-<fingerprint>``, checked before any model loads).

    Raises:
        StoreError: the name is not one lightmem can rebuild (a custom embedder: pass it to
            ``Memory.open(embedder=...)``), or the installed adapter is not the one that wrote the store.
    """
    from lightmem.errors import StoreError
    from lightmem.models.registry import PACKAGED, ModelRegistry, checkpoint_path

    if name.startswith("hashing-") and name[8:].isdigit():
        return HashingEmbedder(int(name[8:]))
    model, _, fingerprint = name.partition("+lora-")
    if ModelRegistry.canonical(model) not in PACKAGED and not os.path.isdir(model):
        raise StoreError(f"this store was written with the embedder {name!r}, which lightmem cannot rebuild by name: "
                         "open it with Memory.open(path, embedder=<that embedder>)")
    if not fingerprint:
        return SentenceTransformerEmbedder(model)
    folder = tuned_adapter()
    found = adapter_fingerprint(folder) if folder else None
    if found != f"lora-{fingerprint}":
        where = checkpoint_path("embedder")
        have = f"the adapter at {where} is {found}" if found else f"there is no adapter at {where}"
        raise StoreError(f"this store was written with {name!r} and {have}: point LIGHTMEM_CHECKPOINTS at the "
                         "checkpoints that wrote it, or pass embedder=SentenceTransformerEmbedder(adapter=<its folder>)")
    return SentenceTransformerEmbedder(model, adapter=folder)


def default_embedder(store: str | Path | None = None) -> Embedder:
    """What ``Memory.open`` encodes with when given no embedder: the store's own for an existing store;
    for a new one MiniLM with the trained memory adapter (base MiniLM, with a warning, without it)."""
    from lightmem.stores.mtm import stored_embedder

    name = stored_embedder(store) if store is not None else None
    if name and name != "unknown":
        return embedder_for(name)
    folder = tuned_adapter()
    if folder is None:
        log.warning("no trained embedder adapter in checkpoints/embedder (set LIGHTMEM_CHECKPOINTS or run `make train`); "
                    "using the base all-MiniLM-L6-v2")
        return SentenceTransformerEmbedder()
    return SentenceTransformerEmbedder(adapter=folder)


class HashingEmbedder:
    """Feature-hashed bag of word unigrams and bigrams: no weights, fully deterministic.

    A real baseline (lexical overlap in vector form) and the tiny offline model tests use.
    """

    def __init__(self, dim: int = 256, name: str = "hashing", query_cache_size: int = 0) -> None:
        # query_cache_size is accepted so configs can switch encoders freely; hashing a
        # query is cheaper than a cache lookup, so nothing is cached.
        if dim <= 0:
            raise ValueError("dim must be positive")
        self.dim = dim
        self.name = f"{name}-{dim}"
        self._words = WhitespaceTokenCounter()

    def _features(self, text: str) -> list[str]:
        import re

        words = re.findall(r"\w+", text.lower())
        return words + [f"{a} {b}" for a, b in zip(words, words[1:])]

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for feat in self._features(text):
                h = zlib.crc32(feat.encode("utf-8"))
                out[i, h % self.dim] += 1.0 if (h >> 31) & 1 else -1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return out

    def token_counter(self) -> TokenCounter:
        return self._words
