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
    """data_gen/distill.py: supervision mined from the dev benchmarks with the Stage-1 pipeline. The pipeline's
    nodes (``encoder``, ``store``, ``retrieval``, ...) are ``PipelineConfig``'s.

    Attributes:
        locomo_path: The LoCoMo dev file.
        locomo_train: LoCoMo conversations whose questions train (``"0-2"``); the rest are held out.
        locomo_test: LoCoMo conversations held out for the test metrics (``"3-4"``).
        lme_path: The LongMemEval file whose questions are split by ``datasets.splits.split_of``.
        lme_max: How many LongMemEval questions to mine (None: all).
        synth_dir: Where data_gen/synth.py wrote the synthetic samples.
        out_dir: Where the mined files go (``selector_*.jsonl``, ``compressor_*.jsonl``, ``complexity_*.jsonl``).
        k: ``retrieve(k)``: each mined group holds the candidate_factor × K Stage-1 candidates.
    """

    locomo_path: str = "${paths.data}/locomo/locomo_dev.json.gz"
    locomo_train: Any = "0-2"
    locomo_test: Any = "3-4"
    lme_path: str = "${paths.data}/longmemeval/longmemeval_oracle_dev.json.gz"
    lme_max: int | None = None
    synth_dir: str = "${paths.distilled}/synth"
    out_dir: str = "${paths.distilled}"
    k: int = 10


@dataclass
class RankerTrainConfig(DistillConfig):
    """train/ranker.py: the Stage-2 ranker, fitted on Stage-1 candidate groups of the dev splits
    (``lightmem.training.ranker.train_ranker``). Besides ``DistillConfig``'s fields:

    Attributes:
        model: ``linear`` (listwise, L-BFGS; SLM-2's base) or ``trees`` (boosted, pointwise: ``trees`` below).
        trees: HistGradientBoostingClassifier's settings for ``model=trees``.
        k: ``retrieve(k)``: the ranker orders the candidate_factor × K Stage-1 candidates.
        budget: Tokens the held-out metric packs the ranked candidates into.
        loss: A name in ``training.losses.RANKING_LOSSES`` (the linear model's loss).
        l2: The linear model's L2 penalty.
        listwise_weight: Weight of the listwise term in the ``both`` losses.
        folders: The folder name of each model kind, so ``model=trees`` never overwrites the linear ranker.
        out_dir: The run's folder (resumable state, summary).
        export_dir: Where the best model and its card are exported (None: keep the run only).
        cache_dir: Mined groups, keyed by the pipeline, the data and the embedder (refits take seconds).
    """

    model: str = "linear"
    trees: Any = field(default_factory=lambda: {"max_iter": 200, "learning_rate": 0.05, "max_leaf_nodes": 15,
                                                "l2_regularization": 1.0})
    k: int = 20
    budget: int = 600
    loss: str = "both"
    l2: float = 1.0e-3
    listwise_weight: float = 1.0
    folders: Any = field(default_factory=lambda: {"linear": "ranker", "trees": "ranker_trees"})
    out_dir: str = "checkpoints/runs/${folders.${model}}"
    export_dir: str | None = "checkpoints/${folders.${model}}"
    cache_dir: str = "outputs/ranker_groups"


@dataclass
class SLMTrainConfig(RankerTrainConfig):
    """train/slm.py: SLM-2 (``selector=slm``), a cross-encoder stacked on the ranker, trained on Stage-1 groups
    mined as ``train/ranker.py`` mines them, on the pipeline it serves (the same cache folder, its own key);
    ``alpha`` and ``N`` are chosen on training groups it did not fit (``lightmem.training.slm.train_slm``).
    Besides ``RankerTrainConfig``'s fields:

    Attributes:
        ranker: The ranker checkpoint it is stacked on (and serves with).
        base_model: The cross-encoder's base model.
        stack_locomo: LoCoMo conversations held apart to choose alpha and N.
        stack_share: Share of the LongMemEval training questions held apart for the same.
        alphas: The alpha grid (weight of the cross-encoder's logit beside the ranker's).
        top_ns: The N grid (how many of the ranker's top candidates the cross-encoder reorders; 0: the ranker alone).
            It stops where the CPU cost does: 10 pairs take ~17 ms with 3 int8 layers on 2 cores.
        served_packing: Choose alpha and N (and score the held-out groups) packing as the engine serves: whole
            memories in retrieval.whole_share of the budget, then excerpts. False: whole memories only.
        int8: Choose and test with the int8 model retrieval serves on CPU.
        task: ``SLMTask``'s settings (lightmem/training/slm.py).
        optim: ``TrainSpec``'s settings (lightmem/training/loop.py).
        lora: The LoRA node (conf/lora/), or ``enabled: false`` for full fine-tuning.
        logger: The metric logger node (conf/logger/).
        out_dir: The run's folder.
        export_dir: Where the adapter, stack.json and the card go (None: keep the run only).
    """

    ranker: str = "${lightmem_checkpoint:ranker}"
    base_model: str = "all-MiniLM-L6-v2"
    stack_locomo: Any = field(default_factory=lambda: ["conv-41"])
    stack_share: float = 0.25
    alphas: Any = field(default_factory=lambda: [0.25, 0.5, 1.0, 2.0, 4.0])
    top_ns: Any = field(default_factory=lambda: [0, 5, 10])
    served_packing: bool = True
    int8: bool = True
    task: Any = None
    optim: Any = None
    lora: Any = None
    logger: Any = None
    out_dir: str = "checkpoints/runs/slm"
    export_dir: str | None = "checkpoints/slm"


