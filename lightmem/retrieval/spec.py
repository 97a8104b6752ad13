"""The settings of the two-stage engine, in three validated groups: how Stage 1 finds candidates, how a token
budget is packed from Stage 2's order, and how queries reach the LTM tier.

Each setting's default is written once, here; the Hydra ``retrieval`` node reads ``Stage1Spec`` and
``PackingSpec`` (``lightmem.config.schemas``), the ``ltm`` node supplies ``RoutingSpec``'s. A flat mapping of
settings, as ``Memory.open(retrieval=...)`` and the config take it, is split by ``retrieval_specs``.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lightmem.retrieval.anchoring import check_policy
from lightmem.retrieval.scoring import Fusion

ROUTINGS = ("concurrent", "controller", "mtm_only", "ltm_only")


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Stage1Spec:
    """How Stage 1 finds candidates.

    Attributes:
        fusion: ``weighted`` (SimpleMem Eq. 7; the default) or ``rrf``.
        w_dense: λ1, weight of the dense signal (also its RRF weight).
        w_lexical: λ2, weight of the BM25 signal (also its RRF weight).
        w_meta: γ, weight of the soft metadata match (the plan's ``tags`` or time window).
        w_recency: ρ, weight of the recency decay of the event time (weighted fusion only).
        rrf_k: The k of reciprocal-rank fusion.
        depth_factor: Each signal retrieves ``depth_factor × quota`` before fusion.
        candidate_factor: Stage 1 returns ``candidate_factor × K`` candidates (2 in the paper; 5 here: LoCoMo 0-2 strict
            R_all@600 0.786 at 3, 0.807 at 5, 0.804 at 8, whole memories packed).
        recency_half_life_days: Half-life of the recency term.
        hop_seeds: A second hop (off): each of Stage 1's best ``hop_seeds`` memories is searched again together with
            the query (texts joined, vectors summed), and up to ``hop_extra`` memories it finds join the candidates.
        hop_extra: Candidates the second hop may add.
    """

    fusion: str = Fusion.WEIGHTED.value
    w_dense: float = 1.0
    w_lexical: float = 0.5
    w_meta: float = 0.1
    w_recency: float = 0.0
    rrf_k: float = 60.0
    depth_factor: int = 2
    candidate_factor: int = 5
    recency_half_life_days: float = 30.0
    hop_seeds: int = 0
    hop_extra: int = 10

    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen)
        set_("fusion", Fusion(self.fusion).value)
        for name in ("w_dense", "w_lexical", "w_meta", "w_recency", "rrf_k", "recency_half_life_days"):
            set_(name, _number(getattr(self, name), name))
        if self.recency_half_life_days <= 0:
            raise ValueError(f"recency_half_life_days must be positive, got {self.recency_half_life_days!r}")
        for name in ("depth_factor", "candidate_factor", "hop_seeds", "hop_extra"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be an integer, got {value!r}")
        set_("depth_factor", max(1, self.depth_factor))
        set_("candidate_factor", max(1, self.candidate_factor))
        set_("hop_seeds", max(0, self.hop_seeds))
        set_("hop_extra", max(0, self.hop_extra))


@dataclass(frozen=True)
class PackingSpec:
    """How a token budget is packed from Stage 2's order.

    Attributes:
        fill_budget: With a token budget, Stage 2 fills it from its ranking of all the candidates (a budget-aware
            set); False keeps its best K and packs those.
        whole_share: The share of a budget filled with whole memories in rank order; the rest is filled with the
            best-matching sentence of each later memory (``retrieval/excerpts.py``). 1.0 (the default): whole
            memories only. An excerpt earns no evidence credit in the strict metric; on LoCoMo 0-2 half-budget
            excerpts lowered strict R_all@600 from 0.786 to 0.715.
        excerpt_rate: Share of its words a tail excerpt keeps, by the word keep scores stored with the memory
            (``metadata["keep"]``); 1.0, or a memory stored without scores: the sentence as written.
        session_spread: Before packing, each memory waits ``session_spread`` ranks more for every memory of its
            conversation session ranked above it (``retrieval/diversity.py``). 0: off.
        anchor_dates: Relative dates in the returned memories followed by the day they denote ("yesterday
            [7 May 2023]", ``retrieval/anchoring.py``): ``asked`` for a question that asks about time, ``always``,
            or ``never``. Only the returned copies change, never the stored memory.
    """

    fill_budget: bool = True
    whole_share: float = 1.0
    excerpt_rate: float = 0.6
    session_spread: float = 0.0
    anchor_dates: str = "asked"

    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen)
        if isinstance(self.whole_share, bool) or not isinstance(self.whole_share, (int, float)) \
                or not 0.0 <= float(self.whole_share) <= 1.0:
            raise ValueError(f"whole_share must be a share of the budget in [0, 1], got {self.whole_share!r}")
        if isinstance(self.excerpt_rate, bool) or not isinstance(self.excerpt_rate, (int, float)) \
                or not 0.0 < float(self.excerpt_rate) <= 1.0:
            raise ValueError(f"excerpt_rate must be a share of an excerpt's words in (0, 1], got {self.excerpt_rate!r}")
        if isinstance(self.session_spread, bool) or not isinstance(self.session_spread, (int, float)) \
                or float(self.session_spread) < 0:
            raise ValueError(f"session_spread must be >= 0, got {self.session_spread!r}")
        set_("whole_share", float(self.whole_share))
        set_("excerpt_rate", float(self.excerpt_rate))
        set_("session_spread", float(self.session_spread))
        set_("fill_budget", bool(self.fill_budget))
        set_("anchor_dates", check_policy(self.anchor_dates))  # refused here, not at the first question


@dataclass(frozen=True)
class RoutingSpec:
    """How hypothetical queries reach the tiers when an LTM graph is attached (``LTMOptions`` sets these).

    Attributes:
        routing: ``concurrent`` (each query searches its routed tier and ``cross_share`` of its quota in the
            other), ``controller`` (its routed tier only), ``mtm_only`` or ``ltm_only``.
        cross_share: Share of a query's quota spent on the tier it was not routed to (``concurrent``).
        ltm_hops: Edge hops of LTM expansion.
    """

    routing: str = "concurrent"
    cross_share: float = 0.5
    ltm_hops: int = 1

    def __post_init__(self) -> None:
        if self.routing not in ROUTINGS:
            raise ValueError(f"routing must be one of {ROUTINGS}, got {self.routing!r}")
        object.__setattr__(self, "cross_share", _number(self.cross_share, "cross_share"))


SPECS = (Stage1Spec, PackingSpec, RoutingSpec)


def retrieval_specs(settings: Mapping[str, Any] | None = None) -> tuple[Stage1Spec, PackingSpec, RoutingSpec]:
    """A flat mapping of retrieval settings (``Memory.open(retrieval=...)``, the Hydra node) split into the specs.

    Raises:
        TypeError: a setting no spec has.
        ValueError: a value a spec refuses.
    """
    settings = dict(settings or {})
    names = {cls: {f.name for f in dataclasses.fields(cls)} for cls in SPECS}
    unknown = sorted(set(settings) - set().union(*names.values()))
    if unknown:
        valid = sorted(set().union(*names.values()))
        raise TypeError(f"unknown retrieval settings {unknown}; the settings are {valid}")
    return tuple(cls(**{k: v for k, v in settings.items() if k in names[cls]}) for cls in SPECS)  # type: ignore[return-value]
