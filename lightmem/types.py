"""Records shared by the write path, the read path and the offline path."""
from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from lightmem import metadata_filter
from lightmem.errors import InvalidInputError
from lightmem.storable import check_unicode
from lightmem.timeutil import parse_timestamp


class ItemKind(str, enum.Enum):
    """What an MTM item is: an episode written online, or an abstraction made offline."""

    EPISODIC = "episodic"
    ABSTRACT = "abstract"
    KNOWLEDGE = "knowledge"  # an LTM graph node returned by search (user-agnostic, no provenance)


class Route(str, enum.Enum):
    """Which memory tier a hypothetical query searches."""

    MTM = "mtm"
    LTM = "ltm"


@dataclass(frozen=True)
class Turn:
    """One utterance of a conversation, the unit of provenance.

    Attributes:
        turn_id: Stable id of the turn (LoCoMo ``dia_id``, or generated).
        speaker: Who said it (a name, or ``user`` / ``assistant``).
        text: What was said; never empty.
        timestamp: Unix seconds of the session the turn belongs to.
        session_id: Optional session the turn belongs to.
        caption: Caption of an image shared with the turn, if any.
        metadata: Free-form JSON-serialisable extras kept with the turn.
    """

    turn_id: str
    speaker: str
    text: str
    timestamp: float
    session_id: str | None = None
    caption: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def render(self) -> str:
        """The text a turn-level memory item stores: ``speaker: text [image: caption]``."""
        body = f"{self.speaker}: {self.text}"
        if self.caption:
            body += f" [shares an image: {self.caption}]"
        return body


@dataclass
class MemoryItem:
    """One MTM entry. ``provenance`` lists the ids of the turns it was written from.

    Times are Unix seconds. ``event_time`` is when the remembered thing happened (the
    session date for a turn); ``created_at`` is when lightmem wrote it. ``keys`` is extra text the
    item is found by (its vector and BM25 terms are computed from ``text`` and ``keys``), never shown
    in a prompt: the fact keys an offline cycle wrote for it (``ConsolidationSpec.fact_keys``), empty
    otherwise.
    """

    id: str
    user_id: str
    text: str
    provenance: list[str]
    created_at: float
    event_time: float
    last_access: float
    access_count: int = 0
    utility: float = 1.0
    topic: str | None = None
    entities: list[str] = field(default_factory=list)
    kind: ItemKind = ItemKind.EPISODIC
    valid_from: float | None = None
    valid_to: float | None = None
    superseded_by: str | None = None
    archived: bool = False
    n_tokens: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)
    keys: str = ""
    # When its text, fields or archived state last changed: a store sets it (its created_at until then). Bookkeeping,
    # like an id's row: left out of equality, so an item compares equal to itself read back.
    updated_at: float | None = field(default=None, compare=False)

    @property
    def index_text(self) -> str:
        """What the item is embedded and indexed for BM25 from: its text, then its keys."""
        return keyed_text(self.text, self.keys)

    @property
    def members(self) -> list[str]:
        """The ids of the memories an abstract one was consolidated from (``metadata["members"]``, which only the
        pipeline writes); none when it holds anything else than a list of ids (a row a caller's update wrote before
        updates left that key alone)."""
        found = self.metadata.get("members")
        return list(found) if isinstance(found, list) and all(isinstance(m, str) for m in found) else []

    @property
    def is_current(self) -> bool:
        """True while no newer item supersedes this one."""
        return self.superseded_by is None and self.valid_to is None


def keyed_text(text: str, keys: str) -> str:
    """An item's text followed by its fact keys (the text alone when it has none)."""
    return f"{text} {keys}" if keys else text


class NodeKind(str, enum.Enum):
    """LTM node types (LightMem-SLM Table 9)."""

    ENTITY = "entity"  # a concrete object, place or named item ("support group", "Paris")
    CONCEPT = "concept"  # an abstract class or property ("group", "capital city", "inspiring")


class EdgeType(str, enum.Enum):
    """LTM edge types (LightMem-SLM Table 9)."""

    IS_A = "IsA"
    HAS_PROPERTY = "HasProperty"
    RELATED_TO = "RelatedTo"
    IMPLIES = "Implies"


