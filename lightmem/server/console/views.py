"""What the console's pages show, computed from ``Memory`` (no HTML here): the memory list's filters and
page, a memory's provenance and derived items, and the context inspector's table of candidates."""
from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from lightmem import metadata_filter
from lightmem.errors import InvalidInputError, StoreError
from lightmem.memory import Memory
from lightmem.retrieval.engine import RetrievalResult
from lightmem.timeutil import parse_timestamp

log = logging.getLogger(__name__)
from lightmem.types import ComposedContext, ItemKind, MemoryItem

PAGE_SIZE = 50
COUNT_CAP = 1000  # a filtered list counts its matches up to this many (each one counted is a row read)
MAX_PAGE = 100_000


def when(seconds: float | None) -> str:
    """A Unix time as the console shows it (UTC, to the minute)."""
    if seconds is None:
        return ""
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")


@dataclass(frozen=True)
class ListQuery:
    """The memory list's filters, as the form's query parameters give them.

    Attributes:
        text: Keep memories whose text holds this (case-insensitive).
        session: Keep memories of this session (``metadata.session_id``).
        date_from: Keep memories whose event time is at or after this (a date lightmem parses).
        date_to: ... at or before this.
        metadata: A metadata filter as JSON (``lightmem.metadata_filter``).
        archived: Include archived memories.
        page: 0-based page of ``PAGE_SIZE`` memories.
    """

    text: str = ""
    session: str = ""
    date_from: str = ""
    date_to: str = ""
    metadata: str = ""
    archived: bool = False
    page: int = 0

    @classmethod
    def of(cls, params: Mapping[str, str]) -> "ListQuery":
        try:
            page = min(max(int(params.get("page", "0") or 0), 0), MAX_PAGE)
        except ValueError:
            page = 0
        return cls(params.get("q", "").strip(), params.get("session", "").strip(), params.get("from", "").strip(),
                   params.get("to", "").strip(), params.get("meta", "").strip(), params.get("archived") == "1", page)

    def spec(self) -> dict[str, Any] | None:
        """The metadata filter ``Memory.get_all`` takes (the session's condition joined in)."""
        spec: dict[str, Any] = {}
        if self.metadata:
            spec = metadata_filter.loads(self.metadata, "the metadata filter")
            if not isinstance(spec, dict):
                raise InvalidInputError('the metadata filter must be a JSON object, e.g. {"topic": "sport"}')
        if self.session:
            spec["session_id"] = self.session
        return spec or None

    def problems(self) -> dict[str, str]:
        """What is wrong with each filter the form sent (its field's name -> why), all of them at once: the page
        says each beside the form, which keeps what was typed."""
        found = {}
        for name, check in (("meta", self.spec), ("from", lambda: self.date_from and parse_timestamp(self.date_from)),
                            ("to", lambda: self.date_to and parse_timestamp(self.date_to))):
            try:
                check()
            except InvalidInputError as exc:
                found[name] = str(exc)
        return found

    def bounds(self) -> tuple[float | None, float | None]:
        lo = parse_timestamp(self.date_from) if self.date_from else None
        hi = parse_timestamp(self.date_to) if self.date_to else None
        if hi is not None and len(self.date_to) <= 10:  # a bare date: through the end of that day
            hi += 86_399
        return lo, hi

    def params(self, **change: Any) -> dict[str, str]:
        """The query parameters of this list (``change``: other values), for links to other pages."""
        values = {"q": self.text, "session": self.session, "from": self.date_from, "to": self.date_to,
                  "meta": self.metadata, "archived": "1" if self.archived else "", "page": str(self.page)}
        values.update({k: str(v) for k, v in change.items()})
        return {k: v for k, v in values.items() if v and v != "0"}


