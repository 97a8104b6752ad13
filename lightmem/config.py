"""Structured configs registered in Hydra's ConfigStore, and builders from config.

The only module of the library that knows about Hydra/OmegaConf: everything else takes
typed arguments. Swappable roles (controller, selector, writer) are ``_target_`` nodes.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.utils import get_class, instantiate
from omegaconf import MISSING, DictConfig, OmegaConf, open_dict

from lightmem.datasets.catalog import repo_root
from lightmem.memory import Memory
from lightmem.models.embedder import Embedder
from lightmem.roles.maintenance import Maintainer


@dataclass
class PathsConfig:
    """Where data lives; conf/paths/default.yaml sets it (``LIGHTMEM_DATA`` overrides the default)."""

    data: str = MISSING
    distilled: str = "outputs/data"  # what data_gen/ writes


@dataclass
class StoreConfig:
    # A postgresql:// URI (conf/store/postgres.yaml) replaces the runner's store folder; None: the folder.
    uri: str | None = None
    capacity: int = 10_000
    index: str = "flat"
    faiss_device: str = "cpu"
    synchronous: str = "FULL"
    retention_half_life_days: float = 30.0
    bm25_k1: float = 1.5
    bm25_b: float = 0.75


@dataclass
class RetrievalConfig:
    fusion: str = "weighted"
    w_dense: float = 1.0
    w_lexical: float = 0.5
    w_meta: float = 0.1
    w_recency: float = 0.0
    rrf_k: float = 60.0
    depth_factor: int = 2
    candidate_factor: int = 3
    recency_half_life_days: float = 30.0
    fill_budget: bool = True  # with a token budget, Stage 2 fills it from all candidates, not only its best K
    whole_share: float = 0.75  # share of a token budget filled with whole memories; the rest with excerpts


@dataclass
class MemoryConfig:
    k: int = 10
    budget: int = 2048
    maintenance: bool = False  # merge near-duplicates / supersede conflicts after each write
    dup_threshold: float = 0.95


@dataclass
class LoggerConfig:
    kind: str = "none"
    project: str = "lightmem"
    mode: str = "offline"
    name: str | None = None


@dataclass
class LocomoDataConfig:
    path: str = "${paths.data}/locomo/locomo_dev.json.gz"
    conversations: Any = "0-4"
    categories: list[int] = field(default_factory=lambda: [1, 2, 3, 4])
    max_questions: int | None = None  # per conversation: quick runs of slow settings


def _role(target: str) -> Any:
    return field(default_factory=lambda: {"_target_": target})


@dataclass
class PipelineConfig:
    """Everything that builds a Memory."""

    # Swappable encoders take different arguments, so the node is untyped and set by the
    # ``encoder`` group (conf/encoder/*.yaml).
    encoder: Any = None
    paths: PathsConfig = field(default_factory=PathsConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    controller: Any = _role("lightmem.roles.controller.PassthroughController")
    selector: Any = _role("lightmem.roles.selector.Stage1Selector")
    writer: Any = _role("lightmem.roles.writer.TurnWriter")
    # The sensory stages before the Writer (conf/sensory/*.yaml); off unless ``enabled``.
    sensory: Any = field(default_factory=lambda: {"enabled": False})
    # Long-term memory and offline consolidation (conf/ltm/*.yaml); off unless ``enabled``.
    ltm: Any = field(default_factory=lambda: {"enabled": False})
    # The LLM runtime shared by the generative roles; built only when one of them asks.
    llm: Any = field(default_factory=lambda: {"_target_": "lightmem.llm.transformers_backend.TransformersLLM"})
    logger: LoggerConfig = field(default_factory=LoggerConfig)


@dataclass
class QAConfig:
    """Answer generation from the packed memories (the ``llm`` node is the generator)."""

    enabled: bool = False
    judge: Any = None  # an LLM node (e.g. conf/llm/openai.yaml's keys); the LLM judge runs only when set
    batch_size: int = 8
    max_new_tokens: int = 32
    window: int = 2048  # the full-context baseline's context window (tokens)


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
    budget: int = 600
    out_dir: str = "outputs/locomo"
    keep_stores: bool = False
    system: str = "memory"  # memory | full_context
    qa: QAConfig = field(default_factory=QAConfig)
    inject: InjectConfig = field(default_factory=InjectConfig)
    seed: int = 0  # seeds the stochastic parts: error injection (and sampling generators)


@dataclass
class LongMemEvalDataConfig:
    path: str = "${paths.data}/longmemeval/longmemeval_oracle_dev.json.gz"
    max_instances: int | None = None  # spread evenly over the file (every question type keeps its share)
    types: list[str] | None = None  # keep only these question types


@dataclass
class LongMemEvalConfig(PipelineConfig):
    data: LongMemEvalDataConfig = field(default_factory=LongMemEvalDataConfig)
    ks: list[int] = field(default_factory=lambda: [5, 10, 20])
    budget: int = 600
    out_dir: str = "outputs/longmemeval"
    qa: QAConfig = field(default_factory=QAConfig)
    seed: int = 0


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


@dataclass
class LatencyBenchConfig(PipelineConfig):
    sizes: list[int] = field(default_factory=lambda: [100, 1000, 10_000])
    n_queries: int = 200
    k: int = 10
    corpus: list[str] = field(
        default_factory=lambda: [
            "${paths.data}/locomo/locomo_dev.json.gz",
            "${paths.data}/longmemeval/longmemeval_oracle_dev.json.gz",
        ]
    )
    out_dir: str = "outputs/latency"
    seed: int = 0


@dataclass
class EncoderSpeedConfig:
    """eval/encoder_speed.py: query and ingest speed of the encoder's backends, measured interleaved."""

    encoder: Any = None
    paths: PathsConfig = field(default_factory=PathsConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    backends: list[str] = field(default_factory=lambda: ["torch", "onnx", "onnx_int8"])
    corpus: str = "${paths.data}/locomo/locomo_dev.json.gz"
    n_queries: int = 200
    n_texts: int | None = None  # None: every turn of the corpus
    rounds: int = 2
    chunk: int = 256
    busy_processes: int = 0  # other processes keeping a core busy during the measurement (a loaded machine)
    seed: int = 0
    out_dir: str = "outputs/encoder_speed"


@dataclass
class RolesBenchConfig(PipelineConfig):
    data: LocomoDataConfig = field(default_factory=LocomoDataConfig)
    conversation: Any = 0
    controllers: list[str] = field(default_factory=lambda: ["passthrough", "fast", "generative"])
    selectors: list[str] = field(default_factory=lambda: ["none", "generative", "cross_encoder"])
    writers: list[str] = field(default_factory=lambda: ["turn", "extractive", "generative"])
    k: int = 10
    n_queries: int = 100
    n_queries_generative: int = 10
    n_turns: int = 200
    n_turns_generative: int = 24
    turns_per_batch: int = 8
    out_dir: str = "outputs/roles"


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


@dataclass
class SensoryBenchConfig(PipelineConfig):
    """eval/sensory.py: compression, segmentation and ingestion cost of the write path."""

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
    ingest_writers: list[str] = field(default_factory=lambda: ["turn", "extractive", "generative"])
    ingest_sensory: list[str] = field(default_factory=lambda: ["none", "lightmem"])
    out_dir: str = "outputs/sensory"


@dataclass
class LTMBenchConfig(PipelineConfig):
    """eval/ltm.py: consolidation growth and cost, search latency idle vs during consolidation."""

    data: LocomoDataConfig = field(default_factory=LocomoDataConfig)
    conversation: Any = 0
    copies: int = 2
    n_queries: int = 100
    k: int = 10
    out_dir: str = "outputs/ltm_bench"


def register_configs() -> None:
    """Register the schemas the YAML files in conf/ extend (``defaults: [schema_...]``), and the
    ``${lightmem_repo:}`` resolver that conf/paths/default.yaml roots the data folder at, and
    ``${lightmem_checkpoint:name}`` (``$LIGHTMEM_CHECKPOINTS/name`` or the source tree's checkpoints/name)."""
    if not OmegaConf.has_resolver("lightmem_repo"):
        OmegaConf.register_new_resolver("lightmem_repo", lambda: str(repo_root()))
    if not OmegaConf.has_resolver("lightmem_checkpoint"):
        from lightmem.models.registry import checkpoint_path

        OmegaConf.register_new_resolver("lightmem_checkpoint", lambda name: str(checkpoint_path(name)))
    cs = ConfigStore.instance()
    cs.store(name="schema_locomo", node=LocomoEvalConfig)
    cs.store(name="schema_latency", node=LatencyBenchConfig)
    cs.store(name="schema_encoder_speed", node=EncoderSpeedConfig)
    cs.store(name="schema_longmemeval", node=LongMemEvalConfig)
    cs.store(name="schema_growth", node=GrowthConfig)
    cs.store(name="schema_roles", node=RolesBenchConfig)
    cs.store(name="schema_distill", node=DistillConfig)
    cs.store(name="schema_train_ranker", node=RankerTrainConfig)
    cs.store(name="schema_sensory_bench", node=SensoryBenchConfig)
    cs.store(name="schema_ltm_bench", node=LTMBenchConfig)


register_configs()


def compose_option(config_dir: str | Path, config_name: str, group: str, option: str) -> DictConfig:
    """The ``group`` node of ``config_name`` with ``group=option``, composed by Hydra itself.

    Works inside a running ``@hydra.main`` app and outside one (tests, notebooks).
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    overrides = [f"{group}={option}"]
    if GlobalHydra.instance().is_initialized():
        return compose(config_name=config_name, overrides=overrides)[group]
    with initialize_config_dir(config_dir=str(Path(config_dir).resolve()), version_base="1.3"):
        return compose(config_name=config_name, overrides=overrides)[group]


def to_container(cfg: DictConfig | Any) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)


def lora_spec(node: DictConfig | None):
    """``conf/lora/*.yaml`` → LoraSpec, or None (full fine-tuning) when ``enabled: false``."""
    from lightmem.training.lora import LoraSpec

    if node is None or not node.get("enabled", True):
        return None
    return LoraSpec(**{k: v for k, v in to_container(node).items() if k != "enabled"})


def train_spec(node: DictConfig):
    """The ``optim`` node → TrainSpec (unknown keys fail loudly)."""
    from lightmem.training.loop import TrainSpec

    return TrainSpec(**to_container(node))


def make_run_logger(node: DictConfig, out_dir: str | Path, default_name: str):
    """A MetricLogger from a ``conf/logger/*.yaml`` node (missing keys take LoggerConfig's defaults)."""
    from lightmem.metric_logger import make_logger

    d = LoggerConfig()
    return make_logger(node.get("kind", d.kind), out_dir, node.get("project", d.project), node.get("mode", d.mode),
                       node.get("name") or default_name)


def build_embedder(cfg: DictConfig) -> Embedder:
    return instantiate(cfg.encoder)


class SharedRuntime:
    """Builds the heavy shared objects (LLM runtime, spaCy) once, and only if a role asks.

    Pass one to several ``build_memory`` calls (an evaluation's conversations) to load them once.
    """

    def __init__(self, cfg: DictConfig) -> None:
        self.cfg, self._llm, self._nlp, self._parser = cfg, None, None, None
        self._selectors: dict[str, Any] = {}
        self._compressors: dict[str, Any] = {}

    def llm(self):
        if self._llm is None:
            self._llm = instantiate(self.cfg.llm)
        return self._llm

    def nlp(self):
        if self._nlp is None:
            from lightmem.models.registry import ModelRegistry

            self._nlp = ModelRegistry().spacy(disable=("parser", "lemmatizer"))
        return self._nlp

    def parser(self):
        """spaCy with the dependency parser (LTM abstraction needs it; ``nlp()`` drops it for speed)."""
        if self._parser is None:
            from lightmem.models.registry import ModelRegistry

            self._parser = ModelRegistry().spacy()
        return self._parser

    def selector(self, node: DictConfig) -> Any:
        """A selector built once per config node: selectors keep no per-user state, and a
        trained one would otherwise reload its model for every conversation of an evaluation."""
        return self._once(self._selectors, node, lambda: self.role(node))

    def compressor(self, node: DictConfig) -> Any:
        """A compressor built once per config node (its model is the heavy part of the write path)."""
        return self._once(self._compressors, node, lambda: instantiate(node))

    @staticmethod
    def _once(cache: dict[str, Any], node: DictConfig, build: Any) -> Any:
        key = OmegaConf.to_yaml(node, resolve=True)
        if key not in cache:
            cache[key] = build()
        return cache[key]

    def role(self, node: DictConfig) -> Any:
        """Instantiate a role, passing ``llm`` / ``nlp`` when its class takes them (``nlp: true`` in YAML)."""
        params = inspect.signature(get_class(node._target_)).parameters
        kwargs: dict[str, Any] = {}
        if "llm" in params and "llm" not in node:
            kwargs["llm"] = self.llm()
        if "nlp" in params and "nlp" in node:  # YAML says true/false; the pipeline itself is shared
            kwargs["nlp"] = self.nlp() if node.nlp is True else None
        for name in ("fallback",):  # a nested role (e.g. the generative controller's fast fallback)
            if isinstance(node.get(name), DictConfig) and "_target_" in node[name]:
                kwargs[name] = self.role(node[name])
        return instantiate(node, **kwargs)


def write_path_spec(node: DictConfig) -> Any:
    """The ``sensory`` node → WritePathSpec (unknown keys fail loudly)."""
    from lightmem.sensory import pipeline as p

    d = to_container(node)
    seg = dict(d.get("segment", {}))
    if "layers" in seg:
        seg["layers"] = tuple(seg["layers"])
    return p.WritePathSpec(
        normalize=p.NormalizeSpec(**d.get("normalize", {})), compress=p.CompressSpec(**d.get("compress", {})),
        segment=p.SegmentSpec(**seg), stm_threshold=int(d.get("stm_threshold", 512)),
        gate=p.GateSpec(**d.get("gate", {})), importance=p.ImportanceSpec(**d.get("importance", {})),
    )


def build_write_path(node: DictConfig | None, embedder: Embedder, shared: SharedRuntime) -> Any:
    """The write path of a ``sensory`` node, or None when it is off."""
    if node is None or not node.get("enabled", False):
        return None
    from lightmem.sensory.pipeline import WritePath

    spec = write_path_spec(node)
    needs_model = spec.compress.enabled or (spec.segment.enabled and spec.segment.method != "similarity")
    compressor = shared.compressor(node.compressor) if needs_model and node.get("compressor") else None
    return WritePath.build(embedder, spec, compressor, shared.nlp() if node.get("nlp") else None)


def ltm_options(node: DictConfig | None, shared: SharedRuntime) -> Any:
    """The ``ltm`` node → LTMOptions, or None when LTM is off (unknown keys fail loudly)."""
    from lightmem.build import ltm_options as options

    return options(None if node is None else to_container(node), shared.parser, shared.llm)


def build_memory(cfg: DictConfig, path: str | Path, embedder: Embedder | None = None,
                 shared: SharedRuntime | None = None) -> Memory:
    """A Memory at ``path`` built from a PipelineConfig (pass ``embedder`` / ``shared`` to reuse them);
    at ``store.uri`` instead when the config names a PostgreSQL database."""
    shared = shared or SharedRuntime(cfg)
    embedder = embedder or build_embedder(cfg)
    store = OmegaConf.to_container(cfg.store, resolve=True)
    location = store.pop("uri", None) or path
    return Memory.open(
        location,
        embedder=embedder,
        selector=shared.selector(cfg.selector),
        controller=shared.role(cfg.controller),
        writer=shared.role(cfg.writer),
        maintainer=Maintainer(dup_threshold=cfg.memory.dup_threshold) if cfg.memory.maintenance else None,
        k=cfg.memory.k,
        budget=cfg.memory.budget,
        retrieval=OmegaConf.to_container(cfg.retrieval, resolve=True),
        write_path=build_write_path(cfg.get("sensory"), embedder, shared),
        ltm=ltm_options(cfg.get("ltm"), shared),
        **store,
    )


def per_job(cfg: DictConfig) -> DictConfig:
    """Inside a Hydra multirun, give each job its own ``out_dir`` (its sweep subdir) and no
    ``export_dir``: jobs would otherwise resume from each other's state and overwrite the
    committed checkpoint. Single runs are left as configured."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return cfg
    with open_dict(cfg):
        cfg.out_dir = HydraConfig.get().runtime.output_dir
        cfg.export_dir = None
    return cfg
