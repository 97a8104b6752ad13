"""Structured configs of the training and distillation entry points (train/*.py, data_gen/*.py),
the node → spec mappers of their ``lora`` and ``optim`` nodes, and their registration.

``register_configs()`` stores the schemas in Hydra's ConfigStore; the entry points call it before
Hydra composes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
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
    """train/ranker.py: the Stage-2 ranker, fitted on Stage-1 candidate groups of the dev splits."""

    model: str = "linear"  # linear (listwise, L-BFGS) or trees (boosted, pointwise: ``trees`` below)
    trees: Any = field(default_factory=lambda: {"max_iter": 200, "learning_rate": 0.05, "max_leaf_nodes": 15,
                                                "l2_regularization": 1.0})  # HistGradientBoostingClassifier's
    k: int = 20  # retrieve(k): the ranker orders the candidate_factor × K Stage-1 candidates
    budget: int = 600  # tokens: the held-out metric packs the ranked candidates into it
    loss: str = "both"  # a name in training.losses.RANKING_LOSSES
    l2: float = 1.0e-3
    listwise_weight: float = 1.0
    # Each model kind has its own folders, so `model=trees` never overwrites the linear ranker SLM-2 is stacked on
    folders: Any = field(default_factory=lambda: {"linear": "ranker", "trees": "ranker_trees"})
    out_dir: str = "checkpoints/runs/${folders.${model}}"
    export_dir: str | None = "checkpoints/${folders.${model}}"
    cache_dir: str = "outputs/ranker_groups"  # mined groups, keyed by the pipeline, data and embedder


@dataclass
class SLMTrainConfig(RankerTrainConfig):
    """train/slm.py: SLM-2 (``selector=slm``), a cross-encoder stacked on the ranker, trained on Stage-1 groups
    mined as ``train/ranker.py`` mines them, on the pipeline it serves (the same cache folder, its own key);
    ``alpha`` and ``N`` are chosen on training groups it did not fit."""

    ranker: str = "${lightmem_checkpoint:ranker}"  # the ranker it is stacked on (and serves with)
    base_model: str = "all-MiniLM-L6-v2"
    stack_locomo: Any = field(default_factory=lambda: ["conv-41"])  # conversations held apart to choose alpha and N
    stack_share: float = 0.25  # share of the LongMemEval training questions held apart for the same
    alphas: Any = field(default_factory=lambda: [0.25, 0.5, 1.0, 2.0, 4.0])
    # 0: the ranker alone. The grid stops where the CPU cost does: 10 pairs take ~17 ms with 3 int8 layers (2 cores)
    top_ns: Any = field(default_factory=lambda: [0, 5, 10])
    # Choose alpha and N (and score the held-out groups) packing as the engine serves: whole memories in
    # retrieval.whole_share of the budget, then excerpts. False: whole memories only (the metric before).
    served_packing: bool = True
    int8: bool = True  # choose and test with the int8 model retrieval serves on CPU
    task: Any = None  # SLMTask (lightmem/training/slm.py)
    optim: Any = None  # TrainSpec
    lora: Any = None
    logger: Any = None
    out_dir: str = "checkpoints/runs/slm"
    export_dir: str | None = "checkpoints/slm"


@dataclass
class DocEncoderTrainConfig(DistillConfig):
    """train/doc_encoder.py: a small document encoder distilled into the served encoder's space (``encoder`` is
    the teacher; ``lightmem.training.doc_encoder``)."""

    base_model: str = "all-MiniLM-L6-v2"
    lme_s_path: str | None = "${paths.data}/longmemeval/longmemeval_s_dev_sample.json.gz"  # its train questions' haystacks too
    vector_cache: str | None = None  # the teacher's vectors by content (conf/paths: paths.vector_cache)
    distill_set: str | None = None  # the texts and the teacher's vectors in one file: read when it exists, else made
    held_out: bool = True  # score the student served on held-out memories (needs the teacher; off on a GPU machine)
    fitted: str | None = None  # an earlier run's out_dir fitted with the same settings: score and export it, fit nothing
    prepare_only: bool = False  # make the distillation set and stop
    max_texts: int | None = None
    val_texts: int = 300
    task: Any = None  # DocEncoderTask
    optim: Any = None  # TrainSpec
    lora: Any = None
    metric: str = "cosine"
    out_dir: str = "checkpoints/runs/doc_encoder"
    export_dir: str | None = "checkpoints/embedder_docs"


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


SCHEMAS = {"schema_distill": DistillConfig, "schema_train_ranker": RankerTrainConfig, "schema_train_slm": SLMTrainConfig,
           "schema_train_doc_encoder": DocEncoderTrainConfig}


def register_configs() -> None:
    """Register the training schemas and lightmem's resolvers (idempotent)."""
    register_schemas(SCHEMAS)