@dataclass(frozen=True)
class ListPage:
    """A page of memories and how many match: ``total`` is exact unless ``capped`` (then at least that many match,
    and counting further would read every matching row)."""

    items: list[MemoryItem]
    total: int
    page: int
    has_next: bool
    capped: bool = False

    @property
    def pages(self) -> int | None:
        return None if self.capped else max((self.total + PAGE_SIZE - 1) // PAGE_SIZE, 1)


def list_page(memory: Memory, user_id: str, query: ListQuery) -> ListPage:
    """One page of the user's memories under ``query``'s filters, the latest written first (the store's write
    order: the page shows each memory's write time beside its event time), and how many match. The store filters
    and cuts the page, so a page costs about the same at 100 memories and at 10,000.

    The count: without a filter, the store's per-user counts; with one, what the page shows when it is the last, else
    the matching memories counted up to ``COUNT_CAP`` (beyond it the page says "1,000+").
    """
    spec = query.spec()
    lo, hi = query.bounds()
    filters = dict(metadata=spec, text=query.text or None, time_from=lo, time_to=hi)
    offset = query.page * PAGE_SIZE
    items = memory.get_all(user_id, include_archived=query.archived, limit=PAGE_SIZE + 1, offset=offset,
                           newest_first=True, **filters)
    has_next = len(items) > PAGE_SIZE
    capped = False
    if not query.text and lo is None and hi is None and spec is None:
        counts = memory.stats().get(user_id, {})
        total = counts.get("items", 0) + (counts.get("archived", 0) if query.archived else 0)
    elif not has_next and (items or not offset):  # the last page: every match is before it or on it
        total = offset + len(items)
    else:  # a page past the end (nothing on it), or more pages: count what matches, up to the cap
        found = len(memory.get_all(user_id, include_archived=query.archived, limit=COUNT_CAP + 1, **filters))
        total, capped = min(found, COUNT_CAP), found > COUNT_CAP
    return ListPage(items[:PAGE_SIZE], total, query.page, has_next, capped)


@dataclass
class Detail:
    """A memory and what surrounds it: the turns it was written from, its history, and derived items."""

    item: MemoryItem
    turns: list[Any]
    missing_turns: list[str]
    history: list[Any]
    sources: list[MemoryItem] = field(default_factory=list)
    abstracts: list[MemoryItem] = field(default_factory=list)


def detail(memory: Memory, user_id: str, item_id: str) -> Detail:
    """Raises ``ItemNotFoundError`` when the user has no such memory (another user's included).

    The store buffers retrieval counts (``touch``) until it is flushed or closed; they are written first, so the page
    counts a retrieval as soon as it happened (an inspected context included).
    """
    try:
        memory.store.flush()
    except StoreError as exc:  # a page that reads must not fail on a write: the counts may then lag, as they did before
        log.warning("console: could not write the buffered retrieval counts before showing a memory: %s", exc)
    item = memory.get(item_id, user_id, include_archived=True)
    turns = memory.store.turns(user_id, item.provenance) if item.provenance else []
    found = {t.turn_id for t in turns}
    sources = memory.sources(item_id, user_id) if item.members else []
    # An episode consolidated into an abstract is archived by that cycle: only then look for the abstracts.
    abstracts = [m for m in memory.get_all(user_id, include_archived=True, kind=ItemKind.ABSTRACT.value)
                 if item.id in m.members] if item.archived else []
    return Detail(item, turns, [t for t in item.provenance if t not in found], memory.history(item_id, user_id),
                  sources, abstracts)


SORTS = {"ranker": "ranker_rank", "stage1": "stage1_rank"}  # the inspector's orders of its table (?sort=)
TOP = "above the budget's edge"
FILLED = "filled leftover space: it fit the tokens left after a higher-ranked memory did not"
SKIPPED = "skipped: too long for the tokens left"
BELOW = "below the budget's edge"


def check_sort(sort: str) -> str:
    """``sort`` if the inspector's table sorts by it; else ``InvalidInputError``."""
    if sort not in SORTS:
        raise InvalidInputError(f"the candidates sort by {' or '.join(map(repr, SORTS))}, got {sort!r}")
    return sort


@dataclass(frozen=True)
class CandidateRow:
    """One Stage-1 candidate of a context, as the inspector's table shows it."""

    stage1_rank: int
    ranker_rank: int
    item: MemoryItem
    dense: float | None
    word: float | None
    stage1: float
    ranker: float | None
    tokens: int
    packed: str  # "whole", "excerpt" or ""
    why: str


def candidate_rows(memory: Memory, context: ComposedContext, result: RetrievalResult | None,
                   sort: str = "ranker") -> list[CandidateRow]:
    """The candidates with both their ranks, tokens, whether the prompt holds them and why; in the ranker's order
    (the order packing walks), or with ``sort="stage1"`` in Stage 1's.

    Packing walks the ranker's order and packs each memory that fits the tokens left. So a packed memory is either
    above the budget's edge (every memory ranked above it is packed too) or filled leftover space (a higher-ranked one
    did not fit, and this shorter one did); a memory left out ranked above the last one packed was skipped as too long
    for the tokens left, and one ranked below it is below the budget's edge.
    """
    check_sort(sort)
    if result is None:
        return []
    cands = result.candidates
    ranker_key = next((k for k in ("slm", "ranker") if cands and k in cands[0].scores), None)
    order = sorted(range(len(cands)), key=lambda i: (-cands[i].scores.get("ranker", cands[i].score), -cands[i].score))
    ranker_rank = {i: r for r, i in enumerate(order, 1)}
    in_prompt = {m.id: m for m in context.memories}
    packed_ranks = [ranker_rank[i] for i, h in enumerate(cands) if h.item.id in in_prompt]
    edge = max(packed_ranks, default=0)
    first_left_out = min((ranker_rank[i] for i, h in enumerate(cands) if h.item.id not in in_prompt), default=len(cands) + 1)
    rows = []
    for i, hit in enumerate(cands):
        kept = in_prompt.get(hit.item.id)
        rank = ranker_rank[i]
        if kept is not None:
            packed = "excerpt" if kept.metadata.get("excerpt") else "whole"
            why = TOP if rank < first_left_out else FILLED
        elif rank < edge:
            packed, why = "", SKIPPED
        else:
            packed, why = "", BELOW
        s = hit.scores
        rows.append(CandidateRow(i + 1, rank, hit.item, s.get("dense"), s.get("bm25_norm"), s.get("stage1", hit.score),
                                 s.get(ranker_key) if ranker_key else None, memory.composer.line_cost(hit.item),
                                 packed, why))
    return sorted(rows, key=lambda row: getattr(row, SORTS[sort]))


def stage_times(result: RetrievalResult | None) -> list[tuple[str, float]]:
    """Milliseconds per stage in the order they run."""
    if result is None:
        return []
    names = ("controller", "embed", "stage1", "stage2", "compose")
    return [(n, result.timings_ms[n]) for n in names if n in result.timings_ms]


def user_rows(memory: Memory, users: list[str]) -> list[dict[str, Any]]:
    """Per user: memories, archived, turns, pending turns and the indexing backlog."""
    counts = memory.stats()
    return [{"user": u, **{k: counts.get(u, {}).get(k, 0) for k in ("items", "archived", "turns", "pending", "unembedded")}}
            for u in users]
