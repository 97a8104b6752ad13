"""tools/gpu_check.py: refuses clearly without CUDA, names its checks, and on a GPU its checks pass."""
from __future__ import annotations

import json

import pytest
from conftest import entry_point


def _script():
    return entry_point("gpu_check", "tools")


def test_without_cuda_it_says_so_and_exits_non_zero(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _script().main(["--only", "encoder"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_an_unknown_check_is_a_usage_error_naming_the_checks(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        _script().main(["--device", "cpu", "--only", "encoder,bogus", "--encoders", "all-MiniLM-L6-v2", "--docs", "8",
                        "--out", str(tmp_path / "r.json")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "unknown check 'bogus'" in err and "slm_lora" in err


def test_a_failing_check_is_reported_and_the_run_fails(tmp_path, monkeypatch):
    script = _script()

    def broken(args):
        raise RuntimeError("no such kernel")

    monkeypatch.setattr(script, "check_faiss", broken)
    out = tmp_path / "r.json"
    assert script.main(["--device", "cpu", "--only", "faiss", "--out", str(out)]) == 1
    report = json.loads(out.read_text())
    assert report["checks"]["faiss"]["error"] == "RuntimeError: no such kernel"


@pytest.mark.gpu
def test_on_a_gpu_the_encoder_and_faiss_checks_pass(tmp_path):
    out = tmp_path / "r.json"
    assert _script().main(["--only", "encoder,faiss", "--encoders", "all-MiniLM-L6-v2", "--docs", "256",
                           "--out", str(out)]) == 0
    checks = json.loads(out.read_text())["checks"]
    assert checks["encoder"]["all-MiniLM-L6-v2"]["min_cosine_gpu_vs_cpu"] > 0.999 and checks["faiss"]["ok"]
