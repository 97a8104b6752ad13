"""The in-memory mirror of one user's active items: FAISS vectors, BM25 terms and filter metadata.

A partition is a rebuildable view of SQLite rows of one user only; the store keeps one per
user it has served and drops it whenever it cannot be sure it matches the tables.
"""
from __future__ import annotations

import gc
import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np

from lightmem.stores.views.lexical import LexicalIndex
from lightmem.stores.views.vector import VectorIndex
from lightmem.types import Filters, ItemKind, MemoryItem


@dataclass(slots=True)
class IndexMeta:
    """What the filters need of an indexed item, kept in memory: no SQL on the read path."""

    event_time: float
    kind: ItemKind
    current: bool
    tags: frozenset[str]


class MetaCounts:
    """Filter metadata per row id with the two counts read beside it: superseded items (while 0 the default
    filter keeps everything) and items with tags (their sets cost memory). Both backends' views keep it."""

    meta: dict[int, IndexMeta]
    n_not_current: int
    n_tagged: int

    def set_meta(self, rid: int, meta: IndexMeta) -> None:
        """Set (or replace) a row's metadata; the counts follow, so a row set twice counts once."""
        old = self.meta.get(rid)
        if old is not None:
            self.n_not_current -= not old.current
            self.n_tagged -= bool(old.tags)
        self.meta[rid] = meta
        self.n_not_current += not meta.current
        self.n_tagged += bool(meta.tags)

    def forget_meta(self, rids: Sequence[int]) -> None:
        for r in rids:
            gone = self.meta.pop(int(r), None)
            if gone is not None:
                self.n_not_current -= not gone.current
                self.n_tagged -= bool(gone.tags)


@dataclass
class Partition(MetaCounts):
    vectors: VectorIndex
    lexical: LexicalIndex
    meta: dict[int, IndexMeta] = field(default_factory=dict)
    n_not_current: int = 0  # superseded items; while 0 the default filter keeps everything
    n_tagged: int = 0  # items with entities or a topic (their tag sets cost memory)
    # Rows written before their vector (the background indexer's backlog): they hold a zero vector, so
    # BM25 finds them and dense search ranks them last, until ``set_vectors`` puts the real one in.
    unembedded: set[int] = field(default_factory=set)

    def add(self, rid: int, item: MemoryItem, vec: np.ndarray | None) -> None:
        """Index an item; ``vec`` None: its vector comes later (``set_vectors``)."""
        if vec is None:
            self.unembedded.add(rid)
            vec = np.zeros(self.vectors.dim, dtype=np.float32)
        self.vectors.add(np.asarray([rid]), vec[None, :])
        self.lexical.add(rid, item.index_text)
        self.set_meta(rid, IndexMeta(item.event_time, item.kind, item.is_current, tags_of(item.topic, item.entities)))

    def set_vectors(self, rids: Sequence[int], vecs: np.ndarray) -> None:
        """The vectors of rows written without one arrive."""
        self.vectors.set(rids, vecs)
        self.unembedded.difference_update(int(r) for r in rids)

    def mark_not_current(self, rid: int) -> None:
        """The item was superseded (it stays indexed for ``include_superseded``)."""
        m = self.meta.get(rid)
        if m is not None and m.current:
            self.meta[rid] = replace(m, current=False)
            self.n_not_current += 1

    def remove(self, rids: Sequence[int]) -> None:
        self.unembedded.difference_update(int(r) for r in rids)
        self.vectors.remove(rids)
        self.lexical.remove(rids)
        self.forget_meta(rids)

    def allowed(self, ids: np.ndarray, f: Filters, rids: set[int] | None = None) -> np.ndarray | None:
        """Boolean mask over ``ids`` for the filter, or None when it keeps everything; ``rids``: the rows whose
        metadata passes ``f.metadata`` (the store lists them)."""
        return filter_mask(self.meta, ids, f, all_current=self.n_not_current == 0, rids=rids)

    def nbytes(self) -> int:
        """Estimated bytes of this view (``views.cache.ViewCache`` keeps the sum under a ceiling)."""
        return self.vectors.nbytes() + self.lexical.nbytes() + meta_nbytes(len(self.meta), self.n_tagged)