@dataclass
class KnowledgeNode:
    """One de-identified LTM unit. It never names a user: no user id, no provenance.

    Attributes:
        id: Row id in the graph table.
        key: Normalised name (lower case, no determiners); unique among nodes.
        kind: Entity or Concept.
        text: Display name.
        facts: De-identified statements that support the node (newest last, bounded).
        confidence: In (0, 1]; grows with evidence, decays when unsupported.
        evidence: How many consolidated episodes supported it, across cycles.
        first_seen: Unix seconds of the first consolidation that produced it.
        last_seen: Unix seconds of the last consolidation that supported it.
        last_cycle: The consolidation cycle that last supported it.
        active: False once decay dropped it (kept on disk, out of the index).
    """

    id: int
    key: str
    kind: NodeKind
    text: str
    facts: list[str]
    confidence: float
    evidence: int
    first_seen: float
    last_seen: float
    last_cycle: int = 0
    active: bool = True

    def render(self, neighbours: list[tuple[EdgeType, str]] = ()) -> str:  # type: ignore[assignment]
        """The text a search hit shows: name, supporting facts, then typed links."""
        body = self.text + (": " + " | ".join(f.rstrip(" .") for f in self.facts) if self.facts else "")
        if neighbours:
            by_type: dict[str, list[str]] = {}
            for et, name in neighbours:
                by_type.setdefault(et.value, []).append(name)
            body += ". " + "; ".join(f"{t} {', '.join(ns)}" for t, ns in by_type.items())
        return body


@dataclass(frozen=True)
class Edge:
    """A typed, weighted link between two LTM nodes."""

    src: int
    dst: int
    type: EdgeType
    confidence: float
    evidence: int
    label: str = ""  # e.g. the verb of a RelatedTo extracted from "X joined Y"


@dataclass(frozen=True)
class Filters:
    """Metadata constraints φ of a search. The user id is never a filter: it is the partition.

    Attributes:
        time_from: Keep items whose event time is at or after this (Unix seconds).
        time_to: Keep items whose event time is at or before this (Unix seconds).
        kinds: Keep only these item kinds.
        tags: Keep items whose topic or entities contain any of these (case-insensitive).
        include_superseded: Also return items a newer fact superseded.
    """

    time_from: float | None = None
    time_to: float | None = None
    kinds: tuple[ItemKind, ...] | None = None
    tags: tuple[str, ...] | None = None
    include_superseded: bool = False
    metadata: tuple[tuple[str, str, Any], ...] | None = None

    @property
    def is_trivial(self) -> bool:
        """True when the filter keeps every current item."""
        return (
            self.time_from is None
            and self.time_to is None
            and not self.kinds
            and not self.tags
            and not self.include_superseded
            and not self.metadata
        )

    @classmethod
    def from_mapping(cls, filters: Filters | Mapping[str, Any] | None) -> Filters:
        """Accept a Filters, a plain dict or None; a dict naming a user or an unknown key is refused.

        A key set to ``None`` is left out. A ``Filters`` built by hand is checked like a dict.

        Raises:
            InvalidInputError: an unknown key (``user_id`` among them), a value of the wrong type,
                a time outside the years 1900-3000, or ``time_from`` after ``time_to``.
        """
        if filters is None:
            return cls()
        if isinstance(filters, Filters):
            filters = {f.name: getattr(filters, f.name) for f in fields(cls)}
        if not isinstance(filters, Mapping):
            raise InvalidInputError(f"filters must be a dict or Filters, got {type(filters).__name__}")
        unknown = set(filters) - FILTER_KEYS
        if unknown:
            hint = " (the user is chosen by user_id, never by a filter)" if "user_id" in unknown else ""
            names = sorted(repr(k) for k in unknown)  # repr: keys need not be strings, nor comparable
            raise InvalidInputError(f"unknown filter keys [{', '.join(names)}]; allowed: {sorted(FILTER_KEYS)}{hint}")
        kw: dict[str, Any] = {}
        for key in ("time_from", "time_to"):
            if filters.get(key) is not None:
                try:
                    kw[key] = parse_timestamp(filters[key])
                except InvalidInputError as exc:
                    raise InvalidInputError(f"filters.{key}: {exc}") from exc
        if "time_from" in kw and "time_to" in kw and kw["time_from"] > kw["time_to"]:
            raise InvalidInputError("filters.time_from is after filters.time_to: no time can match; swap them")
        if filters.get("kinds") is not None:
            names = _strings(filters["kinds"], "kinds")
            allowed = [k.value for k in ItemKind]
            bad = [n for n in names if n not in allowed]
            if bad:
                raise InvalidInputError(f"filters.kinds: {bad[0]!r} is not a kind; kinds must be among {allowed}")
            kw["kinds"] = tuple(ItemKind(n) for n in names) or None
        if filters.get("tags") is not None:
            kw["tags"] = _strings(filters["tags"], "tags") or None
        if filters.get("include_superseded") is not None:
            if not isinstance(filters["include_superseded"], bool):
                raise InvalidInputError("filters.include_superseded must be true or false")
            kw["include_superseded"] = filters["include_superseded"]
        if filters.get("metadata") is not None:
            meta = filters["metadata"]
            if isinstance(meta, tuple):  # a Filters' own conditions
                meta = _conditions_by_key(meta)
            kw["metadata"] = metadata_filter.parse(meta) or None
        return cls(**kw)


