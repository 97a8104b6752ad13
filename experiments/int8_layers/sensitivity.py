"""Which weight matrices of an encoder should stay in fp32 under int8: each one's share of the drift.

Dynamic int8 quantization scales each activation tensor by one factor, so a matrix whose input has a few
huge channels (the feed-forward output projections of some layers of mpnet) loses most of its input's
resolution. ``layer_sensitivity`` quantizes every MatMul of the graph, keeps a family of them (by default
the feed-forward output projections) in fp32 but for one, and measures how far the vectors move from fp32:
the matrices whose quantization alone moves them most are the ones ``onnx_encoder.FP32_MATMULS`` lists.
``run.py`` beside this file is the command; docs/results/locomo.md records what it measured.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lightmem.models.onnx_encoder import matmul_names, quantize_int8

# BERT (MiniLM) and MPNet name their feed-forward output projection ".../layer.N/output/dense/MatMul"; the
# attention output projection sits under ".../attention/..." in both.
FFN_OUTPUT = r"/layer\.\d+/output/dense/MatMul$"
FAMILY_FP32 = "family in fp32"  # the row the others' loss is measured against


@dataclass(frozen=True)
class Drift:
    """Mean and minimum cosine to the fp32 vectors of one quantization recipe."""

    recipe: str
    kept_fp32: int
    mean_cosine: float
    min_cosine: float


def drift(reference: np.ndarray, vectors: np.ndarray, recipe: str, kept_fp32: int) -> Drift:
    """Cosine of each row of ``vectors`` to the same row of ``reference`` (both L2-normalised)."""
    if reference.shape != vectors.shape or not len(reference):
        raise ValueError(f"need two non-empty arrays of one shape; got {reference.shape} and {vectors.shape}")
    cos = np.sum(reference * vectors, axis=1)
    return Drift(recipe, kept_fp32, float(cos.mean()), float(cos.min()))


def layer_sensitivity(fp32_graph: Path, encode: Callable[[Path, Sequence[str]], np.ndarray], texts: Sequence[str],
                      workdir: Path, family: str = FFN_OUTPUT, served: str | None = None) -> list[Drift]:
    """The drift from fp32 of: every MatMul int8; the ``family`` kept in fp32; the family kept but one, for each
    of its members; and the ``served`` regex kept, when given.

    Args:
        fp32_graph: The exported fp32 graph (``SentenceTransformerEmbedder(backend="onnx").graph``).
        encode: Encodes ``texts`` with the graph at a path (``OnnxSession(path, ...).encode``).
        texts: What to encode (real memories: the drift depends on the activations they cause).
        workdir: Where the quantized graphs are written (one at a time; each replaces the last).
        family: Regex of the MatMuls whose share is measured.
        served: Regex of the MatMuls a recipe keeps in fp32 (``FP32_MATMULS[model]``), measured last.
    """
    members = matmul_names(fp32_graph, family)
    if not members:
        raise ValueError(f"no MatMul of {fp32_graph} matches {family!r}")
    reference = encode(fp32_graph, texts)
    graph = Path(workdir) / "int8_layers.onnx"

    def measure(keep: str | None, recipe: str, kept: int) -> Drift:
        quantize_int8(fp32_graph, graph, keep)
        return drift(reference, encode(graph, texts), recipe, kept)

    rows = [measure(None, "every MatMul int8", 0), measure(family, FAMILY_FP32, len(members))]
    for name in members:
        others = "|".join(f"^{re.escape(m)}$" for m in members if m != name) or None
        rows.append(measure(others, f"{name} int8 (rest of family fp32)", len(members) - 1))
    if served:
        rows.append(measure(served, f"served: {served}", len(matmul_names(fp32_graph, served))))
    graph.unlink(missing_ok=True)
    return rows


def drift_table(rows: Sequence[Drift]) -> str:
    """A markdown table of the recipes, with each one's loss against the family kept in fp32."""
    family = next((r.mean_cosine for r in rows if r.recipe == FAMILY_FP32), None)
    lines = ["| recipe | matrices in fp32 | mean cosine to fp32 | min cosine | loss vs family in fp32 |", "|---|---|---|---|---|"]
    for r in rows:
        loss = f"{family - r.mean_cosine:.4f}" if family is not None else ""
        lines.append(f"| {r.recipe} | {r.kept_fp32} | {r.mean_cosine:.4f} | {r.min_cosine:.4f} | {loss} |")
    return "\n".join(lines)