_META_ENTRY = 200  # a dict entry, an IndexMeta (slots) and its float
_TAGS = 250  # a small non-empty frozenset of tags


def meta_nbytes(n: int, n_tagged: int) -> int:
    """Estimated bytes of ``n`` items' filter metadata, ``n_tagged`` of them with tags."""
    return _META_ENTRY * n + _TAGS * n_tagged


def filter_mask(meta: Mapping[int, IndexMeta], ids: np.ndarray, f: Filters, all_current: bool,
                rids: set[int] | None = None) -> np.ndarray | None:
    """Boolean mask over ``ids`` (keys of ``meta``) for the filter, or None when it keeps everything; with a
    metadata filter, ``rids`` are the rows that pass it (listed by the store)."""
    if f.is_trivial and all_current:
        return None
    if f.metadata:
        passing = rids or set()
        base = filter_mask(meta, ids, replace(f, metadata=None), all_current)
        inside = np.fromiter((int(r) in passing for r in ids), dtype=bool, count=len(ids))
        return inside if base is None else base & inside
    kinds = set(f.kinds) if f.kinds else None
    tags = {t.lower() for t in f.tags} if f.tags else None
    lo = -np.inf if f.time_from is None else f.time_from
    hi = np.inf if f.time_to is None else f.time_to

    def keep(rid: int) -> bool:
        m = meta[rid]
        return (
            (f.include_superseded or m.current)
            and lo <= m.event_time <= hi
            and (kinds is None or m.kind in kinds)
            and (tags is None or not tags.isdisjoint(m.tags))
        )

    return np.fromiter((keep(int(r)) for r in ids), dtype=bool, count=len(ids))


_NO_TAGS: frozenset[str] = frozenset()


def tags_of(topic: str | None, entities: Sequence[str]) -> frozenset[str]:
    if not entities and not topic:
        return _NO_TAGS  # shared: most items have none
    return frozenset([t.lower() for t in entities] + ([topic.lower()] if topic else []))


_KINDS = {k.value: k for k in ItemKind}


def row_meta(event_time: float, kind: str, topic: str | None, entities_json: str, current: object) -> IndexMeta:
    """An item's filter metadata from its table row (both backends' views load it this way)."""
    no_tags = not topic and entities_json == "[]"  # most items: no JSON to parse
    tags = _NO_TAGS if no_tags else tags_of(topic, json.loads(entities_json))
    return IndexMeta(event_time, _KINDS[kind], bool(current), tags)


def fill(part: Partition, rows: Sequence[tuple], dim: int) -> None:
    """Add ``SQLiteTables.active_vectors`` rows to a partition (the vectors in one call, BM25 in bulk)."""
    rids = np.asarray([r[0] for r in rows], dtype=np.int64)
    zero = bytes(4 * dim)  # a row whose vector the background indexer has not written yet: b''
    part.vectors.add(rids, np.frombuffer(b"".join(r[2] or zero for r in rows), dtype=np.float32).reshape(len(rows), dim))
    part.unembedded.update(int(r[0]) for r in rows if not r[2])
    part.lexical.add_many([(int(r[0]), r[1]) for r in rows])
    for rid, _, _, event_time, kind, topic, ents, current in rows:
        part.set_meta(int(rid), row_meta(event_time, kind, topic, ents, current))


@contextmanager
def no_gc_pauses() -> Iterator[None]:
    """Build a view without the cyclic garbage collector running: loading one creates tens of thousands
    of small objects (metadata, postings), which start collections that walk every object the process
    holds, every view of every user, and double a large user's load time at random (a 10,000-item
    view: ~45 ms, ~105 ms when a collection lands in it). Nothing a load makes is cyclic garbage."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class SyncingLock:
    """The store's re-entrant lock; its outermost acquisition first applies other processes' commits.

    Syncing only at the outermost level keeps one operation's several index reads on one view.
    """

    def __init__(self, lock: threading.RLock, refresh: Callable[[], None]) -> None:
        self._lock, self._refresh, self._depth = lock, refresh, 0

    def __enter__(self) -> "SyncingLock":
        self._lock.acquire()
        self._depth += 1  # only the owning thread touches it
        if self._depth == 1:
            try:
                self._refresh()
            except BaseException:
                self._depth -= 1
                self._lock.release()
                raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        self._lock.release()
