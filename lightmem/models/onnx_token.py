"""ONNX Runtime graphs of a token classifier (the word scorer, whose encoder the topic segmenter also reads).

Two graphs are exported once from the torch model (any LoRA adapter already merged) and cached
on disk beside the embedder's, written atomically:

- ``keep``: P(keep) per sub-token (softmax of the classifier's logits, label 1), what the
  word scorer scores words with;
- ``attention``: the attention of some layers averaged over layers and heads, tokens × tokens,
  what the topic segmenter reads (LightMem's B1).

On CPU both run 2-4× faster than the torch model per call and, unlike torch's spinning
threads, keep their speed when another process holds a core (``eval/sensory.py``).
"""
from __future__ import annotations

import hashlib
import inspect
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from lightmem.models.first_run import one_time_step
from lightmem.models.onnx_encoder import require_onnxruntime, write_atomically

# Bump when an exported graph changes: old cache files are then ignored.
EXPORT_VERSION = 1
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def model_fingerprint(model) -> str:
    """sha256[:12] of a torch model's parameters and config: two models share a cached graph only
    when their weights are the same."""
    h = hashlib.sha256(f"{EXPORT_VERSION}|{type(model).__name__}|{model.config.to_json_string()}".encode())
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:12]


def _export(module, sample: dict, names: Sequence[str], output: str, path: Path, token_axes: bool) -> None:
    import torch

    try:
        import onnx  # noqa: F401  (torch's exporter serialises through it)
    except ImportError as exc:
        raise ImportError("exporting to ONNX needs the onnx package: `pip install onnx`") from exc
    axes = {n: {0: "batch", 1: "tokens"} for n in names}
    axes[output] = {0: "batch", 1: "tokens", 2: "tokens"} if not token_axes else {0: "batch", 1: "tokens"}
    legacy = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's shape-check warnings do not apply to a BERT encoder
        torch.onnx.export(module, tuple(sample[n] for n in names), str(path), input_names=list(names),
                          output_names=[output], dynamic_axes=axes, opset_version=17, **legacy)


def export_keep_probs(model, tokenizer, path: Path) -> None:
    """Export ``softmax(logits)[..., 1]`` of a 2-label token classifier as ``keep`` (batch × tokens)."""
    import torch

    names = [n for n in INPUTS if n in tokenizer("a b")]

    class Keep(torch.nn.Module):
        def __init__(self, inner) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *tensors):
            logits = self.inner(**dict(zip(names, tensors))).logits.float()
            return torch.softmax(logits, dim=-1)[..., 1]

    sample = tokenizer([["a", "short", "one"], ["a", "somewhat", "longer", "example"]], is_split_into_words=True,
                       padding=True, return_tensors="pt")
    _export(Keep(model.eval()), sample, names, "keep", path, token_axes=True)


def export_attention(model, tokenizer, layers: Sequence[int], path: Path) -> None:
    """Export the attention of ``layers`` averaged over layers and heads as ``attention`` (batch × tokens × tokens)."""
    import torch

    before = getattr(model.config, "_attn_implementation", None)
    if before not in (None, "eager"):
        model.set_attn_implementation("eager")  # sdpa returns no weights
    layers = tuple(layers)

    class Attention(torch.nn.Module):
        def __init__(self, inner) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids):
            out = self.inner(input_ids=input_ids, output_attentions=True)
            return torch.stack([out.attentions[i] for i in layers]).float().mean(dim=(0, 2))

    try:
        sample = {"input_ids": tokenizer(["a short one and a somewhat longer example"], return_tensors="pt")["input_ids"]}
        _export(Attention(model.eval()), sample, ["input_ids"], "attention", path, token_axes=False)
    finally:
        if before not in (None, "eager"):
            model.set_attn_implementation(before)


def cached_graph(cache_dir: Path, key: str, export: Callable[[Path], None]) -> Path:
    """``cache_dir/onnx/<key>.onnx``, exported with ``export(tmp)`` first when missing."""
    safe = "".join(c if c.isalnum() or c in "+-._" else "_" for c in key)
    path = Path(cache_dir) / "onnx" / f"{safe}.v{EXPORT_VERSION}.onnx"
    if not path.exists():
        one_time_step("exporting a token classifier's graph to ONNX", path)
        write_atomically(path, export)
    return path


def _session(path: Path, threads: int | None = None):
    ort = require_onnxruntime()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")  # see OnnxSession
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


class OnnxKeepScorer:
    """P(keep) per sub-token from the exported ``keep`` graph; fed what the tokenizer returns."""

    def __init__(self, path: Path) -> None:
        self._session = _session(path)
        self._inputs = [i.name for i in self._session.get_inputs()]

    def __call__(self, enc) -> np.ndarray:
        feed = {n: np.asarray(enc[n], dtype=np.int64) for n in self._inputs}
        return self._session.run(None, feed)[0]


class OnnxAttention:
    """Layer- and head-averaged attention of one token sequence from the exported ``attention`` graph."""

    def __init__(self, path: Path) -> None:
        self._session = _session(path)

    def __call__(self, ids: Sequence[int]) -> np.ndarray:
        return self._session.run(None, {"input_ids": np.asarray([ids], dtype=np.int64)})[0][0]
