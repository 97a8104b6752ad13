"""The ``Memory`` facade: a thin delegator over the write path, the read path and the store."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lightmem.errors import InvalidInputError
from lightmem.ltm import CycleReport, LTMOptions, LTMRuntime, build_ltm
from lightmem.messages import check_user_id, to_turns
from lightmem.models.embedder import Embedder
from lightmem.models.tokens import TokenCounter
from lightmem.retrieval.composer import ContextComposer
from lightmem.retrieval.engine import RetrievalResult, TwoStageRetriever
from lightmem.roles.controller import Controller, PassthroughController
from lightmem.roles.maintenance import Maintainer
from lightmem.roles.selector import Selector, default_selector
from lightmem.roles.writer import DraftItem, TurnWriter, Writer, write_segments
from lightmem.sensory.pipeline import WritePath
from lightmem.stores.base import MemoryStore
from lightmem.stores.factory import open_store
from lightmem.timeutil import now as wall_clock
from lightmem.timeutil import parse_timestamp
from lightmem.types import ComposedContext, Filters, HistoryEvent, Hit, ItemKind, MemoryItem, Turn

log = logging.getLogger(__name__)
_FILTER_KEYS = {"time_from", "time_to", "kinds", "tags", "include_superseded"}


class Memory:
    """Long-term memory for an agent, partitioned per user.

    Build one with ``Memory.open(folder)`` (defaults) or ``lightmem.config.build_memory(cfg)``
    (Hydra config). All item operations take the ``user_id`` they act for; one user's
    call can never read or change another user's items.
    """

    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder,
        retriever: TwoStageRetriever,
        composer: ContextComposer,
        controller: Controller | None = None,
        writer: Writer | None = None,
        maintainer: Maintainer | None = None,
        counter: TokenCounter | None = None,
        k: int = 10,
        clock: Callable[[], float] = wall_clock,
        write_path: WritePath | None = None,
        ltm: LTMRuntime | None = None,
    ) -> None:
        self.store, self.embedder, self.retriever, self.composer = store, embedder, retriever, composer
        self.controller = controller or PassthroughController()
        self.writer = writer or TurnWriter(compact=True)
        self.maintainer = maintainer
        self.write_path = write_path
        self.counter = counter or embedder.token_counter()
        self.k = _check_k(k)
        self.clock = clock
        self.ltm = ltm
        if ltm is not None:
            self.retriever.ltm = ltm.graph

    @classmethod
    def open(
        cls,
        path: str | Path,
        embedder: Embedder | None = None,
        selector: Selector | None = None,
        controller: Controller | None = None,
        writer: Writer | None = None,
        maintainer: Maintainer | None = None,
        k: int = 10,
        budget: int = 2048,
        capacity: int = 10_000,
        retrieval: Mapping[str, Any] | None = None,
        write_path: WritePath | None = None,
        ltm: LTMOptions | None = None,
        **store_kwargs: Any,
    ) -> "Memory":
        """Open (or create) a store; every part left out is the default CPU pipeline's.

        Args:
            path: Store folder (or ``.sqlite`` file), created when missing; or a PostgreSQL
                database, ``postgresql://user:password@host/db`` (needs the ``postgres`` extra).
            embedder: Defaults to the embedder that wrote the store; for a new store the packaged
                all-MiniLM-L6-v2 with the trained memory adapter of checkpoints/embedder.
            selector: Stage-2 selector; defaults to the learned ranker of checkpoints/ranker
                (``Stage1Selector()`` keeps the Stage-1 order and loads no model).
            controller: Defaults to the raw query as the single HQ.
            writer: Defaults to one item per turn, its chit-chat sentences left out (the turn is stored whole).
            maintainer: Online maintenance after writes; none by default.
            k: Default number of items ``search`` returns.
            budget: Default prompt budget of ``build_context`` (tokens).
            capacity: Active items per user before the least retained are archived.
            retrieval: Keyword arguments of ``TwoStageRetriever`` (fusion, weights...).
            write_path: Sensory stages and STM buffer before the Writer (compression, topic
                segmentation, gates, normalization); none by default: the Writer gets raw turns.
            ltm: Long-term memory: the de-identified knowledge graph, its offline consolidation
                (in a background thread unless ``background=False``) and LTM routing of
                search. None by default: MTM only.
            **store_kwargs: Keyword arguments of the store (``MTMStore``: index, synchronous...;
                ``PostgresStore``: index, ef_search...).
        """
        if embedder is None:
            from lightmem.models.embedder import default_embedder

            embedder = default_embedder(path)
        store = open_store(path, dim=embedder.dim, embedder=embedder.name, capacity=capacity, **store_kwargs)
        routing = {} if ltm is None else {"routing": ltm.routing, "cross_share": ltm.cross_share, "ltm_hops": ltm.hops}
        retriever = TwoStageRetriever(store, embedder, selector or default_selector(), **{**dict(retrieval or {}), **routing})
        counter = embedder.token_counter()
        runtime = build_ltm(store, embedder, ltm) if ltm is not None else None
        return cls(store, embedder, retriever, ContextComposer(counter, budget), controller=controller, writer=writer,
                   maintainer=maintainer, counter=counter, k=k, write_path=write_path, ltm=runtime)

    # -- write path --------------------------------------------------------------------------
    def add(
        self,
        messages: str | Mapping[str, Any] | Sequence[str | Mapping[str, Any]],
        user_id: str,
        timestamp: object = None,
        session_id: str | None = None,
        context: Sequence[str] = (),
    ) -> list[MemoryItem]:
        """Remember an interaction. Returns the items written (none for turns already stored).

        Every message is validated before anything is written; the turns and their items
        commit in one transaction, so when ``add`` returns they survive a crash.
        """
        user_id = check_user_id(user_id)
        return self.add_turns(user_id, to_turns(messages, timestamp, session_id), context)

    def add_turns(self, user_id: str, turns: Sequence[Turn], context: Sequence[str] = ()) -> list[MemoryItem]:
        """Write already-validated turns (the loaders produce them) in one transaction.

        With a write path, turns first fill its buffers; entries are written when the STM
        buffer releases segments, and the turns still buffered are marked pending in the
        same transaction (``flush`` writes them at once).
        """
        user_id = check_user_id(user_id)
        known = self.store.known_turns(user_id, [t.turn_id for t in turns]) if turns else set()
        turns = [t for t in turns if t.turn_id not in known]  # a resumed ingest skips what is stored
        if self.write_path is None:
            return self._commit(user_id, turns, self.writer.write(turns, context) if turns else [])
        return self._through_write_path(user_id, turns, context, drain=False)

    def flush(self, user_id: str, context: Sequence[str] = ()) -> list[MemoryItem]:
        """Write everything the write path still buffers for ``user_id`` (end of a conversation)."""
        user_id = check_user_id(user_id)
        if self.write_path is None:
            return []
        return self._through_write_path(user_id, [], context, drain=True)

    def pending(self, user_id: str) -> list[Turn]:
        """Turns stored but not yet written into items (the write path's buffers), oldest first."""
        return self.store.pending_turns(check_user_id(user_id))

    def _through_write_path(self, user_id: str, turns: Sequence[Turn], context: Sequence[str], drain: bool) -> list[MemoryItem]:
        wp = self.write_path
        assert wp is not None
        # After a restart, the buffers start from the turns the store marks pending.
        restored = [] if wp.has_state(user_id) else self.store.pending_turns(user_id)
        if not turns and not restored and not (drain and wp.pending(user_id)):
            return []
        snap = wp.snapshot(user_id)
        try:
            flushed = wp.push(user_id, [*restored, *turns])
            if drain:
                more = wp.drain(user_id)
                flushed.segments += more.segments
                flushed.dropped += more.dropped
            drafts = write_segments(self.writer, flushed.segments, context) if flushed.segments else []
            return self._commit(user_id, turns, drafts, pending=[t.turn_id for t in wp.pending(user_id)])
        except BaseException:
            wp.restore(user_id, snap)  # buffers go back to what the store holds
            raise

    def _commit(self, user_id: str, turns: Sequence[Turn], drafts: Sequence[DraftItem],
                pending: Sequence[str] | None = None) -> list[MemoryItem]:
        """Embed the drafts and store them with the turns in one transaction."""
        if not turns and not drafts and pending is None:
            return []
        texts = [d.text for d in drafts]
        vecs = self.embedder.encode(texts) if texts else np.zeros((0, self.embedder.dim), dtype=np.float32)
        n_tokens = self.counter.count(texts) if texts else []
        at = self.clock()
        items = [
            MemoryItem(
                id=self.store.new_id(), user_id=user_id, text=d.text, provenance=list(d.provenance), created_at=at,
                event_time=d.event_time, last_access=at, topic=d.topic, entities=list(d.entities), kind=d.kind,
                valid_from=d.event_time, n_tokens=n, metadata=dict(d.metadata),
            )
            for d, n in zip(drafts, n_tokens)
        ]
        written = self.store.write(user_id, turns, items, vecs, at, pending=pending)
        if self.maintainer is not None and written:
            row = {it.id: i for i, it in enumerate(items)}
            self.maintainer.maintain(self, user_id, written, vecs[[row[w.id] for w in written]])
        if self.ltm is not None and self.ltm.scheduler is not None and turns:
            spec = self.ltm.consolidator.spec
            pressure = self.store.size(user_id) >= spec.pressure * self.store.capacity
            self.ltm.scheduler.notify(user_id, len(turns), pressure)  # never waits for a cycle
        return written

    # -- offline path ------------------------------------------------------------------------
    def consolidate(self, user_id: str | None = None, max_cycles: int = 1000) -> list[CycleReport]:
        """Run consolidation now, in this thread, until nothing is left to select.

        For one user, or for every user of the store. The background scheduler (when
        running) keeps working; cycles are atomic, so both may run.
        """
        if self.ltm is None:
            raise InvalidInputError("this Memory has no LTM; open it with ltm=LTMOptions()")
        users = [check_user_id(user_id)] if user_id is not None else self.store.users()
        reports = []
        for uid in users:
            for _ in range(max_cycles):
                rep = self.ltm.consolidator.run(uid)
                if not rep.cycle:
                    break
                reports.append(rep)
        return reports

    def wait_for_consolidation(self, timeout: float | None = None) -> bool:
        """Block until the background scheduler is idle (evaluations, tests). True when idle."""
        if self.ltm is None or self.ltm.scheduler is None:
            return True
        return self.ltm.scheduler.wait(timeout)

    def sources(self, item_id: str, user_id: str) -> list[MemoryItem]:
        """The archived entries an abstract entry was consolidated from (recoverable with ``restore``)."""
        item = self.get(item_id, user_id, include_archived=True)
        return [self.get(m, user_id, include_archived=True) for m in item.metadata.get("members", [])]

    # -- read path ---------------------------------------------------------------------------
    def search(
        self,
        query: str,
        user_id: str,
        k: int | None = None,
        filters: Filters | Mapping[str, Any] | None = None,
        stm: Sequence[str] = (),
        now: object = None,
        budget: int | None = None,
    ) -> list[Hit]:
        """Retrieve at most ``k`` items of ``user_id`` for ``query`` (Controller → Stage 1 → Selector).

        ``now`` anchors relative time in the query ("last week"); it defaults to the clock.
        An adaptive controller may return more than ``k`` for a complex query (SimpleMem Eq. 8).
        With ``budget`` (tokens of memory text), the hits are the set Stage 2 packs within it
        from its 3K candidates, best first: short memories leave room for more of them.
        """
        return self.retrieve(query, user_id, k, filters, stm, now, budget).hits

    def retrieve(
        self,
        query: str,
        user_id: str,
        k: int | None = None,
        filters: Filters | Mapping[str, Any] | None = None,
        stm: Sequence[str] = (),
        now: object = None,
        budget: int | None = None,
    ) -> RetrievalResult:
        """``search`` with its workings: the plan, the Stage-1 candidates and per-stage milliseconds."""
        user_id = check_user_id(user_id)
        if not isinstance(query, str) or not query.strip():
            raise InvalidInputError("query must be a non-empty string")
        k = self.k if k is None else _check_k(k)
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0):
            raise InvalidInputError(f"budget must be a positive number of tokens, got {budget!r}")
        at = self.clock() if now is None else parse_timestamp(now)
        t0 = time.perf_counter()
        plan = self.controller.plan(query, k, _to_filters(filters), stm, at)
        plan_ms = (time.perf_counter() - t0) * 1000
        result = self.retriever.retrieve(plan, user_id, at, budget)
        result.timings_ms["controller"] = plan_ms
        return result

    def build_context(
        self,
        query: str,
        user_id: str,
        stm: Sequence[str] = (),
        budget: int | None = None,
        k: int | None = None,
        filters: Filters | Mapping[str, Any] | None = None,
        now: object = None,
    ) -> ComposedContext:
        """Search, then pack query > STM > memories into a prompt under ``budget`` tokens.

        Without ``k``, Stage 2 fills the budget with the best of its candidates (budget-aware set);
        with ``k``, the best ``k`` are packed.
        """
        fill = (self.composer.budget if budget is None else budget) if k is None else None
        hits = self.search(query, user_id, k, filters, stm, now, fill)
        return self.composer.compose(query, stm, [h.item for h in hits], budget)

    # -- item management ---------------------------------------------------------------------
    def get(self, item_id: str, user_id: str, include_archived: bool = False) -> MemoryItem:
        return self.store.get(check_user_id(user_id), item_id, include_archived)

    def get_all(self, user_id: str, include_archived: bool = False, limit: int | None = None, offset: int = 0) -> list[MemoryItem]:
        return self.store.list(check_user_id(user_id), include_archived, limit, offset)

    def update(self, item_id: str, user_id: str, text: str | None = None, **fields: Any) -> MemoryItem:
        """Change an item's text (re-embedded) or metadata; the change is kept in history."""
        user_id = check_user_id(user_id)
        if text is not None:
            if not isinstance(text, str) or not text.strip():
                raise InvalidInputError("text must be a non-empty string")
            fields.update(text=text, n_tokens=self.counter.count([text])[0])
            return self.store.update(user_id, item_id, self.clock(), vector=self.embedder.encode([text])[0], **fields)
        return self.store.update(user_id, item_id, self.clock(), **fields)

    def archive(self, item_id: str, user_id: str) -> MemoryItem:
        """Hide an item from search without deleting it (``restore`` brings it back)."""
        return self.store.set_archived(check_user_id(user_id), item_id, True, self.clock())

    def restore(self, item_id: str, user_id: str) -> MemoryItem:
        return self.store.set_archived(check_user_id(user_id), item_id, False, self.clock())

    def delete(self, item_id: str, user_id: str) -> None:
        """Delete one item from SQLite, FAISS and BM25; it is never returned again."""
        self.store.delete(check_user_id(user_id), item_id, self.clock())

    def delete_user(self, user_id: str) -> dict[str, int]:
        """Erase everything of a user: turns, items and history."""
        user_id = check_user_id(user_id)
        if self.write_path is not None:
            self.write_path.forget(user_id)
        return self.store.delete_user(user_id)

    def history(self, item_id: str, user_id: str) -> list[HistoryEvent]:
        return self.store.history(check_user_id(user_id), item_id)

    def usage(self) -> dict[str, dict[str, float]]:
        """LLM calls, tokens, latency and failures per role, from every role that uses an LLM."""
        meters = {id(m): m for role in (self.controller, self.retriever.selector, self.writer)
                  if (m := getattr(getattr(role, "llm", None), "meter", None)) is not None}
        out: dict[str, dict[str, float]] = {}
        for meter in meters.values():
            out.update(meter.summary())
        return out

    def stats(self) -> dict[str, dict[str, int]]:
        return self.store.counts()

    def ltm_stats(self) -> dict[str, int]:
        """Nodes, edges (active and dropped) and cycles of the LTM graph; empty without LTM."""
        return self.ltm.graph.stats() if self.ltm is not None else {}

    def close(self) -> None:
        if self.ltm is not None and self.ltm.scheduler is not None:
            self.ltm.scheduler.close()  # a running cycle commits or rolls back whole first
        self.store.close()

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_k(k: object) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
        raise InvalidInputError(f"k must be a positive integer, got {k!r}")
    return k


