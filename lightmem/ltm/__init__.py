"""Long-term memory: a de-identified knowledge graph built by offline consolidation, per user by default.

``LTMOptions`` groups what ``Memory.open(..., ltm=LTMOptions())`` needs; ``build_ltm``
wires the graph, the consolidator and the background scheduler over an open store: the in-process
``ConsolidationScheduler`` on the embedded store, the ``QueueScheduler`` (cycles as jobs any process claims) on a
store with a shared ``consolidation_queue`` (PostgreSQL).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lightmem.ltm.consolidation import ConsolidationSpec, Consolidator, CycleReport
from lightmem.ltm.graph import SCOPES, GraphSpec, KnowledgeGraph, check_scope
from lightmem.ltm.queue_scheduler import QueueScheduler
from lightmem.ltm.scheduler import ConsolidationScheduler
from lightmem.stores.base import MemoryStore

__all__ = ["LTMOptions", "LTMRuntime", "build_ltm", "ConsolidationSpec", "Consolidator", "CycleReport", "GraphSpec",
           "KnowledgeGraph", "ConsolidationScheduler", "QueueScheduler", "SCOPES"]


@dataclass
class LTMOptions:
    """LTM and consolidation settings.

    Attributes:
        consolidation: What a cycle does (batch, triggers, which steps).
        graph: Merge, link and decay rules of the graph.
        background: Run cycles in a background thread as turns arrive; otherwise only
            ``Memory.consolidate`` runs them.
        nice: Priority increment of the background thread.
        routing: How HQs reach the tiers: ``concurrent`` (each HQ searches its routed tier
            and, with ``cross_share`` of its quota, the other: covers the update gap),
            ``controller`` (only the routed tier), ``mtm_only``, ``ltm_only``.
        cross_share: Share of an HQ's quota spent on the tier it was not routed to.
        hops: Edge hops of LTM expansion (1 or 2).
        abstractor: A name in ``abstraction.ABSTRACTORS``: ``extractive`` (spaCy patterns) or ``generative``
            (the LLM runtime).
        nlp: A spaCy pipeline with the parser for the extractive abstractor and
            de-identification (None: rules only).
        llm: The offline LLM (generative abstraction, update decisions, cluster abstracts, fact keys).
        fact_keyer: Writes the fact keys (``ltm.fact_keys.FactKeyer``) instead of SLM-3 on ``llm``: the evaluation's
            keyer of annotated facts, for instance.
        scope: ``user`` (default): each user's knowledge is stored and searched in that user's own
            partition, and ``delete_user`` removes it. ``shared``: one graph for every user, read by every
            user's searches: what one user said reaches others, de-identified only as far as
            ``lightmem.ltm.deidentify`` goes (places, organisations and diagnoses stay); ``delete_user``
            removes what only that user supported. A graph made before scopes is reachable only here.
    """

    consolidation: ConsolidationSpec = field(default_factory=ConsolidationSpec)
    graph: GraphSpec = field(default_factory=GraphSpec)
    background: bool = True
    nice: int = 10
    routing: str = "concurrent"
    cross_share: float = 0.5
    hops: int = 1
    abstractor: str = "extractive"
    nlp: Any = None
    llm: Any = None
    scope: str = "user"
    fact_keyer: Any = None

    def __post_init__(self) -> None:
        check_scope(self.scope)


@dataclass
class LTMRuntime:
    graph: KnowledgeGraph
    consolidator: Consolidator
    scheduler: ConsolidationScheduler | QueueScheduler | None


def build_ltm(store: MemoryStore, embedder: Any, options: LTMOptions, clock: Any = None,
              run_jobs: bool = True) -> LTMRuntime:
    """The graph over ``store``'s database, its consolidator and (when ``background``) its scheduler.

    Args:
        run_jobs: On a store with a shared ``consolidation_queue``, this process runs cycles claimed from it (True)
            or only requests them, for ``lightmem worker --consolidate`` processes to run (False).
    """
    from lightmem.ltm.abstraction import ABSTRACTORS
    from lightmem.ltm.deidentify import Deidentifier

    check_scope(options.scope)
    choice = ABSTRACTORS.get(options.abstractor)
    if choice is None:
        raise ValueError(f"abstractor must be one of {', '.join(ABSTRACTORS)}, got {options.abstractor!r}")
    if choice.needs_llm and options.llm is None:
        raise ValueError(f"the {options.abstractor} abstractor needs an LLM runtime (LTMOptions.llm)")
    graph = KnowledgeGraph(store.graph, embedder.encode, embedder.dim, options.graph, scope=options.scope)
    deid = Deidentifier(options.nlp)
    abstractor = choice.build(options.nlp, options.llm, deid)
    kw = {"clock": clock} if clock is not None else {}
    kw["fact_keyer"] = options.fact_keyer
    consolidator = Consolidator(store, embedder, graph, abstractor, deid, options.llm, options.consolidation, **kw)
    queue = getattr(store, "consolidation_queue", None)
    every = options.consolidation.every_n_turns
    scheduler: ConsolidationScheduler | QueueScheduler | None = None
    if options.background:
        scheduler = (ConsolidationScheduler(consolidator, every, options.nice) if queue is None
                     else QueueScheduler(consolidator, queue, every, options.nice, run=run_jobs))
    return LTMRuntime(graph, consolidator, scheduler)
