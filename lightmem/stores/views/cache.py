"""Per-user in-memory views, kept least-recently-used within a byte ceiling.

Both backends mirror each user they serve in process memory: the embedded store its vectors,
BM25 terms and filter metadata (``partition.Partition``), the PostgreSQL store its BM25 terms and
metadata (``postgres.lexical.LexicalView``). A view is a copy of rows the database holds, so dropping one
loses nothing: the next request of that user rebuilds it from the tables. This cache drops the
least recently used views once their estimated size passes ``max_bytes``; without it a worker grows
by every user it has ever served.

The view in use is never dropped (a single view larger than the ceiling stays while it is the most
recent). Sizes are estimates from each view's counts (``nbytes()``), calibrated against tracemalloc
in ``tests/test_view_cache.py``; they are re-read after every change of a view (``resize``).
"""
from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar

log = logging.getLogger(__name__)

DEFAULT_CACHE_MB = 512.0
"""The default ceiling of a store's per-user views: a worker that served 1,000 users × 1,000 items
stayed at 673 MB RSS, holding ~220,000 of them (``tools/scale.py``, README)."""


class Sized(Protocol):
    def nbytes(self) -> int: ...


V = TypeVar("V", bound=Sized)


def ceiling_bytes(cache_mb: float | None) -> int | None:
    """``cache_mb`` (MiB; None or 0 for no ceiling) as bytes, refusing nonsense."""
    if cache_mb is None or cache_mb == 0:
        return None
    if isinstance(cache_mb, bool) or not isinstance(cache_mb, (int, float)) or not cache_mb > 0:
        raise ValueError(f"cache_mb must be a positive number of MiB (0 or None: no ceiling), got {cache_mb!r}")
    return int(cache_mb * 2**20)


class ViewCache(Generic[V]):
    """An LRU map user → view whose summed ``nbytes()`` stays within ``max_bytes`` (None: unbounded).

    Not thread-safe by itself: the stores call it under their own lock.
    """

    _warned = False  # the oversized-view warning is logged once per process

    def __init__(self, max_bytes: int | None) -> None:
        self.max_bytes = max_bytes
        self._views: OrderedDict[str, V] = OrderedDict()
        self._sizes: dict[str, int] = {}
        self._bytes = 0
        self.hits = self.misses = self.evictions = 0
        self.oversized = 0  # times one view alone was over the ceiling

    def get(self, key: str) -> V | None:
        """The view (now the most recent), or None when it is not held (counted as a miss)."""
        view = self._views.get(key)
        if view is None:
            self.misses += 1
            return None
        self.hits += 1
        self._views.move_to_end(key)
        return view

    def peek(self, key: str) -> V | None:
        """The view without touching its recency or the counters."""
        return self._views.get(key)

    def put(self, key: str, view: V) -> None:
        """Hold ``view`` as the most recent, dropping the least recent others while over the ceiling."""
        self._views[key] = view
        self._views.move_to_end(key)
        self.resize(key)

    def resize(self, key: str) -> None:
        """Re-measure a held view after it changed, and drop the least recent others while over the ceiling."""
        view = self._views.get(key)
        if view is None:
            return
        size = int(view.nbytes())
        self._bytes += size - self._sizes.get(key, 0)
        self._sizes[key] = size
        if self.max_bytes is None:
            return
        while self._bytes > self.max_bytes and len(self._views) > 1:
            oldest = next(iter(self._views))
            if oldest == key:  # the view in use is the most recent unless it was resized from behind
                self._views.move_to_end(key)
                oldest = next(iter(self._views))
            self._drop(oldest)
            self.evictions += 1
        if self._bytes > self.max_bytes:
            self.oversized += 1
            if not ViewCache._warned:  # once per process: a tiny ceiling would log on every view load
                ViewCache._warned = True
                log.warning("one user's view (%.0f MiB) is larger than the view cache's ceiling (%.0f MiB); it is "
                            "kept while in use: raise cache_mb (said once; `oversized` counts them)",
                            size / 2**20, self.max_bytes / 2**20)

    def pop(self, key: str) -> V | None:
        """Drop a view (it is rebuilt from the tables on next use); returns it, or None."""
        if key not in self._views:
            return None
        return self._drop(key)

    def _drop(self, key: str) -> V:
        view = self._views.pop(key)
        self._bytes -= self._sizes.pop(key)
        return view

    def clear(self) -> None:
        self._views.clear()
        self._sizes.clear()
        self._bytes = 0

    def __contains__(self, key: object) -> bool:
        return key in self._views

    def __len__(self) -> int:
        return len(self._views)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._views))

    @property
    def bytes(self) -> int:
        return self._bytes

    def stats(self) -> dict[str, int | float | None]:
        """What an operator watches: views held, their estimated MiB, the ceiling, hits, misses, evictions."""
        return {
            "views": len(self._views),
            "mb": round(self._bytes / 2**20, 1),
            "ceiling_mb": None if self.max_bytes is None else round(self.max_bytes / 2**20, 1),
            "hits": self.hits,
            "misses": self.misses,
            "evictions": self.evictions,
            "oversized": self.oversized,
        }
