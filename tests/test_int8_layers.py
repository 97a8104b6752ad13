"""The int8 recipe's fp32 exceptions: which MatMuls stay float, names that tell the recipes apart, and the
sensitivity analysis that chooses them (a tiny real ONNX graph; the real encoder in test_onnx_encoder.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from experiments.int8_layers.sensitivity import FFN_OUTPUT, drift, drift_table, layer_sensitivity
from lightmem.errors import StoreError
from lightmem.models.onnx_encoder import FP32_MATMULS, fp32_matmuls, int8_recipe, matmul_names, quantize_int8

NAMES = ["/model/encoder/layer.0/attention/attn/q/MatMul", "/model/encoder/layer.0/output/dense/MatMul",
         "/model/encoder/layer.1/output/dense/MatMul"]


def tiny_graph(path: Path, dim: int = 16) -> Path:
    """x -> three MatMuls named as an exported encoder names them; the last one reads an input with one huge channel."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits, nodes, prev = [], [], "x"
    for i, name in enumerate(NAMES):
        w = (rng.normal(size=(dim, dim)) / np.sqrt(dim)).astype(np.float32)
        if i == 1:
            w[:, 0] *= 50.0  # an outlier channel feeds the next matrix: per-tensor int8 activations lose the rest
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"], name=name))
        prev = f"h{i}"
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", dim])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["n", dim])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def float_matmuls(path: Path) -> list[str]:
    import onnx

    return [n.name for n in onnx.load(str(path)).graph.node if n.op_type == "MatMul"]


def encode_with(path: Path, texts) -> np.ndarray:
    import onnxruntime as ort

    x = np.random.default_rng(1).normal(size=(len(texts), 16)).astype(np.float32)
    x[:, 0] *= 30.0
    y = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return y / np.linalg.norm(y, axis=1, keepdims=True)


def test_matmuls_matching_the_regex_stay_float_and_the_rest_become_int8(tmp_path):
    src = tiny_graph(tmp_path / "fp32.onnx")
    assert matmul_names(src) == NAMES and matmul_names(src, FFN_OUTPUT) == NAMES[1:]
    quantize_int8(src, tmp_path / "all.onnx")
    assert float_matmuls(tmp_path / "all.onnx") == []
    quantize_int8(src, tmp_path / "mix.onnx", r"/layer\.1/output/dense/MatMul$")
    assert float_matmuls(tmp_path / "mix.onnx") == [NAMES[2]]
    with pytest.raises(ValueError, match="no MatMul"):  # a stale regex is an error, not a silent all-int8 graph
        quantize_int8(src, tmp_path / "none.onnx", r"/layer\.9/")


def test_layer_sensitivity_measures_each_member_of_the_family_alone(tmp_path):
    src = tiny_graph(tmp_path / "fp32.onnx")
    texts = [f"t{i}" for i in range(64)]
    rows = layer_sensitivity(src, encode_with, texts, tmp_path, served=r"/layer\.1/output/dense/MatMul$")
    assert [r.recipe for r in rows] == ["every MatMul int8", "family in fp32", f"{NAMES[1]} int8 (rest of family fp32)",
                                        f"{NAMES[2]} int8 (rest of family fp32)", r"served: /layer\.1/output/dense/MatMul$"]
    assert [r.kept_fp32 for r in rows] == [0, 2, 1, 1, 1]
    by = {r.recipe: r for r in rows}
    # keeping the family in fp32 is at least as faithful as quantizing it; the matrix after the outlier matters most
    assert by["family in fp32"].mean_cosine >= by["every MatMul int8"].mean_cosine
    assert by[f"{NAMES[2]} int8 (rest of family fp32)"].mean_cosine < by[f"{NAMES[1]} int8 (rest of family fp32)"].mean_cosine
    assert all(-1.0 <= r.min_cosine <= r.mean_cosine <= 1.0 + 1e-6 for r in rows)
    assert not (tmp_path / "int8_layers.onnx").exists()  # its working graph is removed
    table = drift_table(rows)
    assert table.count("\n") == len(rows) + 1 and "| family in fp32 | 2 |" in table


def test_drift_compares_rows_and_refuses_mismatched_arrays():
    a = np.eye(3, dtype=np.float32)
    d = drift(a, np.array([[1, 0, 0], [0, 1, 0], [0, 0, -1]], dtype=np.float32), "r", 0)
    assert d.mean_cosine == pytest.approx(1 / 3) and d.min_cosine == -1.0
    with pytest.raises(ValueError, match="one shape"):
        drift(a, a[:2], "r", 0)


def test_only_the_int8_backend_keeps_the_models_listed_matrices():
    assert fp32_matmuls("all-mpnet-base-v2", "onnx_int8") is not None
    assert fp32_matmuls("all-mpnet-base-v2", "onnx_int8_all") is None
    assert fp32_matmuls("all-MiniLM-L6-v2", "onnx_int8") is None


def test_stored_names_pick_the_recipe_that_wrote_them(monkeypatch):
    from lightmem.models import embedder as E

    built = []
    monkeypatch.setattr(E, "SentenceTransformerEmbedder", lambda *a, **kw: built.append(kw["backend"]) or kw)
    mix = "+" + int8_recipe(FP32_MATMULS["all-mpnet-base-v2"])
    assert mix.startswith("+int8mix-") and int8_recipe(None) == "int8"
    # mpnet keeps matrices in fp32: +int8 stores (written before) reopen with every matrix int8, +int8mix-<hash> ones mixed
    E.embedder_for("all-mpnet-base-v2+len128+int8")
    E.embedder_for("all-mpnet-base-v2+len128" + mix)
    # MiniLM keeps none: both int8 backends write its +int8 vectors
    E.embedder_for("all-MiniLM-L6-v2+int8")
    E.embedder_for("all-MiniLM-L6-v2+int8", backend="onnx_int8_all")
    assert built == ["onnx_int8_all", "onnx_int8", "onnx_int8", "onnx_int8_all"]
    with pytest.raises(StoreError, match="backend='onnx_int8_all'"):
        E.embedder_for("all-mpnet-base-v2+len128+int8", backend="onnx_int8")
    with pytest.raises(StoreError, match="backend='onnx_int8'"):
        E.embedder_for("all-mpnet-base-v2+len128" + mix, backend="onnx_int8_all")
    # a recipe that kept other matrices (FP32_MATMULS edited since, or a model that keeps none) cannot be reproduced
    with pytest.raises(StoreError, match="other matrices"):
        E.embedder_for("all-mpnet-base-v2+len128+int8mix-00000000")
    with pytest.raises(StoreError, match="other matrices"):
        E.embedder_for("all-MiniLM-L6-v2" + mix)
    with pytest.raises(StoreError, match="backend='torch' or backend='onnx'"):
        E.embedder_for("all-mpnet-base-v2+len128", backend="onnx_int8_all")
