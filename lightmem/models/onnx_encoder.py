"""An ONNX Runtime path for sentence-transformers mean-pooling encoders (MiniLM, mpnet): export, int8, inference.

The transformer (with any LoRA adapter already merged) is exported once from the packaged weights,
with mean pooling and L2 normalisation inside the graph, and cached on disk; ``onnx_int8`` adds
dynamic int8 quantization of the weight matrices, except those of the model that quantize badly
(``FP32_MATMULS``), and ``onnx_int8_all`` quantizes every one. The files are written atomically, so a
killed export never leaves a file that a later process would load.
"""
from __future__ import annotations

import hashlib
import inspect
import logging
import os
import re
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from lightmem.models.first_run import cache_lock, one_time_step
from lightmem.models.tokens import tokenizer_lock

log = logging.getLogger(__name__)

BACKENDS = ("torch", "onnx", "onnx_int8", "onnx_int8_all")
INT8_BACKENDS = ("onnx_int8", "onnx_int8_all")
# Bump when the exported graph or the quantization recipe changes: old cache files are then ignored.
EXPORT_VERSION = 1
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
STALE_TMP_S = 3600.0

# The weight matrices of a base model that the int8 backend keeps in fp32 (a regex over the exported graph's
# MatMul node names). all-mpnet-base-v2's feed-forward output projections of layers 6-10 read activations with
# outliers that one int8 scale per tensor cannot hold: with every matrix int8 its vectors sit at mean cosine 0.91
# to fp32 (0.907 over 300 LoCoMo turns), with these five kept 0.990, at ~2 ms more per query; each other layer's alone costs
# < 0.001 (`python -m experiments.int8_layers.run`). MiniLM has no such layer (0.991 with all int8).
FP32_MATMULS: dict[str, str] = {
    "all-mpnet-base-v2": r"/layer\.(6|7|8|9|10)/output/dense/MatMul$",
}


def fp32_matmuls(model: str, backend: str) -> str | None:
    """The regex of the MatMuls ``backend`` keeps in fp32 for base ``model`` (None: every one is int8)."""
    return FP32_MATMULS.get(model) if backend == "onnx_int8" else None


INT8_ALL, INT8_MIX = "int8", "int8mix"  # the recipe names int8_recipe writes (embedder names end in "+" + one)
RECIPE_HASH_LEN = 8


def int8_recipe(keep_fp32: str | None) -> str:
    """The name of an int8 recipe: ``int8`` (every matrix) or ``int8mix-<sha256[:8] of the regex>``, so that a
    changed ``FP32_MATMULS`` entry names new vectors (and cache files) instead of passing for the old ones."""
    if not keep_fp32:
        return INT8_ALL
    return f"{INT8_MIX}-{hashlib.sha256(keep_fp32.encode()).hexdigest()[:RECIPE_HASH_LEN]}"


def require_onnxruntime():
    """Import onnxruntime, or say which package the ONNX backends need."""
    try:
        import onnxruntime
    except ImportError as exc:
        raise ImportError("encoder backends 'onnx'/'onnx_int8'/'onnx_int8_all' need the onnxruntime package: "
                          "`pip install onnxruntime` (or use backend='torch')") from exc
    return onnxruntime


def cache_file(cache_dir: Path, name: str, backend: str, identity: str) -> Path:
    """Where the exported graph of embedder ``name`` lives for ``backend``.

    The key covers the embedder's name (model + adapter fingerprint), the backend, the export recipe and the
    base weights' identity (``ModelRegistry.weights_identity``: their content for a packaged model, path, size
    and mtime for a local folder), so a changed model or recipe gets a fresh export instead of a stale one, and
    the same packaged weights installed elsewhere find the export already made.
    """
    digest = hashlib.sha256(f"{EXPORT_VERSION}|{identity}".encode()).hexdigest()[:12]
    safe = "".join(c if c.isalnum() or c in "+-._" else "_" for c in name)
    return cache_dir / "onnx" / f"{safe}.{backend}.{digest}.onnx"


def legacy_cache_file(cache_dir: Path, name: str, backend: str, weights: Path) -> Path:
    """Where versions before content identities kept the graph: keyed by the weights file's path, size and mtime
    (what ``cache_file`` still gives for a local folder). A graph found there is moved to its new name."""
    st = weights.stat()
    return cache_file(cache_dir, name, backend, f"{weights.resolve()}|{st.st_size}|{st.st_mtime_ns}")