@dataclass
class DocEncoderTrainConfig(DistillConfig):
    """train/doc_encoder.py: a small document encoder distilled into the served encoder's space (``encoder`` is
    the teacher; ``lightmem.training.doc_encoder``). Besides ``DistillConfig``'s fields:

    Attributes:
        base_model: The student's base model.
        lme_s_path: LongMemEval_S, whose training questions' haystacks add texts (None: the oracle file only).
        vector_cache: The teacher's vectors by content (conf/paths: paths.vector_cache).
        distill_set: The texts and the teacher's vectors in one file: read when it exists, else made.
        held_out: Score the student served on held-out memories (needs the teacher; off on a GPU machine).
        fitted: An earlier run's out_dir fitted with the same settings: score and export it, fit nothing.
        prepare_only: Make the distillation set and stop.
        max_texts: At most this many training texts (None: all).
        val_texts: Texts kept apart for validation.
        task: ``DocEncoderTask``'s settings.
        optim: ``TrainSpec``'s settings.
        lora: The LoRA node (conf/lora/).
        metric: The validation metric maximised.
        out_dir: The run's folder.
        export_dir: Where the encoder and its card go (None: keep the run only).
    """

    base_model: str = "all-MiniLM-L6-v2"
    lme_s_path: str | None = "${paths.data}/longmemeval/longmemeval_s_dev_sample.json.gz"
    vector_cache: str | None = None
    distill_set: str | None = None
    held_out: bool = True
    fitted: str | None = None
    prepare_only: bool = False
    max_texts: int | None = None
    val_texts: int = 300
    task: Any = None
    optim: Any = None
    lora: Any = None
    metric: str = "cosine"
    out_dir: str = "checkpoints/runs/doc_encoder"
    export_dir: str | None = "checkpoints/embedder_docs"


# The four trainers below read the files data_gen/distill.py writes. Their fields keep the order the composed
# config had before it had a schema, so a run's saved config (and its card) reads as it did.


@dataclass
class EmbedderTrainConfig:
    """train/embedder.py: the memory embedder, LoRA on a bi-encoder with InfoNCE over (question, evidence turn,
    Stage-1 hard negatives) (``lightmem.training.embedder.train_embedder``).

    Attributes:
        lora: The LoRA node (conf/lora/), or ``enabled: false`` for full fine-tuning.
        logger: The metric logger node (conf/logger/).
        base_model: The bi-encoder trained (a packaged sentence-transformers model).
        data_dir: Where data_gen/distill.py wrote ``selector_{train,val,test}.jsonl``.
        sources: Which sources of selector_train.jsonl to train on (``synth``, ``longmemeval``, ``locomo``).
        max_train_groups: At most this many training groups (None: all).
        max_eval_groups: Validation groups scored at each evaluation.
        task: ``EmbedderTask``'s settings (negatives, temperature, max_length, k).
        optim: ``TrainSpec``'s settings (lightmem/training/loop.py).
        metric: The validation metric maximised (``recall_all@10``).
        out_dir: The run's folder (resumable state, summary).
        export_dir: Where the best adapter and its card go (None: keep the run only).
    """

    lora: Any = None
    logger: Any = None
    base_model: str = "all-mpnet-base-v2"
    data_dir: str = "outputs/data"
    sources: list[str] = field(default_factory=lambda: ["synth", "longmemeval", "locomo"])
    max_train_groups: int | None = None
    max_eval_groups: int | None = 300
    task: Any = None
    optim: Any = None
    metric: str = "recall_all@10"
    out_dir: str = "checkpoints/runs/embedder"
    export_dir: str | None = "checkpoints/embedder"


