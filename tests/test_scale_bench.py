"""tools/scale.py end to end on a tiny grid: it builds, serves in a fresh process and reports the
numbers it promises (an HNSW point with its recall against exact search)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import scale  # noqa: E402


@pytest.mark.multiprocess  # each point is served by a process of its own
def test_a_tiny_grid_reports_memory_latency_and_hnsw_recall(tmp_path, capsys):
    rc = scale.main(["--grid", "3x40", "1x300:hnsw", "--work", str(tmp_path / "stores"), "--out", str(tmp_path / "out"),
                     "--snapshot-min-items", "100"])
    assert rc == 0
    results = json.loads((tmp_path / "out/results.json").read_text())["results"]
    flat, hnsw = (r["serve"] for r in results)
    for s in (flat, hnsw):
        assert s["rss_end_mb"] > 0 and 0 < s["cold_p50_ms"] <= s["cold_p95_ms"] and s["warm_p50_ms"] > 0
    assert flat["cache"]["views"] == 3 and flat["index_recall_at_10"] is None
    assert 0.9 <= hnsw["index_recall_at_10"] <= 1.0
    md = (tmp_path / "out/results.md").read_text()
    assert "1x300-hnsw" in md and "| exact |" in md and (tmp_path / "out/scale.png").stat().st_size > 0


def test_a_bad_grid_point_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        scale.main(["--grid", "ten-by-ten"])
    assert exc.value.code == 2 and "USERSxITEMS" in capsys.readouterr().err
