"""Structured configs of the evaluation entry points (eval/*.py), and their registration.

``register_configs()`` stores them in Hydra's ConfigStore (the YAML files of conf/ extend them:
``defaults: [schema_locomo, ...]``); the entry points call it before Hydra composes.

``optimized_metric`` names the flat metric (as logged: ``metrics(results)`` of the entry point's
runner in ``lightmem.evaluation.runs``) that the entry point's ``main`` returns, so a Hydra/Optuna
sweep optimises any metric without code changes; None returns nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lightmem.config import PathsConfig, PipelineConfig, logger_field, register_schemas


@dataclass
class LocomoDataConfig:
    path: str = "${paths.data}/locomo/locomo_dev.json.gz"
    conversations: Any = "0-4"
    categories: list[int] = field(default_factory=lambda: [1, 2, 3, 4])
    max_questions: int | None = None  # per conversation: quick runs of slow settings


@dataclass
class QAConfig:
    """Answer generation from the packed memories (the ``llm`` node is the generator)."""

    enabled: bool = False
    judge: Any = None  # an LLM node (e.g. conf/llm/openai.yaml's keys); the LLM judge runs only when set
    batch_size: int = 8
    max_new_tokens: int = 32
    window: int = 2048  # the full-context baseline's default prompt budget (the run's budget is used when set)
    controls: bool = False  # also answer from the gold-evidence and random control contexts (3x the reader's time)
    instruction: str = "decline"  # the reader's instruction (lightmem.evaluation.harnesses.qa.READER_INSTRUCTIONS): decline | guess


@dataclass
class InjectConfig:
    """Error injection of the stress tests (LightMem-SLM §4.6-4.7); all off by default."""

    hq_noise: float = 0.0  # share of HQs that are irrelevant queries
    write_noise: float = 0.0  # share of Writer entries replaced by word salad
    saturation: float = 0.0  # irrelevant recent turns before the questions, as a multiple of the conversation's turns


@dataclass
class LocomoEvalConfig(PipelineConfig):
    data: LocomoDataConfig = field(default_factory=LocomoDataConfig)
    ks: list[int] = field(default_factory=lambda: [5, 10, 20])
    budget: int = 600  # tokens of the whole prompt build_context returns, as memory.tokenizer counts them
    out_dir: str = "outputs/locomo"
    keep_stores: bool = False
    # document vectors by content, read back by later runs that keep the encoder (conf/paths: paths.vector_cache);
    # null or "": every run embeds its turns (what a throughput measurement needs)
    vector_cache: str | None = None
    # None: the Memory this config builds; else a baseline System as ``_target_`` (e.g. conf/experiment/
    # baseline_full_context.yaml), given the prompt's token counter (memory.tokenizer) as ``counter``.
    system: Any = None
    qa: QAConfig = field(default_factory=QAConfig)
    inject: InjectConfig = field(default_factory=InjectConfig)
    seed: int = 0  # seeds the stochastic parts: error injection (and sampling generators)
    optimized_metric: str | None = "eval/recall_all@budget"


@dataclass
class LongMemEvalDataConfig:
    path: str = "${paths.data}/longmemeval/longmemeval_oracle_dev.json.gz"
    max_instances: int | None = None  # spread evenly over the file (every question type keeps its share)
    types: list[str] | None = None  # keep only these question types
    # keep only questions of these hash splits of their id (train / val / test, as the trainers split them):
    # [test] is what no committed checkpoint trained or chose settings on
    splits: list[str] | None = None
    # grow every haystack to this many sessions with other questions' filler sessions (a LongMemEval_M-like
    # history from an S file; datasets.longmemeval.pad_haystacks); None: as in the file
    pad_sessions: int | None = None


@dataclass
class LongMemEvalConfig(PipelineConfig):
    data: LongMemEvalDataConfig = field(default_factory=LongMemEvalDataConfig)
    ks: list[int] = field(default_factory=lambda: [5, 10, 20])
    budget: int = 600
    out_dir: str = "outputs/longmemeval"
    # document vectors by content, read back by later runs that keep the encoder (conf/paths: paths.vector_cache);
    # null or "": every run embeds its turns (what a throughput measurement needs)
    vector_cache: str | None = None
    qa: QAConfig = field(default_factory=QAConfig)
    seed: int = 0
    optimized_metric: str | None = "lme/session_recall_all@10"


@dataclass
class GrowthConfig(PipelineConfig):
    """MTM growth along one trajectory (LightMem-SLM §4.5)."""

    locomo_path: str = "${paths.data}/locomo/locomo_dev.json.gz"
    locomo_conversations: Any = "0-4"
    filler_path: str | None = "${paths.data}/longmemeval/longmemeval_s_dev_sample.json.gz"
    sizes: list[int] = field(default_factory=lambda: [100, 1000, 5000, 10_000])
    k: int = 10
    budget: int = 600
    max_questions: int | None = 300  # per checkpoint, spread evenly over the answerable ones
    out_dir: str = "outputs/growth"
    optimized_metric: str | None = None  # e.g. growth/reranking/recall_all@budget@10000


@dataclass
class LatencyBenchConfig(PipelineConfig):
    sizes: list[int] = field(default_factory=lambda: [100, 1000, 10_000])
    n_queries: int = 200
    k: int = 10
    budget: int | None = None  # a token budget per search (what build_context packs: excerpts, squeezing); None: best K
    corpus: list[str] = field(
        default_factory=lambda: [
            "${paths.data}/locomo/locomo_dev.json.gz",
            "${paths.data}/longmemeval/longmemeval_oracle_dev.json.gz",
        ]
    )
    out_dir: str = "outputs/latency"
    seed: int = 0
    optimized_metric: str | None = "latency/search_ms_p95"  # at the largest size (minimise)


@dataclass
class EncoderSpeedConfig:
    """eval/encoder_speed.py: query and ingest speed of the encoder's backends, measured interleaved."""

    encoder: Any = None
    paths: PathsConfig = field(default_factory=PathsConfig)
    logger: Any = logger_field()
    backends: list[str] = field(default_factory=lambda: ["torch", "onnx", "onnx_int8"])
    corpus: str = "${paths.data}/locomo/locomo_dev.json.gz"
    n_queries: int = 200
    n_texts: int | None = None  # None: every turn of the corpus
    rounds: int = 2
    chunk: int = 256
    busy_processes: int = 0  # other processes keeping a core busy during the measurement (a loaded machine)
    seed: int = 0
    out_dir: str = "outputs/encoder_speed"
    optimized_metric: str | None = None  # e.g. encoder_speed/onnx_int8/query_ms_p50


