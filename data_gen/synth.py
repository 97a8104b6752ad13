"""Synthetic (Query, Subgraph, Path) data: per-user graphs → dialogues → samples.

    python data_gen/synth.py n_samples=2000 seed=0 out_dir=outputs/data/synth
"""
from __future__ import annotations

import json
import logging
import sys

import hydra
from omegaconf import DictConfig, OmegaConf

from lightmem.synth import SynthSpec, write
from lightmem.training.schemas import register_configs

log = logging.getLogger("lightmem.data_gen.synth")


def run(cfg: DictConfig) -> dict:
    """Write train/val/test JSONL, LoCoMo-format conversations and data_card.json to ``out_dir``."""
    fields = {k: v for k, v in OmegaConf.to_container(cfg, resolve=True).items() if k in SynthSpec.__dataclass_fields__}
    fields["splits"] = tuple(fields.get("splits", SynthSpec.splits))
    card = write(SynthSpec(**fields), cfg.out_dir, show_progress=sys.stderr.isatty())
    print(json.dumps({k: card[k] for k in ("samples", "conversations", "hops", "kinds")}, indent=1))
    print(f"wrote {cfg.out_dir}/{{train,val,test}}.jsonl, *_locomo.json, data_card.json")
    return card


@hydra.main(version_base="1.3", config_path="../conf", config_name="synth")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