@dataclass
class WordScorerTrainConfig:
    """train/word_scorer.py: the word scorer, a MiniLM token classifier (keep/drop per word) with LoRA and
    class-weighted cross-entropy (``lightmem.training.classify.train_word_scorer``).

    Attributes:
        lora: The LoRA node (conf/lora/).
        logger: The metric logger node (conf/logger/).
        base_model: The token classifier's base model.
        data_dir: Where data_gen/distill.py wrote ``compressor_{train,test}.jsonl``.
        max_length: Tokens per turn.
        balance: Weight the two classes by their inverse frequency.
        rate: Share of words kept when the metrics are scored.
        optim: ``TrainSpec``'s settings.
        metric: The validation metric maximised (``token_f1``).
        out_dir: The run's folder.
        export_dir: Where the best adapter and its card go (None: keep the run only).
    """

    lora: Any = None
    logger: Any = None
    base_model: str = "all-MiniLM-L6-v2"
    data_dir: str = "outputs/data"
    max_length: int = 160
    balance: bool = True
    rate: float = 0.5
    optim: Any = None
    metric: str = "token_f1"
    out_dir: str = "checkpoints/runs/word_scorer"
    export_dir: str | None = "checkpoints/word_scorer"


@dataclass
class ComplexityTrainConfig:
    """train/complexity.py: the query-complexity classifier, LOW/HIGH with C_q = P(HIGH), a MiniLM sequence
    classifier with LoRA (``lightmem.training.classify.train_complexity``).

    Attributes:
        lora: The LoRA node (conf/lora/).
        logger: The metric logger node (conf/logger/).
        base_model: The classifier's base model.
        data_dir: Where data_gen/distill.py wrote ``complexity_{train,val,test}.jsonl``.
        sources: Which sources train (``locomo``, ``longmemeval``, ``synth``); LoCoMo has no validation split.
        max_length: Tokens per question.
        balance: Weight the two classes by their inverse frequency.
        optim: ``TrainSpec``'s settings.
        metric: The validation metric maximised (``f1``).
        out_dir: The run's folder.
        export_dir: Where the best adapter and its card go (None: keep the run only).
    """

    lora: Any = None
    logger: Any = None
    base_model: str = "all-MiniLM-L6-v2"
    data_dir: str = "outputs/data"
    sources: list[str] = field(default_factory=lambda: ["locomo", "longmemeval"])
    max_length: int = 64
    balance: bool = True
    optim: Any = None
    metric: str = "f1"
    out_dir: str = "checkpoints/runs/complexity"
    export_dir: str | None = "checkpoints/complexity"


@dataclass
class CrossEncoderTrainConfig:
    """train/cross_encoder.py: the cross-encoder Stage-2 selector (``selector=cross_encoder``), or SmolLM2 yes/no,
    trained on groups of one question and its candidates (``lightmem.training.selector.train_cross_encoder``).

    Attributes:
        model: The recipe node (conf/selector_recipe/): its ``_target_`` class and that class's settings.
        lora: The LoRA node (conf/lora/).
        logger: The metric logger node (conf/logger/).
        data_dir: Where data_gen/distill.py wrote ``selector_{train,val,test}.jsonl``.
        sources: Which sources of selector_train.jsonl to train on.
        max_train_groups: At most this many training groups (None: all).
        max_eval_groups: Validation groups scored at each evaluation.
        max_test_groups: Held-out groups scored per source (None: all; the generative variant is slow on CPU).
        task: ``SelectorTask``'s settings (group size, positives, loss, max_length, k).
        optim: ``TrainSpec``'s settings.
        metric: The validation metric maximised (``recall_all@10``).
        out_dir: The run's folder.
        export_dir: Where the best adapter and its card go (None: keep the run only).
    """

    model: Any = None
    lora: Any = None
    logger: Any = None
    data_dir: str = "outputs/data"
    sources: list[str] = field(default_factory=lambda: ["synth", "longmemeval", "locomo"])
    max_train_groups: int | None = None
    max_eval_groups: int | None = 300
    max_test_groups: int | None = None
    task: Any = None
    optim: Any = None
    metric: str = "recall_all@10"
    out_dir: str = "checkpoints/runs/cross_encoder"
    export_dir: str | None = "checkpoints/cross_encoder"


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
           "schema_train_doc_encoder": DocEncoderTrainConfig, "schema_train_embedder": EmbedderTrainConfig,
           "schema_train_word_scorer": WordScorerTrainConfig, "schema_train_complexity": ComplexityTrainConfig,
           "schema_train_cross_encoder": CrossEncoderTrainConfig}


def register_configs() -> None:
    """Register the training schemas and lightmem's resolvers (idempotent)."""
    register_schemas(SCHEMAS)
