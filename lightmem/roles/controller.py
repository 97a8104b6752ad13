"""Controller (SLM-1): turns (query, STM context) into a RetrievalPlan.

Three implementations behind one protocol: ``PassthroughController`` (the raw query),
``FastController`` (no generation: rules, NER, adaptive depth; the CPU default) and
``GenerativeController`` (an SLM writes the plan as JSON; the fast plan is its fallback).
"""
from __future__ import annotations

import logging
import re
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from lightmem.language.entities import labelled_entities
from lightmem.language.normalize import find_time_window
from lightmem.llm import prompts
from lightmem.llm.base import LLM
from lightmem.llm.jsonio import call_json
from lightmem.roles.complexity import ComplexityScorer, HeuristicComplexity, adaptive_k
from lightmem.timeutil import iso, parse_timestamp
from lightmem.timeutil import now as wall_clock
from lightmem.types import Filters, HypotheticalQuery, RetrievalPlan, Route

log = logging.getLogger(__name__)


@runtime_checkable
class Controller(Protocol):
    """Plans a retrieval: hypothetical queries with routes and quotas, filters φ, budget K."""

    def plan(self, query: str, k: int, filters: Filters, stm: Sequence[str] = (), now: float | None = None) -> RetrievalPlan: ...


class PassthroughController:
    """The raw query as the single HQ, routed to MTM with the whole Stage-1 budget.

    The baseline plan ("without HQs and routing" in the paper's ablation).
    """

    def plan(self, query: str, k: int, filters: Filters, stm: Sequence[str] = (), now: float | None = None) -> RetrievalPlan:
        return RetrievalPlan(query=query, hqs=(HypotheticalQuery(query, Route.MTM, 0),), filters=filters, k=k)


_PERSONAL = re.compile(r"\b(i|me|my|mine|we|our|us|you|your|yours)\b", re.I)
_THIRD = re.compile(r"\b(he|she|him|her|his|hers|they|them|their)\b", re.I)
_RECENT = re.compile(r"\b(recent(ly)?|just|today|yesterday|last (night|week|weekend)|this (week|morning))\b", re.I)
_SPLIT = re.compile(r",?\s+\b(?:and|or|but)\b\s+(?=(?:what|when|where|who|why|how|which|did|does|do|is|was|has|have)\b)", re.I)


class FastController:
    """A plan without generation: coreference from STM, time windows, HQ splitting, routing, k_dyn.

    Args:
        nlp: Optional spaCy pipeline for named entities (capitalised words are used without it).
        complexity: Scores C_q: the cue heuristic by default, or ``TrainedComplexity`` (controller=experimental/fast_trained).
        adaptive: Scale K by C_q (SimpleMem Eq. 8), with the caller's k as k_base.
        delta: δ of Eq. 8.
        k_min: Lower clip of k_dyn.
        k_max_factor: Upper clip of k_dyn as a multiple of k_base.
        max_hqs: Most HQs per plan (the full query is always the first).
        split_threshold: Split a query into sub-questions when C_q reaches this.
        hard_time_filter: Turn a relative time cue into a hard filter; otherwise it is a
            soft signal (``intent['time_window']``) the engine weighs with ``w_meta``.
    """

    def __init__(
        self,
        nlp: Any = None,
        complexity: ComplexityScorer | None = None,
        adaptive: bool = True,
        delta: float = 1.0,
        k_min: int = 3,
        k_max_factor: float = 2.0,
        max_hqs: int = 3,
        split_threshold: float = 0.25,
        hard_time_filter: bool = False,
    ) -> None:
        self.nlp, self.complexity = nlp, complexity or HeuristicComplexity()
        self.adaptive, self.delta, self.k_min, self.k_max_factor = adaptive, delta, k_min, k_max_factor
        self.max_hqs, self.split_threshold, self.hard_time_filter = max(1, max_hqs), split_threshold, hard_time_filter

    def _labelled(self, text: str) -> list[tuple[str, str]]:
        """Named entities with labels; without spaCy, capitalised words labelled ``NAME``."""
        return labelled_entities(text, self.nlp)

    def _entities(self, text: str) -> list[str]:
        return [t for t, _ in self._labelled(text)]

    def _last_person(self, stm: Sequence[str]) -> str | None:
        for line in reversed(stm):
            speaker, _, body = line.partition(": ")
            names = self._entities(body) if body else []
            if names:
                return names[-1]
            if body and speaker and speaker[0].isupper() and len(speaker.split()) <= 2:
                return speaker
        return None

    def resolve(self, query: str, stm: Sequence[str]) -> str:
        """Replace third-person pronouns by the person the recent context last names."""
        if not _THIRD.search(query) or self._entities(query):
            return query
        person = self._last_person(stm)
        if not person:
            return query
        possessive = {"his", "her", "their", "hers"}

        def sub(m: re.Match) -> str:
            return f"{person}'s" if m.group(0).lower() in possessive else person

        return _THIRD.sub(sub, query, count=2)

    def plan(self, query: str, k: int, filters: Filters, stm: Sequence[str] = (), now: float | None = None) -> RetrievalPlan:
        resolved = self.resolve(query, stm)
        labelled = self._labelled(resolved)
        entities = [t for t, _ in labelled]
        c_q = self.complexity.score(resolved, len(entities))
        k_dyn = adaptive_k(k, c_q, self.delta, min(self.k_min, k), max(k, int(k * self.k_max_factor))) if self.adaptive else k
        texts = [resolved]
        parts = _SPLIT.split(resolved) if c_q >= self.split_threshold else [resolved]
        if len(parts) > 1:  # a compound question: each clause becomes an HQ after the whole
            subject = entities[0] if entities else None
            for part in parts[1:]:
                part = part.strip(" ?.,")
                if subject and _THIRD.search(part):
                    part = _THIRD.sub(subject, part, count=1)
                if len(part.split()) >= 3:
                    texts.append(part)
            if len(texts) > 1:
                texts.insert(1, parts[0].strip(" ?.,"))
        texts = list(dict.fromkeys(texts))[: self.max_hqs]
        # Personal: pronouns, or people (without NER any capitalised name may be a person).
        personal = bool(_PERSONAL.search(query) or _THIRD.search(query) or any(lab in ("PERSON", "NAME") for _, lab in labelled))
        route = Route.MTM if personal else Route.LTM
        intent: dict[str, Any] = {"personal": personal, "recent": bool(_RECENT.search(query)), "complexity": c_q}
        window = find_time_window(resolved, now if now is not None else wall_clock())
        if window and self.hard_time_filter and filters.time_from is None and filters.time_to is None:
            filters = Filters(window[0], window[1], filters.kinds, filters.tags, filters.include_superseded)
        elif window:
            intent["time_window"] = window
        if entities:
            intent["tags"] = entities
        hqs = tuple(HypotheticalQuery(t, route, 0) for t in texts)
        return RetrievalPlan(query=query, hqs=hqs, filters=filters, k=k_dyn, intent=intent)


