"""Structured configs of the core pipeline: everything that builds a Memory.

The benchmark and training schemas extend ``PipelineConfig`` next to their runners
(lightmem/evaluation/schemas.py, lightmem/training/schemas.py).
"""
from __future__ import annotations

import dataclasses
import enum
import inspect
from dataclasses import dataclass, field, make_dataclass
from typing import Any

from omegaconf import MISSING

from lightmem.build import memory_parts
from lightmem.config.specs import schema_of
from lightmem.ltm import LTMOptions
from lightmem.retrieval.spec import PackingSpec, Stage1Spec
from lightmem.roles.maintenance import Maintainer
from lightmem.sensory.pipeline import SensorySpec
from lightmem.stores.embedded.store import SQLiteStore
from lightmem.stores.postgres.store import PostgresStore


@dataclass
class PathsConfig:
    """Where data lives; conf/paths/default.yaml sets it (``LIGHTMEM_DATA`` overrides the default)."""

    data: str = MISSING
    distilled: str = "outputs/data"  # what data_gen/ writes
    vector_cache: str | None = None  # the evaluations' document vectors by content (conf/paths/default.yaml)


_PLAIN = {"int": int, "float": float, "bool": bool, "str": str}


def _settings(cls: type, skip: tuple[str, ...]) -> list[tuple[str, type, Any]]:
    """``(name, type, field)`` of each setting of ``cls.__init__`` not in ``skip``, with the signature's own
    default: the defaults are written once, in the signature of the class that uses them."""
    out = []
    for name, p in inspect.signature(cls.__init__).parameters.items():
        if name in skip:
            continue
        default = p.default.value if isinstance(p.default, enum.Enum) else p.default
        if default is inspect.Parameter.empty:
            out.append((name, _PLAIN.get(str(p.annotation), str), field(default=MISSING)))
        else:
            out.append((name, _PLAIN.get(str(p.annotation), type(default)), field(default=default)))
    return out


def _spec_settings(*specs: type) -> list[tuple[str, type, Any]]:
    """``(name, type, field)`` of each field of the spec dataclasses, with its own default."""
    out = []
    for spec in specs:
        for f in dataclasses.fields(spec):
            out.append((f.name, type(f.default), field(default=f.default)))
    return out


# The ``retrieval`` node (conf/retrieval/*.yaml): the engine's Stage-1 and packing settings and their defaults
# (the LTM routing comes from the ``ltm`` node).
RetrievalConfig = make_dataclass("RetrievalConfig", _spec_settings(Stage1Spec, PackingSpec))
RetrievalConfig.__module__ = __name__


def _store_schema(name: str, cls: type, supplied: tuple[str, ...]) -> type:
    """The ``store`` node of one backend: its class as ``_target_`` and its settings with their defaults;
    ``supplied`` are the arguments the builder passes (the run's folder, the embedder's dim and name)."""
    target = ("_target_", str, field(default=f"{cls.__module__}.{cls.__qualname__}"))
    schema = make_dataclass(name, [target, *_settings(cls, ("self", *supplied))])
    schema.__module__ = __name__
    return schema


# conf/store/*.yaml extend one of these (``defaults: [schema_embedded, _self_]``). The embedded store lives
# in the run's folder (the builder passes ``path``); the server store names its database (``uri``).
EmbeddedStoreConfig = _store_schema("EmbeddedStoreConfig", SQLiteStore, ("path", "dim", "embedder"))
ServerStoreConfig = _store_schema("ServerStoreConfig", PostgresStore, ("dim", "embedder"))
STORE_SCHEMAS = {"schema_embedded": EmbeddedStoreConfig, "schema_server": ServerStoreConfig}


def _default(fn: Any, name: str) -> Any:
    return inspect.signature(fn).parameters[name].default


@dataclass
class MemoryConfig:
    k: int = _default(memory_parts, "k")  # Memory.open's defaults, stated there once
    budget: int = _default(memory_parts, "budget")
    maintenance: bool = False  # merge near-duplicates / supersede conflicts after each write
    dup_threshold: float = _default(Maintainer.__init__, "dup_threshold")
    word_scores: bool = False  # the trained compressor scores each new memory's words (only excerpts use them)
    tokenizer: str = _default(memory_parts, "tokenizer")  # what a prompt budget is counted with (the reader's)
    group_dates: bool = _default(memory_parts, "group_dates")  # one date line per day above its memories
    max_turn_chars: int = _default(memory_parts, "max_turn_chars")  # longer turns are refused
    background_index: bool = True  # embed new memories after add returns (Memory.open: also the default)


def logger_field() -> Any:
    """The ``logger`` node of a run's schema: a ``_target_`` MetricLogger, NullLogger unless chosen."""
    from lightmem.metric_logger import NULL_LOGGER

    return field(default_factory=lambda: {"_target_": NULL_LOGGER})


def _role(target: str) -> Any:
    return field(default_factory=lambda: {"_target_": target})


# The ``sensory`` and ``ltm`` nodes: SensorySpec's and LTMOptions' settings with their own defaults, plus the
# switches and the parts a builder supplies (the spaCy pipeline as a flag, the compressor as a ``_target_``).
SensoryConfig = schema_of(SensorySpec, "SensoryConfig", extra=[("enabled", bool, False), ("nlp", bool, False),
                                                                ("compressor", Any, None)])
LTMConfig = schema_of(LTMOptions, "LTMConfig", drop=("nlp", "llm"), extra=[("enabled", bool, False), ("nlp", bool, False)])
NODE_SWITCHES = ("enabled", "nlp", "compressor")  # the keys of those nodes that are not the dataclass's


@dataclass
class PipelineConfig:
    """Everything that builds a Memory."""

    # Swappable encoders take different arguments, so the node is untyped and set by the
    # ``encoder`` group (conf/encoder/*.yaml).
    encoder: Any = None
    paths: PathsConfig = field(default_factory=PathsConfig)
    # A store backend as ``_target_`` with its settings, set by the ``store`` group (conf/store/*.yaml:
    # sqlite, the embedded store, in every runner's defaults; postgres).
    store: Any = None
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    # The roles default to Memory.open's: the raw query as the one HQ, the trained ranker, compact turns.
    controller: Any = _role("lightmem.roles.controller.PassthroughController")
    selector: Any = _role("lightmem.retrieval.stage2.default_selector")
    writer: Any = _role("lightmem.roles.writer.default_writer")
    # The sensory stages before the Writer (conf/sensory/*.yaml); off unless ``enabled``.
    sensory: SensoryConfig = field(default_factory=SensoryConfig)
    # Long-term memory and offline consolidation (conf/ltm/*.yaml); off unless ``enabled``.
    ltm: LTMConfig = field(default_factory=LTMConfig)
    # The LLM runtime shared by the generative roles; built only when one of them asks.
    llm: Any = field(default_factory=lambda: {"_target_": "lightmem.llm.transformers_backend.TransformersLLM"})
    # Where metrics go: a MetricLogger class and its settings (conf/logger/*.yaml); nothing by default.
    logger: Any = logger_field()
