"""The encoder speed benchmark: every backend measured, interleaved, against the first one's vectors."""
from __future__ import annotations

import json

import pytest
from conftest import TINY_LOCOMO, compose, entry_point

from lightmem.evaluation.benchmarks.encoder_speed import compare_backends
from lightmem.models.embedder import HashingEmbedder


def test_compare_backends_times_each_backend_and_compares_vectors():
    built = []

    def build(backend: str):
        built.append(backend)
        return HashingEmbedder(64, name=backend)

    texts = ["Ava lives in Porto", "Ben has a dog", "Cleo plays the cello", "Dan runs", "Eve has cats"]
    rows = compare_backends(build, ["ref", "same"], ["where is Ava?", "who has a dog?"], texts, rounds=2, chunk=2)
    assert built == ["ref", "same"] and [r["backend"] for r in rows] == built and rows[1]["name"] == "same-64"
    assert all(r["query_ms_p95"] >= r["query_ms_p50"] > 0 and r["ingest_turns_per_s"] > 0 for r in rows)
    assert rows[1]["cosine_to_ref_mean"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="one size"):  # vectors of another size cannot be compared: said, not broadcast
        compare_backends(lambda b: HashingEmbedder(64 if b == "ref" else 32), ["ref", "x"], ["q"], ["t"], rounds=1)


@pytest.mark.slow
def test_encoder_speed_runs_the_three_minilm_backends(tmp_path):
    mod = entry_point("encoder_speed")
    cfg = compose("encoder_speed", ["encoder=minilm_tuned", f"corpus={TINY_LOCOMO}", "n_queries=3", "n_texts=8", "rounds=1", f"out_dir={tmp_path}",
                                    f"+encoder.cache_dir={tmp_path / 'cache'}"])
    rows = {r["backend"]: r for r in mod.run(cfg)["encoder_speed"]}
    assert set(rows) == {"torch", "onnx", "onnx_int8"} and rows["onnx_int8"]["name"] == rows["torch"]["name"] + "+int8"
    assert rows["onnx"]["cosine_to_ref_min"] > 0.9999 and rows["onnx_int8"]["cosine_to_ref_mean"] > 0.98
    assert json.loads((tmp_path / "results.json").read_text())["n_texts"] == 8 and (tmp_path / "results.md").exists()


@pytest.mark.multiprocess
def test_busy_processes_run_during_the_block_and_are_gone_after():
    import psutil

    from lightmem.evaluation.benchmarks.encoder_speed import busy_processes

    me = psutil.Process()
    before = set(me.children())  # a worker may hold children of its own (another test's server shutting down)
    with busy_processes(2):
        kids = [k for k in me.children() if k not in before]
        assert len(kids) == 2 and all(k.is_running() and k.status() != psutil.STATUS_ZOMBIE for k in kids)
    assert not [k for k in me.children() if k not in before]
    with pytest.raises(ValueError, match=">= 0"), busy_processes(-1):
        pass
