"""The first run: what preparing the default encoder says, what it leaves in the model cache, and the third-party
notices it keeps out of the way (lightmem/models/first_run.py, the registry's unpacking, onnx_encoder.ensure_exported)."""
from __future__ import annotations

import io
import logging
import zipfile
from pathlib import Path

import pytest

from lightmem.models import onnx_encoder
from lightmem.models.first_run import one_time_step, preparing, quiet_optional_kernel_notice
from lightmem.models.registry import PACKAGED, ModelRegistry, PackagedModel


# -- what is said -----------------------------------------------------------------------------------------------
def test_preparing_says_what_why_and_where_once_then_how_long_and_nothing_when_all_is_cached(tmp_path, capsys):
    with preparing("the encoder X", tmp_path, "stores embed with it", "about 20 s"):
        pass
    assert capsys.readouterr().err == ""  # everything was in the cache: not a word
    with preparing("the encoder X", tmp_path, "stores embed with it", "about 20 s"):
        one_time_step("unpacking X", tmp_path / "unpacked")
        (tmp_path / "graph.onnx").write_bytes(b"x" * 2_000_000)
        with preparing("an inner part", tmp_path):  # the outer block speaks for both
            one_time_step("exporting X", tmp_path / "graph.onnx")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2
    assert lines[0] == (f"lightmem: preparing the encoder X in {tmp_path}, once (about 20 s): stores embed with it. "
                        "Later runs load it from there; LIGHTMEM_CACHE moves it.")
    assert lines[1].startswith("lightmem: the encoder X ready in ") and f"2 MB added to {tmp_path}" in lines[1]


def test_a_step_outside_preparing_says_itself_and_a_failure_is_said(tmp_path, capsys):
    one_time_step("joining Y", tmp_path / "y.gguf")
    assert capsys.readouterr().err == f"lightmem: joining Y at {tmp_path / 'y.gguf'} (one time; later runs reuse it)\n"
    with pytest.raises(RuntimeError), preparing("Z", tmp_path):
        one_time_step("exporting Z", tmp_path)
        raise RuntimeError("export died")
    assert capsys.readouterr().err.splitlines()[-1].startswith("lightmem: preparing Z failed after ")


def test_configured_logging_gets_the_lines_and_a_quietened_lightmem_logger_none(tmp_path, capsys, caplog):
    with caplog.at_level(logging.INFO, logger="lightmem"):
        one_time_step("joining Y", tmp_path)
    assert "joining Y" in caplog.text and capsys.readouterr().err == ""
    caplog.clear()
    logger = logging.getLogger("lightmem")
    logger.setLevel(logging.ERROR)
    try:
        one_time_step("joining Y", tmp_path)
    finally:
        logger.setLevel(logging.NOTSET)
    assert "joining Y" not in caplog.text and capsys.readouterr().err == ""


def test_only_bitsandbytes_optional_kernel_notice_is_dropped(caplog):
    quiet_optional_kernel_notice()
    quiet_optional_kernel_notice()  # idempotent
    logger = logging.getLogger("bitsandbytes.backends.cpu.ops")
    assert len(logger.filters) == 1
    with caplog.at_level(logging.WARNING):
        logger.warning("Failed to load CPU gemm_4bit_forward from kernels-community: %s. Please make sure you already "
                       "`pip install kernels` and the kernels >= 0.11.1", "No module named 'kernels'")
        logger.warning("something else went wrong")
    assert "pip install kernels" not in caplog.text and "something else went wrong" in caplog.text


