"""The ``Memory`` facade: a thin delegator over the write path, the read path and the store."""
from __future__ import annotations

import dataclasses
import hashlib
import inspect
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lightmem import metadata_filter, tracing
from lightmem.batch import plan as plan_batch
from lightmem.batch import run as run_batch
from lightmem.build import memory_parts
from lightmem.errors import InvalidInputError, ItemNotFoundError, shown
from lightmem.ltm import CycleReport, LTMRuntime
from lightmem.models.embedder import Embedder
from lightmem.models.tokens import TokenCounter
from lightmem.models.word_scorer import WordScorer, keep_codes
from lightmem.queue_indexer import make_indexer
from lightmem.retrieval.composer import ContextComposer
from lightmem.retrieval.engine import RetrievalResult, TwoStageRetriever
from lightmem.roles.controller import Controller, PassthroughController
from lightmem.roles.maintenance import Maintainer
from lightmem.roles.writer import SYSTEM_KEYS, DraftItem, Writer, default_writer, without_system_keys
from lightmem.sensory.pipeline import SensoryStage
from lightmem.stores.base import MemoryStore
from lightmem.timeutil import now as wall_clock
from lightmem.timeutil import parse_timestamp
from lightmem.types import ComposedContext, Filters, HistoryEvent, Hit, ItemKind, MemoryItem, Turn
from lightmem.validation import (
    MAX_TURN_CHARS,
    check_budget,
    check_id,
    check_item_fields,
    check_k,
    check_metadata,
    check_query,
    check_stm,
    check_threshold,
    check_turn_lengths,
    check_unicode,
    check_user_id,
    is_adapter_key,
    to_turns,
)
from lightmem.write import WritePipeline
from lightmem.write_policy import WritePolicy
from lightmem.write_policy import resolve as resolve_policy

log = logging.getLogger(__name__)


