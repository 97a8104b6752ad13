"""Compose one config group option (e.g. controller=fast) outside the running Hydra app."""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

CONF = Path(__file__).resolve().parents[1] / "conf"


def compose_group(group: str, option: str) -> DictConfig:
    """The node of ``conf/<group>/<option>.yaml`` with its defaults list resolved (one level)."""
    node = OmegaConf.load(CONF / group / f"{option}.yaml")
    defaults = node.pop("defaults", None) if "defaults" in node else None
    base = OmegaConf.create()
    for d in defaults or []:
        if d != "_self_":
            base = OmegaConf.merge(base, compose_group(group, d))
    return OmegaConf.merge(base, node)
