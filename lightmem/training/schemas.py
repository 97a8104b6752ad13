"""Structured configs of the training and distillation entry points (train/*.py, data_gen/*.py),
the node → spec mappers of their ``lora`` and ``optim`` nodes, and their registration.

``register_configs()`` stores the schemas in Hydra's ConfigStore; the entry points call it before
Hydra composes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

from lightmem.config import PipelineConfig, register_schemas, to_container

if TYPE_CHECKING:  # torch loads only when a training entry point builds its specs
    from lightmem.training.loop import TrainSpec
    from lightmem.training.lora import LoraSpec


@dataclass
class DistillConfig(PipelineConfig):
    """data_gen/distill.py: supervision mined from the dev benchmarks with the Stage-1 pipeline."""

    locomo_path: str = "${paths.data}/locomo/locomo_dev.json.gz"
    locomo_train: Any = "0-2"  # conversations whose questions train; the rest are held out
    locomo_test: Any = "3-4"
    lme_path: str = "${paths.data}/longmemeval/longmemeval_oracle_dev.json.gz"
    lme_max: int | None = None  # LongMemEval questions to mine (None: all)
    synth_dir: str = "${paths.distilled}/synth"
    out_dir: str = "${paths.distilled}"
    k: int = 10


@dataclass
class RankerTrainConfig(DistillConfig):
    """train/ranker.py: the linear Stage-2 ranker, fitted on Stage-1 candidate groups of the dev splits."""

    k: int = 20  # retrieve(k): the ranker orders the candidate_factor × K Stage-1 candidates
    budget: int = 600  # tokens: the held-out metric packs the ranked candidates into it
    loss: str = "both"  # pointwise | listwise | both | per_positive | both_per_positive
    l2: float = 1.0e-3
    listwise_weight: float = 1.0
    out_dir: str = "checkpoints/runs/ranker"
    export_dir: str | None = "checkpoints/ranker"
    cache_dir: str = "outputs/ranker_groups"  # mined groups, keyed by the pipeline, data and embedder


def lora_spec(node: DictConfig | None) -> LoraSpec | None:
    """``conf/lora/*.yaml`` → LoraSpec, or None (full fine-tuning) when ``enabled: false``."""
    from lightmem.training.lora import LoraSpec

    if node is None or not node.get("enabled", True):
        return None
    return LoraSpec(**{k: v for k, v in to_container(node).items() if k != "enabled"})


def train_spec(node: DictConfig) -> TrainSpec:
    """The ``optim`` node → TrainSpec (unknown keys fail loudly)."""
    from lightmem.training.loop import TrainSpec

    return TrainSpec(**to_container(node))


SCHEMAS = {"schema_distill": DistillConfig, "schema_train_ranker": RankerTrainConfig}


def register_configs() -> None:
    """Register the training schemas and lightmem's resolvers (idempotent)."""
    register_schemas(SCHEMAS)
