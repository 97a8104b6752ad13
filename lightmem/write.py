"""The write pipeline: turns → (sensory stage) → Writer → embedded items → store, then maintenance and LTM.

``Memory.add_turns`` and ``Memory.flush`` delegate here. One call commits its turns and items in
one store transaction; the sensory stage's buffers roll back to the store's state when it fails.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from lightmem.indexer import BackgroundIndexer
from lightmem.language.exchange import restates
from lightmem.ltm import LTMRuntime
from lightmem.models.embedder import Embedder
from lightmem.models.tokens import TokenCounter
from lightmem.models.word_scorer import WordScorer, keep_codes
from lightmem.roles.maintenance import Maintainer
from lightmem.roles.writer import DraftItem, Writer, write_segments
from lightmem.sensory.pipeline import SensoryStage
from lightmem.stores.base import MemoryStore
from lightmem.types import Filters, MemoryItem, Turn
from lightmem.write_policy import WritePolicy


class WritePipeline:
    """Writes a user's turns into memory items.

    Args:
        store: Where turns and items are committed.
        embedder: Encodes the items' texts.
        counter: Counts the items' tokens.
        writer: Turns (or write-path segments) → draft items.
        clock: The time stamped on items (Unix seconds).
        sensory_stage: Sensory stages and STM buffer before the Writer; None: the Writer gets raw turns.
        maintainer: Online maintenance after each write (merges, supersessions); None: none.
        ltm: The LTM runtime whose scheduler is told of new turns; None: MTM only.
        word_scorer: Scores each item's words for keeping (the trained word scorer): stored with the item as
            ``metadata["keep"]``, so that Stage 2 can squeeze its excerpts; None: items carry no scores.
        indexer: Embeds (and scores) the items after the write returns (``lightmem.indexer``); None: the
            caller's thread does it before the write. Online maintenance needs the vectors at once, so a
            pipeline with a ``maintainer`` embeds on the caller's thread even when there is an indexer.
    """

    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder,
        counter: TokenCounter,
        writer: Writer,
        clock: Callable[[], float],
        sensory_stage: SensoryStage | None = None,
        maintainer: Maintainer | None = None,
        ltm: LTMRuntime | None = None,
        word_scorer: WordScorer | None = None,
        indexer: BackgroundIndexer | None = None,
    ) -> None:
        self.word_scorer, self.indexer = word_scorer, indexer
        self.store, self.embedder, self.counter = store, embedder, counter
        self.writer, self.clock, self.sensory_stage, self.maintainer, self.ltm = writer, clock, sensory_stage, maintainer, ltm

    def add_turns(self, user_id: str, turns: Sequence[Turn], context: Sequence[str] = (),
                  policy: WritePolicy | None = None) -> list[MemoryItem]:
        """Write ``turns`` not stored yet (through the sensory stage when there is one); returns the items written.
        With a ``policy`` (``lightmem.write_policy``), only the turns it keeps become memories; the others are stored
        as turns alone, and a kept turn that restates a stored memory is cited by it instead (one transaction)."""
        known = self.store.known_turns(user_id, [t.turn_id for t in turns]) if turns else set()
        turns = [t for t in turns if t.turn_id not in known]  # a resumed ingest skips what is stored
        if policy is not None and turns:
            return self._under_policy(user_id, turns, context, policy)
        if self.sensory_stage is None:
            return self._commit(user_id, turns, self.writer.write(turns, context) if turns else [])
        return self._through_sensory_stage(user_id, turns, context, drain=False)

    def _under_policy(self, user_id: str, turns: Sequence[Turn], context: Sequence[str],
                      policy: WritePolicy) -> list[MemoryItem]:
        """``add_turns`` under ``policy``. The judging and the Writer (which may call a model) run before the
        transaction; inside it, only the look-up of stored copies, the writes and the links."""
        verdicts = policy.judge(turns, context)
        if len(verdicts) != len(turns):
            raise ValueError(f"write policy {policy.name!r} judged {len(verdicts)} of {len(turns)} turns")
        kept = [t for t, v in zip(turns, verdicts) if v.keep]
        fresh: list[Turn] = []
        first_of: dict[str, str] = {}  # a turn that repeats an earlier one of this call -> that one
        for t in kept:
            same = next((f for f in fresh if restates(t.text, f.text)), None) if policy.dedupe else None
            if same is None:
                fresh.append(t)
            else:
                first_of[t.turn_id] = same.turn_id
        drafts = self.writer.write(fresh, context) if fresh and self.sensory_stage is None else []
        return self.store.run_atomic(lambda: self._write_judged(user_id, turns, fresh, first_of, drafts, context, policy))

    def _write_judged(self, user_id: str, turns: Sequence[Turn], fresh: Sequence[Turn], first_of: dict[str, str],
                      drafts: Sequence[DraftItem], context: Sequence[str], policy: WritePolicy) -> list[MemoryItem]:
        links: dict[str, list[str]] = {}  # stored item id -> the turns that restate it
        if policy.dedupe:
            for t in fresh:
                copy = self._stored_copy(user_id, t.text)
                if copy is not None:
                    links.setdefault(copy, []).append(t.turn_id)
        linked = {tid for ids in links.values() for tid in ids}
        repeats: dict[str, list[str]] = {}
        for dup, first in first_of.items():
            repeats.setdefault(first, []).append(dup)
        for ids in links.values():  # a repeat of a turn that restates a stored memory cites that memory too
            ids.extend(d for tid in list(ids) for d in repeats.get(tid, []))
        writing = [t for t in fresh if t.turn_id not in linked]
        drafts = [replace(d, provenance=[*d.provenance, *(r for p in d.provenance for r in repeats.get(p, []))])
                  for d in drafts if not set(d.provenance) <= linked]
        ids = {t.turn_id for t in writing}
        written = self._commit(user_id, [t for t in turns if t.turn_id not in ids], [])  # the record of the others
        if writing:
            if self.sensory_stage is None:
                written += self._commit(user_id, writing, drafts)
            else:
                written += self._through_sensory_stage(user_id, writing, context, drain=False)
        for item_id, turn_ids in links.items():
            item = self.store.get(user_id, item_id)
            self.store.update(user_id, item_id, self.clock(), provenance=[*item.provenance, *turn_ids])
        return written

    def _stored_copy(self, user_id: str, text: str) -> str | None:
        """The id of an active memory of the user, written from turns, that ``text`` restates
        (``language.exchange.restates``), found among the best lexical matches; None when there is none."""
        rids, _, _ = self.store.search_lexical(user_id, text, 5, Filters())
        if len(rids) == 0:
            return None
        items = self.store.fetch(user_id, [int(r) for r in rids])
        for rid in rids:
            item = items.get(int(rid))
            # a memory put under a caller's key (a document an adapter's store holds) is the caller's to replace or
            # delete: a turn is never folded into it
            if item is not None and "key" not in item.metadata and restates(text, item.text.partition(": ")[2] or item.text):
                return item.id
        return None

    def flush(self, user_id: str, context: Sequence[str] = ()) -> list[MemoryItem]:
        """Write everything the sensory stage still buffers for ``user_id``."""
        if self.sensory_stage is None:
            return []
        return self._through_sensory_stage(user_id, [], context, drain=True)

    def forget(self, user_id: str) -> None:
        """Drop the sensory stage's buffers of a user (their turns are being deleted)."""
        if self.sensory_stage is not None:
            self.sensory_stage.forget(user_id)

    def _through_sensory_stage(self, user_id: str, turns: Sequence[Turn], context: Sequence[str], drain: bool) -> list[MemoryItem]:
        """Push ``turns`` through the sensory stage and write the segments it flushes (``drain``: all it buffers);
        on any error its buffers go back to what the store holds."""
        stage = self.sensory_stage
        assert stage is not None
        # After a restart, the buffers start from the turns the store marks pending.
        restored = [] if stage.has_state(user_id) else self.store.pending_turns(user_id)
        if not turns and not restored and not (drain and stage.pending(user_id)):
            return []
        snap = stage.snapshot(user_id)
        try:
            flushed = stage.push(user_id, [*restored, *turns])
            if drain:
                more = stage.drain(user_id)
                flushed.segments += more.segments
                flushed.dropped += more.dropped
            drafts = write_segments(self.writer, flushed.segments, context) if flushed.segments else []
            return self._commit(user_id, turns, drafts, pending=[t.turn_id for t in stage.pending(user_id)])
        except BaseException:
            stage.restore(user_id, snap)  # buffers go back to what the store holds
            raise

    def put(self, user_id: str, turn: Turn, draft: DraftItem, item_id: str) -> list[MemoryItem]:
        """Store one turn and one memory written as given (no Writer, no sensory stage) under ``item_id``."""
        return self._commit(user_id, [turn], [draft], ids=[item_id])

    def _commit(self, user_id: str, turns: Sequence[Turn], drafts: Sequence[DraftItem],
                pending: Sequence[str] | None = None, ids: Sequence[str] | None = None) -> list[MemoryItem]:
        """Embed the drafts and store them with the turns in one transaction (``ids``: the drafts' item ids,
        new ones when not given)."""
        if not turns and not drafts and pending is None:
            return []
        texts = [d.text for d in drafts]
        deferred = self.indexer is not None and self.maintainer is None
        if deferred:
            vecs = None
        else:
            vecs = self.embedder.encode(texts) if texts else np.zeros((0, self.embedder.dim), dtype=np.float32)
        n_tokens = self.counter.count(texts) if texts else []
        metadata = [dict(d.metadata) for d in drafts]
        if self.word_scorer is not None and not deferred:
            for meta, code in zip(metadata, keep_codes(self.word_scorer, texts)):
                meta["keep"] = code
        at = self.clock()
        items = [
            MemoryItem(
                id=ids[j] if ids is not None else self.store.new_id(), user_id=user_id, text=d.text, provenance=list(d.provenance), created_at=at,
                event_time=d.event_time, last_access=at, topic=d.topic, entities=list(d.entities), kind=d.kind,
                valid_from=d.event_time, n_tokens=n, metadata=meta,
            )
            for j, (d, n, meta) in enumerate(zip(drafts, n_tokens, metadata))
        ]
        written = self.store.write(user_id, turns, items, vecs, at, pending=pending)
        if deferred and written:
            assert self.indexer is not None
            self.indexer.submit(user_id, [(it.id, it.text) for it in written])
        if self.maintainer is not None and written and vecs is not None:
            row = {it.id: i for i, it in enumerate(items)}
            self.maintainer.maintain(self.store, self.clock, user_id, written, vecs[[row[w.id] for w in written]])
        if self.ltm is not None and self.ltm.scheduler is not None and turns:
            spec = self.ltm.consolidator.spec
            pressure = self.store.size(user_id) >= spec.pressure * self.store.capacity
            self.ltm.scheduler.notify(user_id, len(turns), pressure)  # never waits for a cycle
        return written
