"""Which weight matrices keep the encoder's int8 vectors close to fp32 (writes numbers, asserts nothing).

    python eval/int8_layers.py                                  # the default (mpnet) embedder, 300 LoCoMo turns
    python eval/int8_layers.py encoder=minilm_tuned n_texts=600
"""
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lightmem.evaluation.runs.int8_layers import run
from lightmem.evaluation.schemas import register_configs


@hydra.main(version_base="1.3", config_path="../conf", config_name="int8_layers")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
