"""Hydra config of the core pipeline: schemas, builders from config, and the entry points' Hydra glue.

The only package of the library that knows about Hydra/OmegaConf (with the benchmark and
training schemas that extend it, next to their runners): everything else takes typed arguments.

- ``schemas``: the structured configs of everything that builds a Memory (``PipelineConfig``).
- ``builders``: config nodes → embedder, roles, sensory stage, LTM options, and ``build_memory``.
- ``hydra_app``: resolvers and schema registration (called by the entry points, never on import),
  ``compose_option``, ``per_job``, ``script_app`` (the Hydra app of every script).
"""
from __future__ import annotations

from lightmem.config.builders import (
    SharedRuntime,
    build_embedder,
    build_memory,
    build_sensory_stage,
    ltm_options,
    sensory_spec,
)
from lightmem.config.hydra_app import (
    compose_option,
    per_job,
    register_resolvers,
    register_schemas,
    script_app,
    to_container,
)
from lightmem.config.schemas import (
    EmbeddedStoreConfig,
    MemoryConfig,
    PathsConfig,
    PipelineConfig,
    RetrievalConfig,
    ServerStoreConfig,
    logger_field,
)
from lightmem.metric_logger import make_run_logger

__all__ = [
    "MemoryConfig",
    "PathsConfig",
    "logger_field",
    "PipelineConfig",
    "RetrievalConfig",
    "SharedRuntime",
    "EmbeddedStoreConfig",
    "ServerStoreConfig",
    "build_embedder",
    "build_memory",
    "build_sensory_stage",
    "compose_option",
    "ltm_options",
    "make_run_logger",
    "per_job",
    "script_app",
    "register_resolvers",
    "register_schemas",
    "to_container",
    "sensory_spec",
]
