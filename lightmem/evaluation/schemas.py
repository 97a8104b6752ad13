"""Structured configs of the evaluation entry points (eval/*.py), and their registration.

Here: the configs several entry points share (LoCoMo's and LongMemEval's, which the suite composes too, and
their data / QA / injection nodes). A config only one benchmark uses lives in its runs module as
``SCHEMA = ("schema_<name>", XConfig)``. ``lightmem.evaluation.runs.entry.register_configs()`` stores all of
them in Hydra's ConfigStore (the YAML files of conf/ extend them: ``defaults: [schema_locomo, ...]``) before Hydra
composes; this module only defines them, and imports nothing above it.

``optimized_metric`` names the flat metric (as logged: ``metrics(results)`` of the entry point's
runner in ``lightmem.evaluation.runs``) that the entry point's ``main`` returns, so a Hydra/Optuna
sweep optimises any metric without code changes; None returns nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lightmem.config import PipelineConfig


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


SCHEMAS = {"schema_locomo": LocomoEvalConfig, "schema_longmemeval": LongMemEvalConfig}  # the shared ones
