"""Structured configs registered in Hydra's ConfigStore, and builders from config.

The only module of the library that knows about Hydra/OmegaConf: everything else takes
typed arguments. Swappable roles (controller, selector, writer) are ``_target_`` nodes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from lightmem.memory import Memory
from lightmem.models.embedder import Embedder
from lightmem.retrieval.composer import ContextComposer
from lightmem.retrieval.engine import TwoStageRetriever
from lightmem.stores.mtm import MTMStore


@dataclass
class StoreConfig:
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
    w_meta: float = 0.0
    w_recency: float = 0.0
    rrf_k: float = 60.0
    depth_factor: int = 2
    candidate_factor: int = 2
    recency_half_life_days: float = 30.0


@dataclass
class MemoryConfig:
    k: int = 10
    budget: int = 2048


@dataclass
class LoggerConfig:
    kind: str = "none"
    project: str = "lightmem"
    mode: str = "offline"
    name: str | None = None


@dataclass
class LocomoDataConfig:
    path: str = "${oc.env:LIGHTMEM_DATA,../shared/data}/locomo/locomo_dev.json"
    conversations: Any = "0-4"
    categories: list[int] = field(default_factory=lambda: [1, 2, 3, 4])


def _role(target: str) -> Any:
    return field(default_factory=lambda: {"_target_": target})


@dataclass
class PipelineConfig:
    """Everything that builds a Memory."""

    # Swappable encoders take different arguments, so the node is untyped and set by the
    # ``encoder`` group (conf/encoder/*.yaml).
    encoder: Any = None
    store: StoreConfig = field(default_factory=StoreConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    controller: Any = _role("lightmem.roles.controller.PassthroughController")
    selector: Any = _role("lightmem.roles.selector.Stage1Selector")
    writer: Any = _role("lightmem.roles.writer.TurnWriter")
    logger: LoggerConfig = field(default_factory=LoggerConfig)


@dataclass
class LocomoEvalConfig(PipelineConfig):
    data: LocomoDataConfig = field(default_factory=LocomoDataConfig)
    ks: list[int] = field(default_factory=lambda: [5, 10, 20])
    budget: int = 600
    out_dir: str = "outputs/locomo"
    keep_stores: bool = False


@dataclass
class LatencyBenchConfig(PipelineConfig):
    sizes: list[int] = field(default_factory=lambda: [100, 1000, 10_000])
    n_queries: int = 200
    k: int = 10
    corpus: list[str] = field(
        default_factory=lambda: [
            "${oc.env:LIGHTMEM_DATA,../shared/data}/locomo/locomo_dev.json",
            "${oc.env:LIGHTMEM_DATA,../shared/data}/longmemeval/longmemeval_oracle_dev.json",
        ]
    )
    out_dir: str = "outputs/latency"
    seed: int = 0


def register_configs() -> None:
    """Register the schemas the YAML files in conf/ extend (``defaults: [schema_...]``)."""
    cs = ConfigStore.instance()
    cs.store(name="schema_locomo", node=LocomoEvalConfig)
    cs.store(name="schema_latency", node=LatencyBenchConfig)


register_configs()


def to_container(cfg: DictConfig | Any) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)


def build_embedder(cfg: DictConfig) -> Embedder:
    return instantiate(cfg.encoder)


def build_memory(cfg: DictConfig, path: str | Path, embedder: Embedder | None = None) -> Memory:
    """A Memory at ``path`` built from a PipelineConfig (pass ``embedder`` to share one)."""
    embedder = embedder or build_embedder(cfg)
    store = MTMStore(path, dim=embedder.dim, embedder=embedder.name, **OmegaConf.to_container(cfg.store, resolve=True))
    selector = instantiate(cfg.selector)
    retriever = TwoStageRetriever(store, embedder, selector, **OmegaConf.to_container(cfg.retrieval, resolve=True))
    counter = embedder.token_counter()
    return Memory(
        store=store,
        embedder=embedder,
        retriever=retriever,
        composer=ContextComposer(counter, cfg.memory.budget),
        controller=instantiate(cfg.controller),
        writer=instantiate(cfg.writer),
        counter=counter,
        k=cfg.memory.k,
    )
