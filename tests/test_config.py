"""Every config group composes, and every option instantiates (the real conf/ tree)."""
from __future__ import annotations

import pytest
from conftest import ROOT, compose
from hydra.utils import instantiate

from lightmem.config import build_memory
from lightmem.retrieval.scoring import Fusion

GROUPS = {g.name: sorted(p.stem for p in g.glob("*.yaml")) for g in (ROOT / "conf").iterdir() if g.is_dir()}


@pytest.mark.parametrize("retrieval", GROUPS["retrieval"])
@pytest.mark.parametrize("logger", GROUPS["logger"])
def test_groups_compose_and_build(tmp_path, retrieval, logger):
    cfg = compose("locomo", [f"retrieval={retrieval}", f"logger={logger}", "encoder=hashing"])
    m = build_memory(cfg, tmp_path / "s")
    assert m.retriever.fusion is Fusion(cfg.retrieval.fusion)
    assert m.retriever.candidate_factor == 2
    m.close()


@pytest.mark.parametrize("group", ["controller", "selector", "writer"])
def test_role_options_instantiate(group):
    for option in GROUPS[group]:
        obj = instantiate(compose("locomo", [f"{group}={option}"])[group])
        assert callable(getattr(obj, {"controller": "plan", "selector": "select", "writer": "write"}[group]))


def test_experiment_configs_compose():
    for exp in GROUPS["experiment"]:
        cfg = compose("locomo", [f"+experiment={exp}"])
        assert cfg.out_dir


def test_schema_rejects_unknown_keys():
    with pytest.raises(Exception, match="nonexistent"):
        compose("locomo", ["store.nonexistent=1"])


def test_latency_config_disables_the_query_cache():
    assert compose("latency", []).encoder.query_cache_size == 0