def _strings(value: object, key: str) -> tuple[str, ...]:
    """A filter's list of names as a tuple; a lone string is refused (it would be read letter by letter)."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple, set, frozenset)):
        raise InvalidInputError(f"filters.{key} must be a list of strings, got {type(value).__name__}")
    if not all(isinstance(v, str) for v in value):
        raise InvalidInputError(f"filters.{key} must be a list of strings")
    # a store cannot search with a NUL (PostgreSQL refuses it in text) nor a lone surrogate (no driver encodes it)
    return tuple(check_unicode(v, f"filters.{key}[{i}]") for i, v in enumerate(value))


def _conditions_by_key(conditions: tuple[tuple[str, str, Any], ...]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for key, op, value in conditions:
        out.setdefault(key, {})[op] = value
    return out


FILTER_KEYS = frozenset({"time_from", "time_to", "kinds", "tags", "include_superseded", "metadata"})


@dataclass(frozen=True)
class HypotheticalQuery:
    """One rewritten query of a plan, routed to a tier with its Stage-1 quota."""

    text: str
    route: Route = Route.MTM
    quota: int = 0


@dataclass(frozen=True)
class RetrievalPlan:
    """The Controller's request Q_t = <{q_i}, φ_t, K> (paper Eq. 1)."""

    query: str
    hqs: tuple[HypotheticalQuery, ...]
    filters: Filters
    k: int
    intent: dict[str, Any] = field(default_factory=dict)


@dataclass
class Hit:
    """A retrieved item with the score of each signal and the final score."""

    item: MemoryItem
    scores: dict[str, float]
    score: float
    hq: str = ""
    row: int | None = None  # the store's row of an MTM item (rows of one session are written in order)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view used by the CLI's ``--json`` and by evaluation dumps."""
        return {
            "id": self.item.id,
            "text": self.item.text,
            "provenance": list(self.item.provenance),
            "event_time": self.item.event_time,
            "score": self.score,
            "scores": dict(self.scores),
            "hq": self.hq,
        }


@dataclass(frozen=True)
class HistoryEvent:
    """One change to an item, as ``Memory.history`` returns it."""

    item_id: str
    event: str
    old_text: str | None
    new_text: str | None
    at: float


@dataclass(frozen=True)
class ComposedContext:
    """A prompt packed under a hard token budget, and what went into it: ``memories`` in rank order (the packing's),
    ``prompt_order`` their indices in the order the prompt shows them (grouped under dates in time order by default;
    empty: rank order)."""

    prompt: str
    n_tokens: int
    budget: int
    memories: tuple[MemoryItem, ...]
    stm_turns_kept: int
    dropped_memories: int
    prompt_order: tuple[int, ...] = ()

    def in_prompt_order(self) -> tuple[MemoryItem, ...]:
        """The packed memories in the order the prompt shows them."""
        return tuple(self.memories[i] for i in self.prompt_order) if self.prompt_order else self.memories
