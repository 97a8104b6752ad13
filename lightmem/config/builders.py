"""Builders from config nodes: the typed parts of a Memory, and the Memory itself.

The only place where config nodes become objects; the library takes typed arguments.
Swappable roles (controller, selector, writer) are ``_target_`` nodes.
"""
from __future__ import annotations

import inspect
from dataclasses import replace
from pathlib import Path
from typing import Any

from hydra.utils import get_object, instantiate
from omegaconf import DictConfig, OmegaConf

from lightmem.config.hydra_app import to_container
from lightmem.config.schemas import NODE_SWITCHES
from lightmem.config.specs import build_spec
from lightmem.memory import Memory
from lightmem.models.embedder import Embedder
from lightmem.roles.maintenance import Maintainer
from lightmem.validation import MAX_TURN_CHARS


def build_embedder(cfg: DictConfig) -> Embedder:
    """The config's encoder; an evaluation's ``vector_cache`` (a file) goes to an encoder that takes one and names
    none of its own (the hashing encoder takes none: it is faster than a cache)."""
    cache = cfg.get("vector_cache")
    if cache and not cfg.encoder.get("vector_cache") and "vector_cache" in _parameters(cfg.encoder):
        return instantiate(cfg.encoder, vector_cache=str(cache))
    return instantiate(cfg.encoder)


def _parameters(node: DictConfig) -> set[str]:
    target = node.get("_target_")
    return set(inspect.signature(get_object(target)).parameters) if target else set()


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
        """A compressor built once per config node (its model is the heavy part of the sensory stage)."""
        return self._once(self._compressors, node, lambda: instantiate(node))

    @staticmethod
    def _once(cache: dict[str, Any], node: DictConfig, build: Any) -> Any:
        key = OmegaConf.to_yaml(node, resolve=True)
        if key not in cache:
            cache[key] = build()
        return cache[key]

    def role(self, node: DictConfig) -> Any:
        """Instantiate a role, passing ``llm`` / ``nlp`` when its class takes them (``nlp: true`` in YAML)."""
        params = inspect.signature(get_object(node._target_)).parameters
        kwargs: dict[str, Any] = {}
        if "llm" in params and "llm" not in node:
            kwargs["llm"] = self.llm()
        if "nlp" in params and "nlp" in node:  # YAML says true/false; the pipeline itself is shared
            kwargs["nlp"] = self.nlp() if node.nlp is True else None
        for name in ("fallback",):  # a nested role (e.g. the generative controller's fast fallback)
            if isinstance(node.get(name), DictConfig) and "_target_" in node[name]:
                kwargs[name] = self.role(node[name])
        return instantiate(node, **kwargs)


def sensory_spec(node: DictConfig) -> Any:
    """The ``sensory`` node → SensorySpec (its switches aside; unknown keys fail loudly)."""
    from lightmem.sensory.pipeline import SensorySpec

    return build_spec(SensorySpec, {k: v for k, v in to_container(node).items() if k not in NODE_SWITCHES})


def build_sensory_stage(node: DictConfig | None, embedder: Embedder, shared: SharedRuntime) -> Any:
    """The sensory stage of a ``sensory`` node, or None when it is off."""
    if node is None or not node.get("enabled", False):
        return None
    from lightmem.sensory.pipeline import SensoryStage

    spec = sensory_spec(node)
    needs_model = spec.compress.enabled or (spec.segment.enabled and spec.segment.method != "similarity")
    compressor = shared.compressor(node.compressor) if needs_model and node.get("compressor") else None
    return SensoryStage.build(embedder, spec, compressor, shared.nlp() if node.get("nlp") else None)


def ltm_options(node: DictConfig | None, shared: SharedRuntime) -> Any:
    """The ``ltm`` node → LTMOptions, or None when LTM is off (unknown keys fail loudly). The spaCy
    pipeline is loaded when ``nlp`` is set, the LLM runtime when the abstractor or the fact keys need one (a
    ``fact_keyer`` node, instantiated, writes the fact keys instead)."""
    if node is None or not node.get("enabled", False):
        return None
    from lightmem.ltm import LTMOptions
    from lightmem.ltm.abstraction import ABSTRACTORS

    keyer = node.get("fact_keyer")
    options = build_spec(LTMOptions, {k: v for k, v in to_container(node).items()
                                      if k not in NODE_SWITCHES and k != "fact_keyer"})
    needs_llm = (options.abstractor in ABSTRACTORS and ABSTRACTORS[options.abstractor].needs_llm) \
        or (options.consolidation.fact_keys and keyer is None)
    return replace(options, nlp=shared.parser() if node.get("nlp") else None, llm=shared.llm() if needs_llm else None,
                   fact_keyer=instantiate(keyer) if keyer is not None else None)


def build_memory(cfg: DictConfig, path: str | Path, embedder: Embedder | None = None,
                 shared: SharedRuntime | None = None, writer: Any = None) -> Memory:
    """A Memory built from a PipelineConfig (pass ``embedder`` / ``shared`` to reuse them; ``writer`` replaces the
    config's writer). The ``store`` node names its backend as ``_target_``: the embedded one is made in ``path``; a
    server node names its own database (``uri``) instead."""
    shared = shared or SharedRuntime(cfg)
    embedder = embedder or build_embedder(cfg)
    where = {} if "uri" in cfg.store else {"path": str(path)}
    store = instantiate(cfg.store, **where, dim=embedder.dim, embedder=embedder.name)
    return Memory.open(
        store,
        embedder=embedder,
        selector=shared.selector(cfg.selector),
        controller=shared.role(cfg.controller),
        writer=shared.role(cfg.writer) if writer is None else writer,
        maintainer=Maintainer(dup_threshold=cfg.memory.dup_threshold) if cfg.memory.maintenance else None,
        k=cfg.memory.k,
        budget=cfg.memory.budget,
        retrieval=OmegaConf.to_container(cfg.retrieval, resolve=True),
        sensory_stage=build_sensory_stage(cfg.get("sensory"), embedder, shared),
        ltm=ltm_options(cfg.get("ltm"), shared),
        word_scorer="default" if cfg.memory.word_scores else None,
        tokenizer=cfg.memory.get("tokenizer"),
        group_dates=bool(cfg.memory.get("group_dates", True)),
        max_turn_chars=int(cfg.memory.get("max_turn_chars", MAX_TURN_CHARS)),
        background_index=bool(cfg.memory.get("background_index", True)),
    )