# -- what is left in the cache ----------------------------------------------------------------------------------
def _split_zip(tmp_path: Path, monkeypatch) -> tuple[ModelRegistry, PackagedModel]:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in ("config.json", "modules.json", "tokenizer.json", "1_Pooling/config.json"):
            zf.writestr(f"tiny-model/{name}", name)
        zf.writestr("tiny-model/model.safetensors", b"w" * 100_000)
    blob = buf.getvalue()
    parts = []
    for i, cut in enumerate(range(0, len(blob), len(blob) // 3 + 1)):
        parts.append(tmp_path / f"tiny.zip.00{i + 1}")
        parts[-1].write_bytes(blob[cut:cut + len(blob) // 3 + 1])
    spec = PackagedModel("tiny", "tiny-part-001", "", parts=tuple(f"tiny-part-00{i + 1}" for i in range(len(parts))))
    monkeypatch.setattr(ModelRegistry, "_split_part", staticmethod(lambda s, pkg: parts[int(pkg[-1]) - 1]))
    monkeypatch.setitem(PACKAGED, "tiny", spec)
    return ModelRegistry(tmp_path / "cache"), spec


def test_an_encoder_needs_no_unpacked_weights_once_its_graph_is_made(tmp_path, monkeypatch):
    registry, spec = _split_zip(tmp_path, monkeypatch)
    folder = registry.model_files("tiny")  # config and tokenizer only: what the ONNX path reads
    assert (folder / "tokenizer.json").read_text() == "tokenizer.json" and (folder / "1_Pooling" / "config.json").exists()
    assert not (folder / "model.safetensors").exists()
    identity = registry.weights_identity("tiny")
    assert identity.startswith("zip|model.safetensors:100000:")
    with registry.weights_folder("tiny") as full:  # the weights, for an export, in a copy that goes afterwards
        assert (full / "model.safetensors").read_bytes() == b"w" * 100_000 and full != folder
    assert not full.exists() and not (folder / "model.safetensors").exists()
    assert sorted(p.name for p in folder.parent.iterdir()) == ["tiny"]
    path = registry.path("tiny")  # the torch backend and the trainers: the weights are added, and kept
    assert path == folder and (path / "model.safetensors").stat().st_size == 100_000
    assert registry.weights_identity("tiny") == identity  # by content: unpacking again changes nothing
    with registry.weights_folder("tiny") as full:
        assert full == folder


def test_an_int8_graph_keeps_no_fp32_export_and_a_graph_under_its_former_name_is_moved(tmp_path, monkeypatch):
    made = []
    monkeypatch.setattr(onnx_encoder, "export_onnx", lambda model, path: made.append("export") or Path(path).write_bytes(b"fp32"))
    monkeypatch.setattr(onnx_encoder, "quantize_int8", lambda src, dst, keep=None: made.append("int8") or Path(dst).write_bytes(
        b"int8 of " + Path(src).read_bytes()))
    cache = tmp_path / "cache"
    graph = onnx_encoder.ensure_exported(cache, "m+lora-1", "zip|w:1:0", "onnx_int8", lambda: object(), "x")
    assert graph.read_bytes() == b"int8 of fp32" and made == ["export", "int8"]
    assert sorted(p.name for p in (cache / "onnx").iterdir()) == [graph.name]  # no fp32 graph, no temporary file
    assert onnx_encoder.ensure_exported(cache, "m+lora-1", "zip|w:1:0", "onnx_int8", lambda: object(), "x") == graph
    assert made == ["export", "int8"]  # cached
    fp32 = onnx_encoder.ensure_exported(cache, "m+lora-1", "zip|w:1:0", "onnx", lambda: object())
    assert fp32.read_bytes() == b"fp32" and len(list((cache / "onnx").iterdir())) == 2  # asked for: kept

    weights = tmp_path / "model.safetensors"  # a cache of an earlier version: graphs named by the weights file's path
    weights.write_bytes(b"w")
    old = onnx_encoder.legacy_cache_file(cache, "m", "onnx_int8.u8pc", weights)
    old.write_bytes(b"made before")
    made.clear()
    moved = onnx_encoder.ensure_exported(cache, "m", "pkg|w", "onnx_int8_all", lambda: object(), legacy_weights=weights)
    assert moved.read_bytes() == b"made before" and not old.exists() and made == []


def test_the_suite_never_writes_to_the_users_model_cache(model_cache):
    # conftest.model_cache: every registry of the run, and every process it starts, uses the run's own cache
    import os

    assert ModelRegistry().cache_dir == model_cache and os.environ["LIGHTMEM_CACHE"] == str(model_cache)
    assert model_cache.resolve() != (Path.home() / ".cache" / "lightmem").resolve()
