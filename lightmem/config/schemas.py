"""Structured configs of the core pipeline: everything that builds a Memory.

The benchmark and training schemas extend ``PipelineConfig`` next to their runners
(lightmem/evaluation/schemas.py, lightmem/training/schemas.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from lightmem.stores.base import DEFAULT_CAPACITY
from lightmem.stores.pg_conn import DEFAULT_POOL_SIZE, DEFAULT_STATEMENT_TIMEOUT_MS, RetryPolicy
from lightmem.stores.view_cache import DEFAULT_CACHE_MB
from lightmem.stores.view_snapshot import SNAPSHOT_MIN_ITEMS


@dataclass
class PathsConfig:
    """Where data lives; conf/paths/default.yaml sets it (``LIGHTMEM_DATA`` overrides the default)."""

    data: str = MISSING
    distilled: str = "outputs/data"  # what data_gen/ writes


@dataclass
class StoreConfig:
    # A postgresql:// URI (conf/store/postgres.yaml) replaces the runner's store folder; None: the folder.
    uri: str | None = None
    capacity: int = DEFAULT_CAPACITY
    index: str = "flat"
    faiss_device: str = "cpu"
    synchronous: str = "FULL"
    retention_half_life_days: float = 30.0
    bm25_k1: float = 1.5
    bm25_b: float = 0.75
    cache_mb: float = DEFAULT_CACHE_MB  # ceiling of the per-user in-memory views (0: none)
    snapshot_min_items: int = SNAPSHOT_MIN_ITEMS  # embedded only: users this large get a view snapshot (0: none)
    pool_size: int = DEFAULT_POOL_SIZE  # postgresql:// only: most connections a process opens
    statement_timeout: int = DEFAULT_STATEMENT_TIMEOUT_MS  # postgresql:// only: ms before a statement is canceled (0: none)
    retries: int = RetryPolicy.retries  # postgresql:// only: runs again after transient errors (a restart)


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
    hop_seeds: int = 0  # second hop: Stage 1's best memories searched again with the query (0: off)
    hop_extra: int = 10  # candidates the second hop may add
    session_spread: float = 0.0  # with a budget: ranks a memory waits per memory of its session above it (0: off)


@dataclass
class MemoryConfig:
    k: int = 10
    budget: int = 2048
    maintenance: bool = False  # merge near-duplicates / supersede conflicts after each write
    dup_threshold: float = 0.95


def logger_field() -> Any:
    """The ``logger`` node of a run's schema: a ``_target_`` MetricLogger, NullLogger unless chosen."""
    from lightmem.metric_logger import NULL_LOGGER

    return field(default_factory=lambda: {"_target_": NULL_LOGGER})


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
    # Where metrics go: a MetricLogger class and its settings (conf/logger/*.yaml); nothing by default.
    logger: Any = logger_field()
