"""Structured configs of the core pipeline: everything that builds a Memory.

The benchmark and training schemas extend ``PipelineConfig`` next to their runners
(lightmem/evaluation/schemas.py, lightmem/training/schemas.py).
"""
from __future__ import annotations

import enum
import inspect
from dataclasses import dataclass, field, make_dataclass
from typing import Any

from omegaconf import MISSING

from lightmem.retrieval.engine import TwoStageRetriever
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


# TwoStageRetriever's arguments that other nodes supply: the objects it works on, and the LTM routing
# (the ``ltm`` node). Everything else in its signature is a ``retrieval`` setting.
_RETRIEVER_OBJECTS = ("self", "store", "embedder", "selector", "ltm", "routing", "cross_share", "ltm_hops")
_PLAIN = {"int": int, "float": float, "bool": bool, "str": str}


def _retriever_settings() -> list[tuple[str, type, Any]]:
    """``(name, type, field)`` of each Stage-1/Stage-2 setting, with ``TwoStageRetriever.__init__``'s own
    default: the defaults are written once, in the signature of the class that uses them."""
    out = []
    for name, p in inspect.signature(TwoStageRetriever.__init__).parameters.items():
        if name in _RETRIEVER_OBJECTS:
            continue
        default = p.default.value if isinstance(p.default, enum.Enum) else p.default
        out.append((name, _PLAIN.get(str(p.annotation), type(default)), field(default=default)))
    return out


# The ``retrieval`` node (conf/retrieval/*.yaml): TwoStageRetriever's settings and defaults.
RetrievalConfig = make_dataclass("RetrievalConfig", _retriever_settings())
RetrievalConfig.__module__ = __name__


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