class _HQ(BaseModel):
    query: str = Field(min_length=2, max_length=400)
    layer: Literal["MTM", "LTM", "mtm", "ltm"] = "MTM"


class _Window(BaseModel):
    start: str
    end: str


class ControllerOutput(BaseModel):
    """The JSON the generative controller must produce."""

    intent: dict[str, Any] = Field(default_factory=dict)
    hqs: list[_HQ] = Field(min_length=1, max_length=8)
    time_window: _Window | None = None
    tags: list[str] = Field(default_factory=list)


class GenerativeController:
    """An SLM writes the plan as JSON; malformed output falls back to the fast plan.

    Args:
        llm: The LLM runtime.
        fallback: Plans when the model's output is unusable, and sets k_dyn.
        max_hqs: Most HQs taken from the model.
        keep_original: Keep the raw query as the first HQ (small models drift).
        max_new_tokens: Length limit of the JSON answer.
    """

    def __init__(self, llm: LLM, fallback: FastController | None = None, max_hqs: int = 3, keep_original: bool = True,
                 max_new_tokens: int = 160, cache_size: int = 256) -> None:
        self.llm, self.fallback = llm, fallback or FastController()
        self.max_hqs, self.keep_original, self.max_new_tokens = max_hqs, keep_original, max_new_tokens
        # The model's part of a plan depends on (query, context, date), not on K or filters:
        # a repeated query costs no generation.
        self._cache: OrderedDict[str, ControllerOutput | None] = OrderedDict()
        self.cache_size = cache_size

    def _generate(self, prompt: str) -> ControllerOutput | None:
        if prompt in self._cache:
            self._cache.move_to_end(prompt)
            return self._cache[prompt]
        out = call_json(self.llm, [prompt], ControllerOutput, "controller", prompts.retry, self.max_new_tokens)[0]
        if self.cache_size > 0:
            self._cache[prompt] = out
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return out

    def plan(self, query: str, k: int, filters: Filters, stm: Sequence[str] = (), now: float | None = None) -> RetrievalPlan:
        base = self.fallback.plan(query, k, filters, stm, now)
        at = now if now is not None else wall_clock()
        prompt = prompts.CONTROLLER.format(date=iso(at)[:10], context=prompts.bullet(list(stm)[-6:]), query=query, max_hqs=self.max_hqs)
        out = self._generate(prompt)
        if out is None:
            return base
        texts = ([query] if self.keep_original else []) + [h.query.strip() for h in out.hqs]
        routes = ([Route.MTM] if self.keep_original else []) + [Route(h.layer.lower()) for h in out.hqs]
        seen: dict[str, Route] = {}
        for t, r in zip(texts, routes):
            seen.setdefault(t, r)
        hqs = tuple(HypotheticalQuery(t, r, 0) for t, r in list(seen.items())[: self.max_hqs])
        # Only the model's yes/no intent flags are taken: structured keys (tags, time_window,
        # complexity) come from validated fields or the fast plan, never from free-form output.
        flags = {k: bool(v) for k, v in out.intent.items() if k in ("personal", "recent") and isinstance(v, (bool, int))}
        intent = {**base.intent, **flags, "source": "generative"}
        if out.tags:
            intent["tags"] = list(dict.fromkeys([*intent.get("tags", []), *out.tags]))
        if out.time_window is not None:
            try:
                intent["time_window"] = (parse_timestamp(out.time_window.start), parse_timestamp(out.time_window.end) + 86_400)
            except ValueError:
                self.llm.meter.failure("controller")
        return RetrievalPlan(query=query, hqs=hqs, filters=base.filters, k=base.k, intent=intent)