class Memory:
    """Long-term memory for an agent, partitioned per user.

    Build one with ``Memory.open(folder)`` (defaults) or ``lightmem.config.build_memory(cfg)``
    (Hydra config); both make its parts in ``lightmem.build.memory_parts``. All item operations
    take the ``user_id`` they act for; one user's call can never read or change another user's items.

    The facade validates and delegates: writes to a ``WritePipeline`` (lightmem/write.py),
    searches to the controller and the ``TwoStageRetriever`` (built with ``ltm``'s graph),
    item management to the store.
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
        sensory_stage: SensoryStage | None = None,
        ltm: LTMRuntime | None = None,
        word_scorer: WordScorer | None = None,
        max_turn_chars: int = MAX_TURN_CHARS,
        background_index: bool = False,
        index_here: bool = True,
    ) -> None:
        self.store, self.embedder, self.retriever, self.composer = store, embedder, retriever, composer
        self.controller = controller or PassthroughController()
        self.counter = counter or embedder.token_counter()
        self.k = check_k(k)
        if isinstance(max_turn_chars, bool) or not isinstance(max_turn_chars, int) or max_turn_chars < 1:
            raise InvalidInputError(f"max_turn_chars must be a positive whole number of characters, got {shown(max_turn_chars)}")
        self.max_turn_chars = max_turn_chars
        self.ltm = ltm
        self._closed = False
        self.indexer = make_indexer(store, embedder, word_scorer, background_index, index_here)
        self._write = WritePipeline(store, embedder, self.counter, writer or default_writer(), clock,
                                    sensory_stage=sensory_stage, maintainer=maintainer, ltm=ltm, word_scorer=word_scorer,
                                    indexer=self.indexer)
        if self.indexer is not None:
            self.indexer.start()  # first picks up the items a killed process left without vectors
            if ltm is not None and ltm.scheduler is not None:
                ltm.scheduler.before_cycle = self.indexer.flush

    # The write pipeline's parts, settable (an evaluation wraps the writer, a test swaps the clock).
    @property
    def writer(self) -> Writer:
        return self._write.writer

    @writer.setter
    def writer(self, writer: Writer) -> None:
        self._write.writer = writer

    @property
    def maintainer(self) -> Maintainer | None:
        return self._write.maintainer

    @maintainer.setter
    def maintainer(self, maintainer: Maintainer | None) -> None:
        self._write.maintainer = maintainer

    @property
    def sensory_stage(self) -> SensoryStage | None:
        return self._write.sensory_stage

    @property
    def clock(self) -> Callable[[], float]:
        return self._write.clock

    @clock.setter
    def clock(self, clock: Callable[[], float]) -> None:
        self._write.clock = clock

    @classmethod
    def open(cls, path: str | Path, **options: Any) -> "Memory":
        """Open (or create) a store and the pipeline over it; every part left out is the default CPU
        pipeline's. The arguments are ``lightmem.build.memory_parts``'s (the one construction path):
        embedder, selector, controller, writer, maintainer, k, budget, capacity, retrieval,
        sensory_stage, ltm and the store's own settings; and ``tracing=True``, which turns on OpenTelemetry
        spans in this process (``lightmem.tracing``)."""
        if options.pop("tracing", False):
            tracing.enable()
        return cls(**memory_parts(path, **options))

    # -- write path --------------------------------------------------------------------------
    @tracing.add_span
    def add(
        self,
        messages: str | Mapping[str, Any] | Sequence[str | Mapping[str, Any]],
        user_id: str,
        timestamp: object = None,
        session_id: str | None = None,
        context: Sequence[str] = (),
        *,
        policy: str | WritePolicy | None = None,
    ) -> list[MemoryItem]:
        """Remember an interaction. Returns the items written (none for turns already stored).

        Every message is validated before anything is written; the turns and their items
        commit in one transaction, so when ``add`` returns they survive a crash. ``policy``
        (``lightmem.write_policy``) decides which turns become memories: ``"all"`` (None, the default)
        every one; ``"agent"`` (the adapters' default) leaves out questions, pleasantries, answers and
        restatements of stored memories. Every turn is stored either way.
        """
        user_id = check_user_id(user_id)
        judge = resolve_policy(policy)
        return self.add_turns(user_id, to_turns(messages, timestamp, session_id), context, policy=judge)

    def add_turns(self, user_id: str, turns: Sequence[Turn], context: Sequence[str] = (), *,
                  policy: str | WritePolicy | None = None) -> list[MemoryItem]:
        """Write already-validated turns (the loaders produce them) in one transaction.

        With a sensory stage, turns first fill its buffers; entries are written when the STM
        buffer releases segments, and the turns still buffered are marked pending in the
        same transaction (``flush`` writes them at once). ``policy``: as ``add``'s.
        """
        user_id = check_user_id(user_id)
        check_turn_lengths(turns, self.max_turn_chars)
        return self._write.add_turns(user_id, turns, context, policy=resolve_policy(policy))

    def flush(self, user_id: str, context: Sequence[str] = ()) -> list[MemoryItem]:
        """Write everything the sensory stage still buffers for ``user_id`` (end of a conversation)."""
        return self._write.flush(check_user_id(user_id), context)

    def pending(self, user_id: str) -> list[Turn]:
        """Turns stored but not yet written into items (the sensory stage's buffers), oldest first."""
        return self.store.pending_turns(check_user_id(user_id))

    # -- offline path ------------------------------------------------------------------------
    def consolidate(self, user_id: str | None = None, max_cycles: int = 1000) -> list[CycleReport]:
        """Run consolidation now, in this thread, until nothing is left to select.

        For one user, or for every user of the store. The background scheduler (when
        running) keeps working; cycles are atomic, so both may run.
        """
        if self.ltm is None:
            raise InvalidInputError("this Memory has no LTM; open it with ltm=LTMOptions()")
        users = [check_user_id(user_id)] if user_id is not None else self.store.users()
        self.flush_index()  # a cycle selects items with vectors only
        reports = []
        for uid in users:
            for _ in range(max_cycles):
                rep = self.ltm.consolidator.run(uid)
                if not rep.cycle:
                    break
                reports.append(rep)
        return reports

    def wait_for_consolidation(self, timeout: float | None = None) -> bool:
        """Block until the cycles the background scheduler was asked for have run (evaluations, tests): on PostgreSQL
        those this process requested, wherever they run (``ltm.queue_scheduler``). True when none is left."""
        if self.ltm is None or self.ltm.scheduler is None:
            return True
        return self.ltm.scheduler.wait(timeout)

    def sources(self, item_id: str, user_id: str) -> list[MemoryItem]:
        """The archived entries an abstract entry was consolidated from (recoverable with ``restore``)."""
        item = self.get(item_id, user_id, include_archived=True)
        return [self.get(m, user_id, include_archived=True) for m in item.members]

    # -- read path ---------------------------------------------------------------------------
    @tracing.search_span
    def search(
        self,
        query: str,
        user_id: str,
        k: int | None = None,
        filters: Filters | Mapping[str, Any] | None = None,
        stm: Sequence[str] = (),
        now: object = None,
        budget: int | None = None,
        threshold: float | None = None,
    ) -> list[Hit]:
        """Retrieve at most ``k`` items of ``user_id`` for ``query`` (Controller → Stage 1 → Selector).

        ``now`` anchors relative time in the query ("last week"); it defaults to the clock.
        An adaptive controller may return more than ``k`` for a complex query (SimpleMem Eq. 8).
        With ``budget`` (prompt tokens of memory lines: each memory as ``build_context`` renders it, date
        prefix and newline included, counted by the prompt's tokenizer), the hits are the set Stage 2 packs
        within it from its 5K candidates, best first: short memories leave room for more of them.

        With ``threshold``, only hits whose ``score`` is above it are returned (Stage 2's best ``k`` of those), so
        there may be fewer than ``k``, or none; ``None`` (the default): the best ``k`` whatever they score. A score is
        Stage 1's fused evidence, not a probability: by default the cosine of the query's and the memory's vectors
        plus 0.5 × its BM25 over the best match's plus 0.1 for a matching tag, -1 to 1.6. ``threshold=0`` drops the
        hits without any evidence (no shared word, no tag, a vector pointing away or not written yet); a threshold
        outside the range of scores (``TwoStageRetriever.score_range``) raises ``InvalidInputError``. What a score
        means and what to choose: docs/python.md, "Scores and thresholds".
        """
        return self.retrieve(query, user_id, k, filters, stm, now, budget, threshold).hits

    def retrieve(
        self,
        query: str,
        user_id: str,
        k: int | None = None,
        filters: Filters | Mapping[str, Any] | None = None,
        stm: Sequence[str] = (),
        now: object = None,
        budget: int | None = None,
        threshold: float | None = None,
    ) -> RetrievalResult:
        """``search`` with its workings: the plan, the Stage-1 candidates (all of them: ``threshold`` filters the
        hits only) and per-stage milliseconds."""
        user_id, query = check_user_id(user_id), check_query(query)
        k, budget, stm = self.k if k is None else check_k(k), check_budget(budget), check_stm(stm)
        if threshold is not None:  # the range is worked out only for a search that filters (not for build_context's)
            threshold = check_threshold(threshold, *self.retriever.score_range())
        at = self.clock() if now is None else parse_timestamp(now)
        t0 = time.perf_counter()
        plan = self.controller.plan(query, k, Filters.from_mapping(filters), stm, at)
        plan_ms = (time.perf_counter() - t0) * 1000
        result = self.retriever.retrieve(plan, user_id, at, budget, threshold)
        result.timings_ms["controller"] = plan_ms
        return result

    @tracing.context_span
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
        """Search, then pack query > STM > memories into a prompt of at most ``budget`` tokens.

        The budget is the whole prompt (headers, question, recent turns, every memory line with its date)
        as the prompt's tokenizer counts it (``tokenizer`` of ``Memory.open``: the default reader's). Without
        ``k``, Stage 2 fills what the question and the recent turns leave with the best of its candidates
        (budget-aware set); with ``k``, the best ``k`` are packed. The returned ``memories`` are what the
        prompt holds: an excerpt is a copy with ``metadata["excerpt"]`` set.
        """
        return self.explain_context(query, user_id, stm, budget, k, filters, now)[0]

    def explain_context(
        self,
        query: str,
        user_id: str,
        stm: Sequence[str] = (),
        budget: int | None = None,
        k: int | None = None,
        filters: Filters | Mapping[str, Any] | None = None,
        now: object = None,
    ) -> tuple[ComposedContext, RetrievalResult | None]:
        """``build_context`` with the retrieval behind its prompt: the Stage-1 candidates (with the ranker's
        scores), the hits packed and the per-stage milliseconds (``compose`` added). The retrieval is None
        when nothing but the question fits the budget (no search runs then)."""
        user_id, budget, stm = check_user_id(user_id), check_budget(budget), check_stm(stm)
        query = check_query(query)
        budget = self.composer.budget if budget is None else budget
        layout = self.composer.layout(query, stm, budget)  # composed once: compose() reuses it
        result: RetrievalResult | None = None
        if k is not None:
            result = self.retrieve(query, user_id, k, filters, stm, now)
        elif layout.memory_budget > 0:
            result = self.retrieve(query, user_id, None, filters, stm, now, layout.memory_budget)
        else:  # nothing but the question fits: no search, but the arguments are still checked
            Filters.from_mapping(filters)
            if now is not None:
                parse_timestamp(now)
        t0 = time.perf_counter()
        hits = result.hits if result is not None else []
        context = self.composer.compose(query, stm, [h.item for h in hits], budget, layout=layout)
        if result is not None:
            result.timings_ms["compose"] = (time.perf_counter() - t0) * 1000
        return context, result

    # -- memories addressed by the caller's key ------------------------------------------------
    def put(self, key: str, text: str, user_id: str, metadata: Mapping[str, Any] | None = None,
            timestamp: object = None) -> MemoryItem:
        """Write the memory that ``key`` names for ``user_id`` (a caller's name for it, unique per user, as a
        framework's ``put(namespace, key, value)`` has): a new one, or one that takes the place of the memory the key
        named before, in one transaction (the old one is erased as ``delete`` erases it). The text is stored as
        given, no Writer between; ``metadata`` comes back with it (``metadata["key"]`` is the key). An adapter's
        bookkeeping keys (``lightmem.validation.ADAPTER_METADATA``) are taken under that adapter's own keys only."""
        user_id, key = check_user_id(user_id), check_id(key, "key")
        meta = dict(metadata or {})
        check_metadata(meta, "field 'metadata'", key=key)
        meta = without_system_keys(meta)  # the pipeline's own keys, which add leaves out too (roles.writer)
        own = {k: v for k, v in meta.items() if is_adapter_key(k)}
        rest = {k: v for k, v in meta.items() if k not in own}
        turn = to_turns({"speaker": "user", "text": text, "metadata": rest}, timestamp)[0]
        check_turn_lengths([turn], self.max_turn_chars)
        item_id = key_id(user_id, key)
        turn = dataclasses.replace(turn, turn_id=item_id, metadata={**turn.metadata, **own, "key": key})
        draft = DraftItem(text=text, provenance=[item_id], event_time=turn.timestamp,
                          metadata={**turn.metadata, "key": key})

        def write() -> MemoryItem:
            try:
                self.store.delete(user_id, item_id, self.clock(), encode=self.embedder.encode)
            except ItemNotFoundError:
                pass
            return self._write.put(user_id, turn, draft, item_id)[0]

        return self.store.run_atomic(write)

    def get_by_key(self, key: str, user_id: str) -> MemoryItem:
        """The memory ``put`` wrote under ``key`` (``ItemNotFoundError`` when there is none)."""
        return self.get(key_id(check_user_id(user_id), check_id(key, "key")), user_id)

    def users(self) -> list[str]:
        """Every user the store holds turns or memories of."""
        return self.store.users()

    # -- item management ---------------------------------------------------------------------
    def get(self, item_id: str, user_id: str, include_archived: bool = False) -> MemoryItem:
        return self.store.get(check_user_id(user_id), check_id(item_id, "item_id"), include_archived)

    def get_all(self, user_id: str, include_archived: bool = False, limit: int | None = None, offset: int = 0,
                metadata: Mapping[str, Any] | None = None, *, text: str | None = None, time_from: object = None,
                time_to: object = None, kind: str | None = None, newest_first: bool = False) -> list[MemoryItem]:
        """The user's memories, oldest first (``newest_first``: the reverse); ``metadata``: only those whose metadata
        passes this filter (``{"field": value}`` or ``{"field": {"$gte": value}}``: ``lightmem.metadata_filter``);
        ``text``: only those whose text holds it (case-insensitive); ``time_from``/``time_to``: only those whose event
        time is within these bounds (Unix seconds or a date); ``kind``: only ``episodic`` or ``abstract`` ones."""
        conditions = None if metadata is None else metadata_filter.parse(metadata, "metadata")
        if text is not None and not isinstance(text, str):
            raise InvalidInputError(f"text must be a string, got {type(text).__name__}")
        if text:
            check_unicode(text, "text")
        if kind is not None and kind not in (ItemKind.EPISODIC.value, ItemKind.ABSTRACT.value):
            raise InvalidInputError(f"kind must be 'episodic' or 'abstract', got {shown(kind)}")
        bounds = {"time_from": None if time_from is None else parse_timestamp(time_from),
                  "time_to": None if time_to is None else parse_timestamp(time_to)}
        extra = {k: v for k, v in {"text": text or None, "kind": kind, **bounds}.items() if v is not None}
        if newest_first:
            extra["newest_first"] = True
        return self.store.list(check_user_id(user_id), include_archived, limit, offset, metadata=conditions or None, **extra)

    def update(self, item_id: str, user_id: str, text: str | None = None, keep_history: bool = False,
               **fields: Any) -> MemoryItem:
        """Change an item's text (re-embedded) or metadata.

        ``metadata`` replaces the item's, except the keys lightmem keeps there itself, which stay as they are: a
        ``put``'s ``key``, an adapter's bookkeeping and the pipeline's own (``roles.writer.SYSTEM_KEYS``: word
        scores, an abstract's ``members``...), which no caller's metadata sets, as in ``add``.

        A new text replaces the old one for good unless ``keep_history=True``: then the old text
        stays readable in ``history``. Without it, no earlier text of the item stays in its
        history (the events do), so an update can redact a memory. A new text also deletes the fact
        keys that cite the item, as a deletion does.
        """
        user_id, fields = check_user_id(user_id), check_item_fields(fields, text)
        item_id = check_id(item_id, "item_id")
        if not isinstance(keep_history, bool):
            raise InvalidInputError(f"keep_history must be True or False, got {keep_history!r}")
        if fields.get("metadata") is not None:
            # put's key, an adapter's bookkeeping (refused above) and the pipeline's own keys (SYSTEM_KEYS: word
            # scores, consolidation members...) stay as written: the caller's metadata sets them no more than add's does
            old = self.store.get(user_id, item_id, include_archived=True)
            kept = {k: v for k, v in old.metadata.items() if k == "key" or is_adapter_key(k) or k in SYSTEM_KEYS}
            fields["metadata"] = {**without_system_keys(fields["metadata"]), **kept}
        if text is not None:  # checked above
            fields.update(text=text, n_tokens=self.counter.count([text])[0])
            # The word keep scores belong to a text: a new text is scored again (or loses them without a scorer).
            old = self.store.get(user_id, item_id, include_archived=True)
            meta = dict(old.metadata if fields.get("metadata") is None else fields["metadata"])
            meta.pop("keep", None)
            scorer = self._write.word_scorer
            if scorer is not None:
                meta["keep"] = keep_codes(scorer, [text])[0]
            fields["metadata"] = meta
            if text == old.text:  # nothing to embed: the item keeps its vector, and its fact keys with it
                del fields["text"]
                return self.store.update(user_id, item_id, self.clock(), keep_history=keep_history, **fields)
            return self.store.update(user_id, item_id, self.clock(), vector=self.embedder.encode([text])[0],
                                     keep_history=keep_history, encode=self.embedder.encode, **fields)
        return self.store.update(user_id, item_id, self.clock(), keep_history=keep_history, **fields)

    def archive(self, item_id: str, user_id: str) -> MemoryItem:
        """Hide an item from search without deleting it (``restore`` brings it back)."""
        return self.store.set_archived(check_user_id(user_id), check_id(item_id, "item_id"), True, self.clock())

    def restore(self, item_id: str, user_id: str) -> MemoryItem:
        return self.store.set_archived(check_user_id(user_id), check_id(item_id, "item_id"), False, self.clock())

    def delete(self, item_id: str, user_id: str) -> dict[str, int]:
        """Erase one item: it is never returned again and its text is gone from the store.

        Removes the item (row, vector, terms), the texts of its history (the events stay), the turns
        it was written from that no other item cites, and the fact keys that cite it (other memories those
        facts keyed are re-embedded without them). Returns ``{"items": 1, "turns": n, "facts": n}``.
        """
        return self.store.delete(check_user_id(user_id), check_id(item_id, "item_id"), self.clock(),
                                 encode=self.embedder.encode)

    def delete_user(self, user_id: str) -> dict[str, int]:
        """Erase everything of a user: turns, items, history, and what the LTM learned from them.

        In one transaction: the user's LTM partition goes whole; with a shared graph
        (``LTMOptions(scope="shared")``), the nodes, edges and statements only this user supported go and
        the rest lose the user's support (their vectors are recomputed without the user's statements).
        Returns the counts removed, ``ltm_nodes``, ``ltm_edges`` and ``ltm_facts`` included.
        """
        user_id = check_user_id(user_id)
        self._write.forget(user_id)
        removed = self.store.delete_user(user_id, encode=self.embedder.encode)
        if self.ltm is not None:
            self.ltm.graph.invalidate()  # this process's views of the graph reload without the user
        return removed

    def batch(self, ops: Sequence[Mapping[str, Any]], user_id: str | None = None, atomic: bool = False) -> list[dict[str, Any]]:
        """Many writes in one call: ``ops`` is a list of ``{"op": "add", "user_id", "messages", ...}``,
        ``{"op": "update", "user_id", "item_id", "text"?, "metadata"?, ...}`` and ``{"op": "delete", "user_id",
        "item_id"}`` (each with the arguments of ``add``, ``update`` or ``delete``; ``user_id`` here is for the
        operations that name none), at most 1,000.

        Every operation is checked before the first write (a bad one raises ``InvalidInputError`` naming its index;
        nothing is written). Returns one ``{"index", "op", "status", ...}`` per operation: each commits on its own
        (``ok``, ``not_found``; a store failure stops the batch: ``failed``, then ``not_attempted``), or with
        ``atomic=True`` all of them commit together or none does (the first error is raised). ``lightmem.batch``
        says it in full."""
        return run_batch(self, plan_batch(self, ops, user_id), atomic=bool(atomic))

    def history(self, item_id: str, user_id: str) -> list[HistoryEvent]:
        return self.store.history(check_user_id(user_id), check_id(item_id, "item_id"))

    def usage(self) -> dict[str, dict[str, float]]:
        """LLM calls, tokens, latency and failures per role, from every role that uses an LLM (the offline
        consolidator's included)."""
        offline = self.ltm.consolidator if self.ltm is not None else None
        meters = {id(m): m for role in (self.controller, self.retriever.selector, self.writer, offline)
                  if (m := getattr(getattr(role, "llm", None), "meter", None)) is not None}
        out: dict[str, dict[str, float]] = {}
        for meter in meters.values():
            out.update(meter.summary())
        return out

    def stats(self) -> dict[str, dict[str, int]]:
        return self.store.counts()

    def flush_index(self, timeout: float | None = None) -> bool:
        """Wait until every memory written so far has its vector (and word scores): with background
        indexing, ``add`` returns once the turn is stored and found by its words, and the vectors
        follow. False when ``timeout`` (seconds) ran out first; True at once without background indexing."""
        return self.indexer.flush(timeout) if self.indexer is not None else True

    def index_status(self) -> dict[str, Any]:
        """The background indexer's backlog, throughput and lags (``{"mode": "sync"}`` without one)."""
        if self.indexer is None:
            return {"mode": "sync", "backlog": 0}
        return {"mode": "background", **self.indexer.status()}

    def ltm_stats(self) -> dict[str, int]:
        """Nodes, edges (active and dropped) and cycles of the LTM graph; empty without LTM."""
        return self.ltm.graph.stats() if self.ltm is not None else {}

    def close(self) -> None:
        """Embed what the background indexer still holds, stop consolidation, close the store (once: closing
        a closed Memory does nothing)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.indexer is not None:
                self.indexer.close()
        finally:
            if self.ltm is not None and self.ltm.scheduler is not None:
                self.ltm.scheduler.close()  # a running cycle commits or rolls back whole first
            self.store.close()

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def key_id(user_id: str, key: str) -> str:
    """The item id of the memory a user's ``key`` names: the same for the same user and key, and no other's."""
    return "k" + hashlib.sha256(f"{user_id}\x00{key}".encode("utf-8", "surrogatepass")).hexdigest()[:31]


# ``Memory.open`` hands its arguments to ``memory_parts``: help() and editors show them there too.
_signature = inspect.signature(memory_parts)
_tracing = inspect.Parameter("tracing", inspect.Parameter.KEYWORD_ONLY, default=False, annotation="bool")
Memory.open.__func__.__signature__ = _signature.replace(
    parameters=[inspect.Parameter("cls", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                *[p for p in _signature.parameters.values() if p.kind is not p.VAR_KEYWORD], _tracing,
                *[p for p in _signature.parameters.values() if p.kind is p.VAR_KEYWORD]],
    return_annotation="Memory")