def write_atomically(path: Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it onto ``path``.

    ``os.replace`` is atomic on one file system: readers see the old state or the whole new
    file, never a partial one. A failed write removes its temporary file; one left by a killed
    process is never read and is swept once it is an hour old.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    for old in path.parent.glob(f"{path.name}.*.tmp"):
        try:
            if time.time() - old.stat().st_mtime > STALE_TMP_S:
                old.unlink()
        except FileNotFoundError:  # another process swept it first
            pass
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        write(tmp)
        with open(tmp, "rb") as f:  # on disk before the rename: a crash then cannot leave an empty file
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def check_mean_pooling(st_model) -> None:
    """The graph pools by mask-weighted mean: refuse a model whose pipeline does something else."""
    kinds = [type(m).__name__ for m in st_model]
    pooling = st_model[1] if len(kinds) > 1 else None
    rest = kinds[3:] if kinds[2:3] == ["Dense"] and _linear(st_model[2]) is not None else kinds[2:]
    if kinds[0] != "Transformer" or kinds[1:2] != ["Pooling"] or getattr(pooling, "pooling_mode", None) != "mean" \
            or any(k != "Normalize" for k in rest):
        raise ValueError(f"the ONNX backends export Transformer -> mean Pooling [-> linear Dense] [-> Normalize] models; "
                         f"this one is {kinds} (pooling {getattr(pooling, 'pooling_mode', None)!r}): use backend='torch'")


def _linear(module):  # -> torch.nn.Linear | None
    """The linear map of a sentence-transformers Dense module without an activation, else None."""
    import torch

    act = getattr(module, "activation_function", None)
    linear = getattr(module, "linear", None)
    return linear if isinstance(linear, torch.nn.Linear) and isinstance(act, torch.nn.Identity) else None


def export_onnx(st_model, path: Path) -> None:
    """Export a SentenceTransformer's transformer + mean pooling + L2 norm as an fp32 ONNX graph at ``path``."""
    import torch

    try:
        import onnx  # noqa: F401  (torch's exporter serialises through it)
    except ImportError as exc:
        raise ImportError("exporting the encoder to ONNX needs the onnx package: `pip install onnx`") from exc
    check_mean_pooling(st_model)
    transformer = st_model[0].auto_model.eval()
    projection = _linear(st_model[2]) if len(st_model) > 2 else None
    names = [n for n in INPUTS if n in st_model.tokenizer("a b")]

    class Pooled(torch.nn.Module):
        def __init__(self, model, projection) -> None:
            super().__init__()
            self.model, self.projection = model, projection

        def forward(self, *tensors):
            kw = dict(zip(names, tensors))
            h = self.model(**kw).last_hidden_state
            # sentence-transformers' Pooling(mean) [then a linear Dense] then Normalize, op for op
            mask = kw["attention_mask"].unsqueeze(-1).to(h.dtype)
            pooled = (h * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            if self.projection is not None:
                pooled = self.projection(pooled)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    sample = st_model.tokenizer(["a short one", "a somewhat longer example sentence"], padding=True, return_tensors="pt")
    axes = {n: {0: "batch", 1: "tokens"} for n in names} | {"embedding": {0: "batch"}}
    # The TorchScript exporter needs only `onnx` (dynamo's also needs onnxscript); torch >= 2.9
    # defaults to dynamo and older ones have no switch.
    legacy = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    with torch.no_grad(), warnings.catch_warnings():
        # It is deprecated, and its tracer warns about shape checks that do not affect a BERT encoder.
        warnings.simplefilter("ignore")
        torch.onnx.export(Pooled(transformer, projection), tuple(sample[n] for n in names), str(path), input_names=names,
                          output_names=["embedding"], dynamic_axes=axes, opset_version=17, **legacy)


# What int8 graphs are quantized as; part of their cache names, so a graph quantized another way is made again.
# Weights are uint8 per output channel: onnxruntime's int8 (signed) per-channel MatMulInteger graphs gave vectors
# at cosine ~0.05 to fp32 on an AVX2-only CPU (onnxruntime 1.23-1.32), uint8 ones 0.99 (mpnet + adapter, 5 fp32).
INT8_FORMAT = "u8pc"


def quantize_int8(src: Path, dst: Path, keep_fp32: str | None = None) -> None:
    """Dynamic int8 quantization of the weight matrices (uint8, per output channel: ``INT8_FORMAT``); embeddings
    stay fp32, and so do the MatMuls whose node name matches the regex ``keep_fp32``.

    Measured with MiniLM on LoCoMo turns (mean cosine to fp32): 0.991 this way; 0.954 with per-tensor weights
    and the embedding tables quantized too. Leaving its FFN output matrices in fp32 gave 0.995 at a third
    less speed-up and no better LoCoMo recall; SmoothQuant-style rescaling made it worse. mpnet is another
    matter (0.907 with every matrix int8): see ``FP32_MATMULS``.
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # The quantizer logs a line per tensor on the root logger and advises a pre-processing step
    # that fails on this graph (incomplete symbolic shape inference): keep both out of the user's log.
    kept = matmul_names(src, keep_fp32) if keep_fp32 else []
    if keep_fp32 and not kept:
        raise ValueError(f"no MatMul of {src.name} matches {keep_fp32!r}: the graph is not the one FP32_MATMULS describes")
    # A distilled encoder's projection (export_onnx's Gemm) stays fp32: quantized per channel, its vectors fell to
    # cosine -0.1 of the fp32 graph's (MiniLM + LoRA + 384->768 map), and it is a small share of the arithmetic.
    kept += projection_nodes(src)
    root, quiet = logging.getLogger(), _QuietQuantizer()
    root.addFilter(quiet)
    try:
        quantize_dynamic(str(src), str(dst), op_types_to_quantize=["MatMul"], per_channel=True,
                         weight_type=QuantType.QUInt8, nodes_to_exclude=kept)
    finally:
        root.removeFilter(quiet)


def matmul_names(graph: Path, pattern: str = "") -> list[str]:
    """The names of the MatMul nodes of an ONNX graph that match the regex ``pattern`` (all: ``""``), in graph order."""
    import onnx

    model = onnx.load(str(graph), load_external_data=False)
    return [n.name for n in model.graph.node if n.op_type == "MatMul" and re.search(pattern, n.name)]


def projection_nodes(graph: Path) -> list[str]:
    """The nodes of a graph's linear projection after pooling (``export_onnx`` names them ``/projection/...``)."""
    import onnx

    model = onnx.load(str(graph), load_external_data=False)
    names = [n.name for n in model.graph.node if n.name.startswith("/projection/")]
    return names + [f"{n}_MatMul" for n in names if n.endswith("/Gemm")]  # the quantizer splits a Gemm, renamed so


class _QuietQuantizer(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.WARNING or (
            record.levelno == logging.WARNING and not str(record.msg).startswith("Please consider to run pre-processing"))


def ensure_exported(cache_dir: Path, name: str, identity: str, backend: str, load: Callable[[], object],
                    keep_fp32: str | None = None, legacy_weights: Path | None = None) -> Path:
    """The cached graph of embedder ``name`` for ``backend``, exported (and quantized) first when missing.

    An int8 graph is quantized from the fp32 export; that export stays in the cache only when it was there already
    or ``backend`` is ``onnx`` (the default encoder's is 436 MB that nothing reads once the int8 graph exists).
    Processes that ask for a missing graph at once export it once: the others wait for it.

    Args:
        cache_dir: The registry's cache directory.
        name: The embedder's name (model and adapter fingerprint, without the backend's suffix).
        identity: The base weights' identity (``ModelRegistry.weights_identity``; part of the cache key).
        backend: ``onnx``, ``onnx_int8`` or ``onnx_int8_all``.
        load: Returns the SentenceTransformer (adapter merged) to export; called only on a cache miss.
        keep_fp32: The int8 graph keeps the MatMuls matching this regex in fp32 (``fp32_matmuls``).
        legacy_weights: The weights file that versions keyed by path used (``legacy_cache_file``), when it exists.
    """
    # Named by recipe, not backend: where the model keeps nothing in fp32 both int8 backends share one file.
    kind = "onnx" if backend == "onnx" else f"onnx_{int8_recipe(keep_fp32)}.{INT8_FORMAT}"
    fp32, path = cache_file(cache_dir, name, "onnx", identity), cache_file(cache_dir, name, kind, identity)
    if path.exists():
        return path
    with cache_lock(cache_dir, path.name):
        if path.exists():  # another process made it while this one waited
            return path
        if legacy_weights is not None:
            for new, old in ((path, legacy_cache_file(cache_dir, name, kind, legacy_weights)),
                             (fp32, legacy_cache_file(cache_dir, name, "onnx", legacy_weights))):
                if old != new and old.exists() and not new.exists():
                    os.replace(old, new)
            if path.exists():
                return path
        if backend == "onnx":
            one_time_step("exporting the encoder to ONNX", fp32)
            return write_atomically(fp32, lambda tmp: export_onnx(load(), tmp))
        if fp32.exists():
            one_time_step("quantizing the encoder to int8", path)
            return write_atomically(path, lambda tmp: quantize_int8(fp32, tmp, keep_fp32))
        one_time_step("exporting the encoder to ONNX and quantizing it to int8", path)
        path.parent.mkdir(parents=True, exist_ok=True)
        work = path.with_name(f"{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.fp32.tmp")
        try:
            export_onnx(load(), work)
            return write_atomically(path, lambda tmp: quantize_int8(work, tmp, keep_fp32))
        finally:
            work.unlink(missing_ok=True)


def length_batches(lengths: Sequence[int], rows: Sequence[int], batch_size: int, slack: float = 0.25,
                   min_slack: int = 8) -> list[list[int]]:
    """Split ``rows`` (sorted by ``lengths``, longest first) into runs that pad little.

    A run pads every row to its first (longest) one, so a short user turn batched with a
    256-token assistant turn would cost 256 tokens: a new run starts at ``batch_size`` rows or
    at the first row shorter than its run's longest by more than ``slack`` of it (and
    ``min_slack`` tokens). A run's fixed cost is far below the padding it saves.
    """
    out: list[list[int]] = []
    width = 0
    for n, r in zip(lengths, rows):
        if not out or len(out[-1]) >= batch_size or width - n > max(min_slack, slack * width):
            out.append([])
            width = n
        out[-1].append(r)
    return out


class OnnxSession:
    """Encodes with an exported graph: length-bucketed batches, vectors back in input order.

    A session that runs each text alone (``batch_size`` 1, the int8 graphs: see ``SentenceTransformerEmbedder``)
    runs one intra-op thread and encodes the texts of one call on ``threads`` threads at once: on 2 cores that
    embeds 1.55x the LoCoMo turns per second of one run at a time on 2 intra-op threads, and one short query
    takes as long either way (``docs/results/throughput.md``). Batched graphs split each run over ``threads``.

    Args:
        path: The ONNX file (output ``embedding``: L2-normalised mean-pooled vectors).
        tokenizer: The model's Hugging Face tokenizer.
        max_seq_length: Longer inputs are truncated.
        batch_size: Texts per run.
        threads: Threads that run the graph (default: the cores this process may use).
    """

    def __init__(self, path: Path, tokenizer, max_seq_length: int, batch_size: int, threads: int | None = None) -> None:
        ort = require_onnxruntime()
        threads = threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
        self.workers = threads if batch_size == 1 else 1  # texts run at once, each on its own thread
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1 if self.workers > 1 else threads
        opts.inter_op_num_threads = 1
        # Threads that spin while they wait steal the core another process is using: with one busy
        # core of two, 2 spinning threads measured 1.7x slower than 2 that sleep (and 1 thread).
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.path = path
        self._session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self._inputs = [i.name for i in self._session.get_inputs()]
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length
        self.batch_size = batch_size
        self.dim = int(self._session.get_outputs()[0].shape[1])
        self._pool = None  # the ``workers`` threads that run the texts of one call at once
        if self.workers > 1:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="lightmem-onnx")

    def _run(self, ids: Sequence[Sequence[int]], type_ids: Sequence[Sequence[int]] | None, rows: Sequence[int]) -> np.ndarray:
        """Vectors of ``rows`` (one run, padded to the longest of them)."""
        width = max(len(ids[i]) for i in rows)
        pad = self.tokenizer.pad_token_id or 0
        feed = {n: np.full((len(rows), width), pad if n == "input_ids" else 0, dtype=np.int64) for n in self._inputs}
        for r, i in enumerate(rows):
            n = len(ids[i])
            feed["input_ids"][r, :n] = ids[i]
            feed["attention_mask"][r, :n] = 1
            if "token_type_ids" in feed and type_ids is not None:
                feed["token_type_ids"][r, :n] = type_ids[i]
        return self._session.run(None, feed)[0]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        with tokenizer_lock(self.tokenizer):
            enc = self.tokenizer(list(texts), truncation=True, max_length=self.max_seq_length)
        ids, type_ids = enc["input_ids"], enc.get("token_type_ids")
        # Sorting by token length makes each batch pad to its own longest text, not the corpus's.
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        out = np.empty((len(ids), self.dim), dtype=np.float32)
        runs = length_batches([len(ids[i]) for i in order], order, self.batch_size)
        if self._pool is not None and len(runs) > 1:
            try:
                done = self._pool.map(lambda rows: self._run(ids, type_ids, rows), runs)
            except RuntimeError:  # the interpreter is shutting down and the pool takes no work: one at a time
                done = (self._run(ids, type_ids, rows) for rows in runs)
            for rows, vecs in zip(runs, done):
                out[rows] = vecs
        else:
            for rows in runs:
                out[rows] = self._run(ids, type_ids, rows)
        return out
