"""The data a clone needs lives in the clone; fetching checks every file's hash."""
from __future__ import annotations

import gzip
import json

import pytest
from conftest import ROOT, compose
from omegaconf import OmegaConf

from lightmem.datasets.catalog import Catalog, DataFile, content_sha256, data_dir, sha256_file
from lightmem.datasets.fetch import DataUnavailableError, fetch, status

ENTRY_CONFIGS = ["locomo", "longmemeval", "growth", "latency", "encoder_speed", "roles", "distill", "sensory_bench", "ltm_bench", "suite",
                 "suite_demo"]


def _data_paths(node) -> list[str]:
    """Every string in a resolved config that names a .json file (override strings included)."""
    if isinstance(node, dict):
        return [p for v in node.values() for p in _data_paths(v)]
    if isinstance(node, list):
        return [p for v in node for p in _data_paths(v)]
    if isinstance(node, str) and (".json" in node):
        return [node.split("=", 1)[-1]]
    return []


@pytest.mark.parametrize("name", ENTRY_CONFIGS)
def test_every_default_data_path_is_a_committed_file_of_the_clone(name, monkeypatch):
    monkeypatch.delenv("LIGHTMEM_DATA", raising=False)
    cfg = OmegaConf.to_container(compose(name, []), resolve=True)
    paths = _data_paths({k: v for k, v in cfg.items() if k != "hydra"})
    committed = {str(ROOT / "data" / f.path) for f in Catalog.load().files.values() if f.committed}
    assert paths or name in {"suite_demo"}, "the config names no data file"
    for p in paths:
        assert p in committed, f"{name}: default {p} is not a committed data file"


def test_lightmem_data_moves_every_default(monkeypatch, tmp_path):
    monkeypatch.setenv("LIGHTMEM_DATA", str(tmp_path))
    assert data_dir() == tmp_path
    cfg = compose("locomo", [])
    assert cfg.data.path == str(tmp_path / "locomo" / "locomo_dev.json.gz")


def test_committed_files_match_the_manifest():
    rows = {s.name: s for s in status(Catalog.load(), ROOT / "data")}
    assert {n for n, s in rows.items() if s.committed} == {"locomo_dev", "longmemeval_oracle_dev", "longmemeval_s_dev_sample"}
    assert all(s.state == "ok" for s in rows.values() if s.committed)


def _upstream(tmp_path, records) -> Catalog:
    """A catalog whose one fetchable file is cut from a local 'official release' (a file:// URL)."""
    src = tmp_path / "release.json"
    src.write_text(json.dumps(records))
    wanted = [records[0], records[2]]
    f = DataFile(path="bench/dev.json.gz", sha256="0" * 64, size=0, committed=False, license="MIT", source="rel",
                 select={"key": "qid", "ids": "dev"}, content_sha256=content_sha256(wanted))
    return Catalog({"dev": f}, {"rel": {"url": src.as_uri(), "file": "bench/release.json", "sha256": None}},
                   {"dev": ["a", "c"]})


def test_fetch_cuts_the_dev_split_from_the_release_and_checks_its_records(tmp_path):
    records = [{"qid": "a", "x": 1}, {"qid": "b", "x": 2}, {"qid": "c", "x": 3}]
    cat = _upstream(tmp_path, records)
    [out] = fetch(cat, tmp_path / "data")
    assert json.load(gzip.open(out, "rt")) == [records[0], records[2]]
    assert not list((tmp_path / "data" / "bench").glob("*.part"))


def test_fetch_refuses_a_release_whose_records_differ(tmp_path):
    cat = _upstream(tmp_path, [{"qid": "a", "x": 1}, {"qid": "b", "x": 2}, {"qid": "c", "x": 3}])
    (tmp_path / "release.json").write_text(json.dumps([{"qid": "a", "x": 1}, {"qid": "c", "x": 999}]))
    with pytest.raises(DataUnavailableError, match="differs from the copy"):
        fetch(cat, tmp_path / "data")
    assert not (tmp_path / "data" / "bench" / "dev.json.gz").exists()
    [out] = fetch(cat, tmp_path / "data", verify=False)  # the user's explicit choice
    assert json.load(gzip.open(out, "rt"))[1]["x"] == 999


def test_fetch_from_a_folder_checks_the_file_hash(tmp_path):
    good = ROOT / "data" / "locomo" / "dev_ids.json"
    f = DataFile(path="locomo/dev_ids.json", sha256=sha256_file(good), size=good.stat().st_size, committed=False,
                 license="x")
    cat = Catalog({"ids": f}, {}, {})
    src = tmp_path / "src"
    (src / "locomo").mkdir(parents=True)
    (src / "locomo" / "dev_ids.json").write_text("{}")
    with pytest.raises(DataUnavailableError, match="sha256"):
        fetch(cat, tmp_path / "data", source_dir=src)
    assert not (tmp_path / "data" / "locomo" / "dev_ids.json").exists()
    (src / "locomo" / "dev_ids.json").write_bytes(good.read_bytes())
    assert fetch(cat, tmp_path / "data", source_dir=src)[0].read_bytes() == good.read_bytes()


def test_fetch_without_network_says_what_to_do(tmp_path):
    f = DataFile(path="b/dev.json.gz", sha256="0" * 64, size=0, committed=False, license="x", source="rel",
                 select={"key": "qid", "ids": "dev"})
    cat = Catalog({"dev": f}, {"rel": {"url": "http://127.0.0.1:9/none.json", "file": "b/r.json"}}, {"dev": []})
    with pytest.raises(DataUnavailableError, match="--from DIR"):
        fetch(cat, tmp_path, timeout=2)