@dataclass
class RolesBenchConfig(PipelineConfig):
    data: LocomoDataConfig = field(default_factory=LocomoDataConfig)
    conversation: Any = 0
    controllers: list[str] = field(default_factory=lambda: ["passthrough", "fast", "experimental/generative"])
    selectors: list[str] = field(default_factory=lambda: ["none", "experimental/generative", "cross_encoder"])
    writers: list[str] = field(default_factory=lambda: ["turn", "extractive", "experimental/generative"])
    k: int = 10
    n_queries: int = 100
    n_queries_generative: int = 10
    n_turns: int = 200
    n_turns_generative: int = 24
    turns_per_batch: int = 8
    out_dir: str = "outputs/roles"
    optimized_metric: str | None = None


@dataclass
class SensoryBenchConfig(PipelineConfig):
    """eval/sensory.py: compression, segmentation and ingestion cost of the sensory stage."""

    parts: list[str] = field(default_factory=lambda: ["compression", "segmentation", "ingest"])
    locomo_path: str = "${paths.data}/locomo/locomo_dev.json.gz"
    locomo_conversations: Any = "0-4"
    rates: list[float] = field(default_factory=lambda: [0.5, 0.6, 0.7])
    lme_path: str = "${paths.data}/longmemeval/longmemeval_s_dev_sample.json.gz"
    lme_instances: Any = "0-9"
    seg_methods: list[str] = field(default_factory=lambda: ["hybrid", "attention", "similarity"])
    seg_rates: list[float] = field(default_factory=lambda: [0.6])
    seg_taus: list[float] = field(default_factory=lambda: [0.3])
    ingest_conversation: Any = 0
    ingest_writers: list[str] = field(default_factory=lambda: ["turn", "extractive", "experimental/generative"])
    ingest_sensory: list[str] = field(default_factory=lambda: ["none", "lightmem"])
    out_dir: str = "outputs/sensory"
    optimized_metric: str | None = None


@dataclass
class LTMBenchConfig(PipelineConfig):
    """eval/ltm.py: consolidation growth and cost, search latency idle vs during consolidation."""

    data: LocomoDataConfig = field(default_factory=LocomoDataConfig)
    conversation: Any = 0
    copies: int = 2
    n_queries: int = 100
    k: int = 10
    out_dir: str = "outputs/ltm_bench"
    optimized_metric: str | None = "latency/busy_ms_p95"  # search P95 during consolidation (minimise)


SCHEMAS = {
    "schema_locomo": LocomoEvalConfig,
    "schema_latency": LatencyBenchConfig,
    "schema_encoder_speed": EncoderSpeedConfig,
    "schema_longmemeval": LongMemEvalConfig,
    "schema_growth": GrowthConfig,
    "schema_roles": RolesBenchConfig,
    "schema_sensory_bench": SensoryBenchConfig,
    "schema_ltm_bench": LTMBenchConfig,
}


def register_configs() -> None:
    """Register the evaluation schemas and lightmem's resolvers (idempotent)."""
    register_schemas(SCHEMAS)