def _to_filters(filters: Filters | Mapping[str, Any] | None) -> Filters:
    """Accept a Filters or a plain dict; a dict naming a user or an unknown key is refused."""
    if filters is None:
        return Filters()
    if isinstance(filters, Filters):
        return filters
    if not isinstance(filters, Mapping):
        raise InvalidInputError(f"filters must be a dict or Filters, got {type(filters).__name__}")
    unknown = set(filters) - _FILTER_KEYS
    if unknown:
        hint = " (the user is chosen by user_id, never by a filter)" if "user_id" in unknown else ""
        raise InvalidInputError(f"unknown filter keys {sorted(unknown)}; allowed: {sorted(_FILTER_KEYS)}{hint}")
    kw: dict[str, Any] = {}
    for key in ("time_from", "time_to"):
        if filters.get(key) is not None:
            kw[key] = parse_timestamp(filters[key])
    if filters.get("kinds"):
        try:
            kw["kinds"] = tuple(ItemKind(k) for k in filters["kinds"])
        except ValueError as exc:
            raise InvalidInputError(f"kinds must be among {[k.value for k in ItemKind]}") from exc
    if filters.get("tags"):
        tags = filters["tags"]
        if isinstance(tags, str) or not all(isinstance(t, str) for t in tags):
            raise InvalidInputError("tags must be a list of strings")
        kw["tags"] = tuple(tags)
    if "include_superseded" in filters:
        if not isinstance(filters["include_superseded"], bool):
            raise InvalidInputError("include_superseded must be a bool")
        kw["include_superseded"] = filters["include_superseded"]
    return Filters(**kw)
