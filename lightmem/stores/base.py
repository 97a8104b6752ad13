"""The store interface: what the facade, the retrieval engine, the CLI, the server and the LTM
may ask of a memory store, and nothing more.

``SQLiteStore`` (SQLite + FAISS + BM25) is the embedded backend, ``PostgresStore`` (PostgreSQL +
pgvector) the server backend; ``factory.open_store`` picks one by location. A backend implements
``MemoryStore`` and ``GraphStore`` and passes ``tests/test_store_contract.py``; no other layer changes.

Every method that reads or changes items takes the ``user_id`` it acts for: no call can
reach another user's rows. Row ids (``rid``) are the store's integer keys of items; they are
never reused, so a stale id can never point at someone else's newer item.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from lightmem.stores.rows import SHARED_SCOPE
from lightmem.types import Edge, EdgeType, Filters, HistoryEvent, KnowledgeNode, MemoryItem, NodeKind, Turn

# B, the active items a user keeps before the least retained are archived: every backend and every entry
# point (Memory.open, open_store, the Hydra store node) defaults to this one value.
DEFAULT_CAPACITY = 10_000
# The half-life (days) of the retention score that picks which items capacity archives first.
DEFAULT_RETENTION_HALF_LIFE_DAYS = 30.0


@dataclass
class OfflineChanges:
    """What one consolidation cycle does to a user's MTM, applied in the cycle's transaction.

    Attributes:
        supersede: (target id, newer id, "merge" | "update"): the target stops being current
            (sleep-time update).
        provenance: Item id → turn ids to add (a merged target's provenance moves to the newer entry).
        abstracts: (abstract item, its vector, member ids): inserted; members archived.
        marks: (item id, access count) of the items this cycle consolidated.
        facts: (fact, ids of the items it keys): fact keys to write (``stores.keys``).
        rekey: Item id → (its text and its keys as the cycle read them, its new keys, the vector of its text and
            new keys).
    """

    supersede: list[tuple[str, str, str]] = field(default_factory=list)
    provenance: dict[str, list[str]] = field(default_factory=dict)
    abstracts: list[tuple[MemoryItem, np.ndarray, list[str]]] = field(default_factory=list)
    marks: list[tuple[str, int]] = field(default_factory=list)
    facts: list[tuple[str, list[str]]] = field(default_factory=list)
    rekey: dict[str, tuple[str, str, str, np.ndarray]] = field(default_factory=dict)


@dataclass
class OfflineCommit:
    """What a committed consolidation cycle did.

    Attributes:
        cycle: The cycle's number (increasing across the store, every user).
        graph: Counts the graph update returned.
        mtm: Counts of the MTM changes: superseded, merged, abstracts, archived, marked, facts (fact keys
            written), keyed (items given new keys), skipped (changes dropped because an item was deleted or
            archived since the cycle read it).
    """

    cycle: int
    graph: dict[str, int] = field(default_factory=dict)
    mtm: dict[str, int] = field(default_factory=dict)


class GraphTransaction(Protocol):
    """The LTM graph's writes, valid only inside ``MemoryStore.commit_offline`` (and ``delete_user``).

    Nodes and edges belong to a scope: a user id (that user's own graph) or ``rows.SHARED_SCOPE`` (the
    shared graph, the default of these calls); a key is unique within its scope, an id everywhere.
    """

    def node(self, nid: int) -> KnowledgeNode | None: ...

    def node_by_key(self, key: str, scope: str = SHARED_SCOPE) -> KnowledgeNode | None: ...

    def insert_node(self, key: str, kind: NodeKind, text: str, facts: list[str], confidence: float, evidence: int,
                    now: float, cycle: int, vector: np.ndarray, scope: str = SHARED_SCOPE) -> int:
        """Insert an active node in ``scope``; returns its id."""
        ...

    def save_node(self, node: KnowledgeNode, vector: np.ndarray) -> None:
        """Write a node's facts, confidence, evidence, last seen and cycle, and vector; it becomes active."""
        ...

    def edge_state(self, src: int, dst: int, type: EdgeType) -> tuple[float, int, bool] | None:
        """(confidence, evidence, active) of the edge, or None when there is none."""
        ...

    def reinforce_edge(self, src: int, dst: int, type: EdgeType, confidence: float, evidence: int, now: float,
                       cycle: int) -> None:
        """Set the edge's confidence, add ``evidence``, mark it seen now and active."""
        ...

    def insert_edge(self, src: int, dst: int, type: EdgeType, label: str, confidence: float, evidence: int, now: float,
                    cycle: int, scope: str = SHARED_SCOPE) -> None: ...

    def both_active(self, a: int, b: int) -> bool:
        """Whether two distinct nodes exist and are active."""
        ...

    def add_sources(self, nid: int, user_id: str, facts: Sequence[tuple[str, int]]) -> None:
        """Record that ``user_id`` supported a shared node: (``rows.fact_digest`` of a statement, evidence) pairs,
        added to what was recorded."""
        ...

    def add_edge_source(self, src: int, dst: int, type: EdgeType, user_id: str, evidence: int) -> None:
        """Record that ``user_id`` supported a shared edge ``evidence`` more times."""
        ...

    def decay(self, factor: float, cycle: int, strong_evidence: int, drop_below: float,
              scope: str = SHARED_SCOPE) -> tuple[list[int], int]:
        """Scale the confidence of ``scope``'s active units last seen before ``cycle`` with less than
        ``strong_evidence``; deactivate nodes below ``drop_below`` and edges below it or touching
        an inactive node. Returns (ids of the nodes dropped, number of edges dropped)."""
        ...

    def erase_user(self, user_id: str, encode: Callable[[list[str]], np.ndarray] | None = None) -> dict[str, int]:
        """Remove the user's own graph, and from the shared graph what only the user supported (nodes, edges,
        statements); ``encode`` re-embeds the shared nodes whose statements changed. Returns ``ltm_nodes``,
        ``ltm_edges`` (deleted) and ``ltm_facts`` (statements removed from nodes others keep)."""
        ...


class GraphUpdate(Protocol):
    """The LTM half of a consolidation cycle, run by ``commit_offline`` inside its transaction."""

    def apply(self, tx: GraphTransaction, cycle: int, now: float) -> Mapping[str, int]:
        """Write the graph changes; returns their counts (recorded with the cycle)."""
        ...


class GraphStore(Protocol):
    """Reads of the LTM graph's tables: de-identified knowledge, partitioned by scope (a user id, or
    ``rows.SHARED_SCOPE``; ``scope=None``: every scope, the operator's listings)."""

    def data_version(self) -> int:
        """A number that changes when another process commits (cheap: polled before each search)."""
        ...

    def last_cycle(self) -> int:
        """The newest committed cycle (0 before the first)."""
        ...

    def generation(self) -> tuple[int, int]:
        """(newest cycle, erasures so far): changes whenever the graph's contents do."""
        ...

    def active_nodes(self, scope: str | None = None) -> tuple[list[KnowledgeNode], np.ndarray]:
        """Active nodes of ``scope`` by id and their vectors (one row each, float32)."""
        ...

    def active_edges(self, scope: str | None = None) -> list[Edge]: ...

    def node(self, nid: int) -> KnowledgeNode | None: ...

    def node_by_key(self, key: str, scope: str = SHARED_SCOPE) -> KnowledgeNode | None: ...

    def nodes(self, include_dropped: bool = False, scope: str | None = None) -> list[KnowledgeNode]:
        """Nodes by id."""
        ...

    def edges(self, include_dropped: bool = False, scope: str | None = None) -> list[Edge]:
        """Edges by (src, dst)."""
        ...

    def stats(self) -> dict[str, int]:
        """nodes, nodes_dropped, edges, edges_dropped, cycles."""
        ...

    def texts(self) -> list[str]:
        """Every text the graph stores (keys, names, facts, labels, cycle stats): what a privacy audit scans."""
        ...


@runtime_checkable
class StoreAdmin(Protocol):
    """What a store is and how it is run: its embedder and capacity, its users and counts, and its per-process views (refresh, drop, stats), flush and close."""

    dim: int
    embedder: str
    capacity: int

    def info(self) -> dict[str, str | None]:
        """``embedder``, ``dim`` and ``schema_version`` as recorded in the store."""
        ...

    def users(self) -> list[str]:
        """Every user with turns or items, sorted."""
        ...

    def counts(self) -> dict[str, dict[str, int]]:
        """Per user: turns, items (active), archived, pending."""
        ...

    def refresh(self) -> None:
        """Catch up with other processes' commits (every call does it; call it only to measure it)."""
        ...

    def drop_views(self) -> None:
        """Drop this process's per-user in-memory views (the tables keep everything; they are rebuilt on use)."""
        ...

    def cache_stats(self) -> dict[str, int | float | None]:
        """This process's per-user in-memory views (``views.cache.ViewCache.stats``): views, mb,
        ceiling_mb, hits, misses, evictions."""
        ...

    def flush(self) -> None:
        """Write buffered access statistics."""
        ...

    def close(self) -> None: ...

    @staticmethod
    def new_id() -> str:
        """A fresh item id."""
        ...


@runtime_checkable
class ItemStore(Protocol):
    """Turns and items of one user at a time: the atomic write of a call, reads, updates, archiving,
    deletion and each item's history."""

    def write(self, user_id: str, turns: Sequence[Turn], items: Sequence[MemoryItem], vectors: np.ndarray, now: float,
              pending: Sequence[str] | None = None) -> list[MemoryItem]:
        """Persist turns and their items atomically; skip turns the user has (and their items);
        replace the user's pending turn ids when ``pending`` is given. Returns the items written."""
        ...

    def known_turns(self, user_id: str, turn_ids: Sequence[str]) -> set[str]: ...

    def run_atomic(self, fn: Callable[[], Any]) -> Any:
        """``fn()``, whose writes to this store all join one transaction: all commit or none does."""
        ...

    def erasing_once(self) -> AbstractContextManager[Callable[[], None]]:
        """Several writes' erasure steps run once, at the end, instead of once per write (a batch of deletions);
        yields a call that runs what is held so far. Each erased text is gone from the files when the block ends."""
        ...

    def turns(self, user_id: str, turn_ids: Sequence[str] | None = None) -> list[Turn]:
        """The user's stored turns (only those of ``turn_ids`` when given), oldest first."""
        ...

    def pending_turns(self, user_id: str) -> list[Turn]:
        """Turns stored but still buffered by the sensory stage (no items yet), oldest first."""
        ...

    def speakers(self, user_id: str) -> list[str]: ...

    def get(self, user_id: str, item_id: str, include_archived: bool = False) -> MemoryItem:
        """Raises ``ItemNotFoundError`` when the user has no such item."""
        ...

    def list(self, user_id: str, include_archived: bool = False, limit: int | None = None,
             offset: int = 0, metadata: tuple | None = None, *, text: str | None = None, time_from: float | None = None,
             time_to: float | None = None, kind: str | None = None, newest_first: bool = False) -> list[MemoryItem]:
        """The user's items, oldest first (``newest_first``: the reverse); ``metadata``: the conditions of
        ``lightmem.metadata_filter.parse`` that their metadata must pass; ``text``: only items whose text holds it
        (case-insensitive); ``time_from``/``time_to``: event times within these bounds; ``kind``: an ``ItemKind`` value.
        Filters and the page (``limit``, ``offset``) apply in the database."""
        ...

    def update(self, user_id: str, item_id: str, now: float, *, vector: np.ndarray | None = None,
               keep_history: bool = False, encode: Callable[[list[str]], np.ndarray] | None = None,
               **fields: Any) -> MemoryItem:
        """Change an item's fields (a new text needs ``vector``). A new text keeps the old one in the
        item's history only with ``keep_history``; otherwise no earlier text of it stays there. A new text
        also deletes the fact keys citing the item (``stores.keys``); ``encode`` re-embeds the other items
        they keyed."""
        ...

    def set_archived(self, user_id: str, item_id: str, archived: bool, now: float) -> MemoryItem: ...

    def delete(self, user_id: str, item_id: str, now: float,
               encode: Callable[[list[str]], np.ndarray] | None = None) -> dict[str, int]:
        """Erase the item, the texts of its history (the events stay), its source turns that no
        other item cites or the sensory stage buffers, and the fact keys citing it (``encode`` re-embeds
        the other items they keyed); returns ``{"items": 1, "turns": n, "facts": n}``."""
        ...

    def delete_user(self, user_id: str, encode: Callable[[list[str]], np.ndarray] | None = None) -> dict[str, int]:
        """Erase the user's items, turns, fact keys, history, pending marks and consolidation marks, and in the same
        transaction what the LTM graph holds of the user (``GraphTransaction.erase_user``; ``encode`` re-embeds
        the shared nodes that lose statements); returns counts (``ltm_nodes``, ``ltm_edges``, ``ltm_facts`` too)."""
        ...

    def history(self, user_id: str, item_id: str) -> list[HistoryEvent]: ...


@runtime_checkable
class SearchIndex(Protocol):
    """What the read path asks: one lock for reads that must agree, dense and lexical search of a user's
    active items, the signals the ranker scores, and access counts."""

    @property
    def lock(self) -> AbstractContextManager[Any]:
        """Re-entrant; hold it for several reads that must see one state of the store."""
        ...

    def search_dense(self, user_id: str, qvec: np.ndarray, k: int, filters: Filters,
                     rids: set[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(row ids, cosines) of the top ``k`` active items passing ``filters``, best first (``rids``: the rows that
        pass ``filters.metadata``, as ``metadata_rows`` lists them; listed here when not given)."""
        ...

    def search_lexical(self, user_id: str, query: str, k: int, filters: Filters, rids: set[int] | None = None
                       ) -> tuple[np.ndarray, np.ndarray, Callable[[Sequence[int]], np.ndarray]]:
        """(row ids, BM25 scores) of the top ``k``, and this query's BM25 of any row ids (``rids``: as above)."""
        ...

    def metadata_rows(self, user_id: str, filters: Filters) -> set[int] | None:
        """The user's rows whose metadata passes ``filters.metadata`` (None without one): one query's two searches
        share it."""
        ...

    def cosine(self, user_id: str, qvec: np.ndarray, rids: Sequence[int]) -> np.ndarray: ...

    def signals(self, user_id: str, rids: Sequence[int]) -> tuple[np.ndarray, list[frozenset[str]]]:
        """Event times and tags (topic, entities; lower case) of active items."""
        ...

    def fetch(self, user_id: str, rids: Sequence[int]) -> dict[int, MemoryItem]:
        """Items of this user by row id; others' rows are never returned."""
        ...

    def size(self, user_id: str) -> int:
        """Active items of the user."""
        ...

    def touch(self, user_id: str, rids: Sequence[int], at: float) -> None:
        """Count a retrieval of these items (may be buffered until ``flush``)."""
        ...


@runtime_checkable
class OfflineStore(Protocol):
    """What a consolidation cycle asks: its candidates and progress, the LTM graph's tables, and one
    transaction that commits the cycle."""

    @property
    def graph(self) -> GraphStore:
        """The LTM graph's tables."""
        ...

    def indexed(self, user_id: str, rids: Sequence[int]) -> set[int]:
        """Which of these row ids are active items of the user."""
        ...

    def vectors(self, user_id: str, rids: Sequence[int]) -> np.ndarray:
        """Stored vectors of active items, in the order given."""
        ...

    def consolidation_candidates(self, user_id: str, limit: int, reactivation: int = 2,
                                 pressure: float = 0.9) -> list[tuple[int, MemoryItem, str]]:
        """(rid, item, reason) of at most ``limit`` active items to consolidate: ``new``,
        ``pressure`` (new, least retained first, under capacity pressure) or ``reactivated``."""
        ...

    def consolidation_state(self, user_id: str) -> dict[str, int]:
        """``consolidated`` and ``unconsolidated`` active items of the user."""
        ...

    def commit_offline(self, user_id: str, changes: OfflineChanges, now: float, graph: GraphUpdate | None = None,
                       stats: Mapping[str, Any] | None = None,
                       before_commit: Callable[[], None] | None = None) -> OfflineCommit:
        """Commit one consolidation cycle in one transaction: a new cycle, the graph update,
        the MTM changes, ``before_commit`` (raise there to roll everything back) and the cycle's
        stats. Changes to items deleted or archived since the cycle read them are skipped, and so is
        the graph update when none of the items the cycle marks is left (the user was erased meanwhile)."""
        ...


@runtime_checkable
class MemoryStore(StoreAdmin, ItemStore, SearchIndex, OfflineStore, Protocol):
    """A per-user memory store: turns, items with vectors, history, search indexes and the LTM graph.
    A backend implements all four parts; each caller types against the part it uses (the retrieval
    engine a ``SearchIndex``, the consolidator an ``OfflineStore``...).

    Attributes:
        dim: Embedding dimension of the stored vectors.
        embedder: Name of the embedder that made them.
        capacity: Bound on active items per user; the least retained are archived beyond it.
    """


@dataclass(frozen=True)
class Compacted:
    """What ``compact`` did to a store (either backend).

    Attributes:
        location: The store, as shown to users (a URI without its password).
        before: Bytes the store's files (PostgreSQL: its tables, with their indexes) took before.
        after: The same after.
        steps: What was run, in order.
        remaining: Where erased text may still be found afterwards, and why (empty: nowhere the
            command could reach).
    """

    location: str
    before: int
    after: int
    steps: tuple[str, ...]
    remaining: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        """The report the CLI prints."""
        out = [f"compacted {self.location}: {self.before / 1e6:.1f} MB -> {self.after / 1e6:.1f} MB ({'; '.join(self.steps)})"]
        out += [f"not cleared: {r}" for r in self.remaining]
        return out
