"""tools/serve_load.py --replicas: `lightmem serve` processes on one PostgreSQL database, driven round-robin, with
memories deleted through one replica and read through another: nothing lost, leaked or read stale."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.multiprocess

TOOL = Path(__file__).resolve().parents[1] / "tools" / "serve_load.py"


def _serve_load():
    spec = importlib.util.spec_from_file_location("serve_load", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_two_replicas_and_an_index_worker_lose_nothing_leak_nothing_and_read_nothing_stale(pg_uri, tmp_path):
    out = tmp_path / "out"
    rc = _serve_load().main(["--store", pg_uri, "--replicas", "2", "--index-workers", "1", "--duration", "2",
                             "--clients", "3", "--users", "4", "--seed-turns", "2", "--delete-ratio", "0.2",
                             "--out", str(out)])
    run = json.loads((out / "results.json").read_text())["runs"][0]
    assert rc == 0, run
    assert (run["replicas"], run["workers"], run["index_workers"]) == (2, 1, 1)
    assert len(run["rps_per_replica"]) == 2 and min(run["rps_per_replica"]) > 0  # both replicas were sent requests
    assert run["acknowledged_turns"] > 0 and run["lost_turns"] == 0
    assert run["searches_checked"] > 0 and run["cross_user_hits"] == 0
    assert run["deletes"] > 0 and run["reads_after_delete"] > 0
    assert run["stale_reads"] == 0 and run["deleted_still_stored"] == 0
    assert run["index_workers_died"] == [] and not run["errors"]
    assert "| 2 | 1 | 1 |" in (out / "results.md").read_text()
