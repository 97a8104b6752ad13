"""One default pipeline: conf/pipeline/default.yaml builds what ``Memory.open`` ships, and every entry point composes it."""
from __future__ import annotations

import pytest
from conftest import ROOT, compose

from lightmem.config.builders import build_memory
from lightmem.memory import Memory

RETRIEVAL = ("fusion", "w_dense", "w_lexical", "w_meta", "w_recency", "rrf_k", "depth_factor", "candidate_factor",
             "half_life", "fill_budget", "whole_share", "excerpt_rate", "hop_seeds", "hop_extra", "session_spread",
             "anchor_dates", "routing", "ltm")


def describe(memory: Memory) -> dict:
    """Every choice of a Memory's read and write paths that a configuration can change."""
    r, w = memory.retriever, memory._write
    ranker = r.selector
    return {
        "embedder": memory.embedder.name,
        "store": (type(memory.store).__name__, memory.store.capacity),
        "retrieval": {name: getattr(r, name) for name in RETRIEVAL},
        "selector": (type(ranker).__name__, getattr(ranker, "digest", None)),  # the ranker's fitted model, either kind
        "controller": type(memory.controller).__name__,
        "writer": (type(memory.writer).__name__, vars(memory.writer)),
        "composer": (memory.composer.counter.name, memory.composer.budget, memory.composer.group_dates),
        "k": memory.k,
        "max_turn_chars": memory.max_turn_chars,
        "background": memory.indexer is not None,
        "write": (w.word_scorer, w.sensory_stage, w.maintainer, w.ltm),
    }


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with Memory.open(tmp_path_factory.mktemp("open") / "s", background_index=True) as memory:
        yield describe(memory)


@pytest.mark.parametrize("entry", ["locomo", "longmemeval", "latency", "growth"])
def test_every_entry_point_composes_the_pipeline_memory_open_ships(entry, served, tmp_path):
    cfg = compose(entry, ["memory.background_index=true"])  # the test suite's environment turns it off by default
    with build_memory(cfg, tmp_path / "s") as memory:
        built = describe(memory)
    if entry == "growth":  # growth measures growth, not eviction: its one documented override
        assert built["store"][1] == 100_000
        built["store"] = served["store"]
    assert built == served


def test_the_pipeline_file_names_every_part_and_each_entry_point_uses_it():
    text = (ROOT / "conf" / "pipeline" / "default.yaml").read_text()
    for part in ("encoder", "store", "retrieval", "controller", "selector", "writer", "sensory", "ltm", "memory"):
        assert f"- /{part}: " in text, part
    for entry in ("locomo", "longmemeval", "latency", "growth"):
        config = (ROOT / "conf" / f"{entry}.yaml").read_text()
        assert "- pipeline: default" in config and "- selector:" not in config, entry
