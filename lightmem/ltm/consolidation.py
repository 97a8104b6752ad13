"""Offline consolidation (LightMem-SLM Algorithm 3, LightMem §3.3, SimpleMem §2.2).

One cycle for one user, over an incremental batch of MTM items (its knowledge goes to the user's own
LTM partition, or to the shared graph when the operator chose ``LTMOptions(scope="shared")``):

1. select: new, retrieval-reactivated, or low-retention items under capacity pressure;
2. abstract the de-identified episodes into knowledge units (LLM or extractive);
3. sleep-time update: update queues over MTM, merge / update / ignore decisions;
4. recursive consolidation: dense clusters → abstract entries, members archived;
   (optional, ``fact_keys``) fact keys: SLM-3 writes facts about the batch's new entries, which become
   extra search keys of the entries they cite (``ltm.fact_keys``);
5. one transaction (``MemoryStore.commit_offline``): graph insert / link / merge, decay and
   drop, MTM changes, and the marks of what was consolidated. A crash anywhere leaves the last committed state, and
   the next cycle selects the same unmarked items again.

The heavy work (2-4) runs without any lock; only step 5 holds the store's lock, briefly.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from lightmem.llm.base import LLM
from lightmem.ltm import recursive, sleep
from lightmem.ltm.abstraction import Abstractor, ExtractiveAbstractor
from lightmem.ltm.deidentify import Deidentifier, strip_speaker
from lightmem.ltm.fact_keys import FactKeyer, SLMFactKeyer, keyable, plan_rekey
from lightmem.ltm.graph import CycleUpdate, KnowledgeGraph
from lightmem.ltm.recursive import ClusterSpec
from lightmem.ltm.sleep import QueueSpec
from lightmem.models.embedder import Embedder
from lightmem.stores.base import MemoryStore, OfflineChanges
from lightmem.timeutil import now as wall_clock
from lightmem.types import Filters, ItemKind, MemoryItem

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConsolidationSpec:
    """What a cycle does.

    Attributes:
        batch_size: Most MTM items per cycle (the incremental batch).
        every_n_turns: The scheduler starts a cycle for a user after this many new turns.
        pressure: Capacity share (active / capacity) that also triggers a cycle and
            puts the least retained items first.
        reactivation: Retrievals since the last consolidation that re-select an item.
        ltm: Abstract into the knowledge graph.
        sleep_update: Update queues and merge / update / ignore decisions over MTM.
        recursive: Abstract dense clusters of MTM entries.
        fact_keys: Write fact keys for the batch's new entries (off: it measured no gain, docs/results/locomo.md).
        fact_window: Entries per fact-key prompt.
        queue: Update-queue settings.
        cluster: Recursive-consolidation settings.
    """

    batch_size: int = 64
    every_n_turns: int = 12
    pressure: float = 0.9
    reactivation: int = 2
    ltm: bool = True
    sleep_update: bool = True
    recursive: bool = True
    fact_keys: bool = False
    fact_window: int = 8
    queue: QueueSpec = field(default_factory=QueueSpec)
    cluster: ClusterSpec = field(default_factory=ClusterSpec)


@dataclass
class CycleReport:
    """Counts and timings of one cycle (no user content)."""

    user_id: str
    cycle: int = 0
    selected: dict[str, int] = field(default_factory=dict)
    units: int = 0
    graph: dict[str, int] = field(default_factory=dict)
    mtm: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Consolidator:
    """Runs consolidation cycles over a store and its graph.

    Args:
        store: The MTM store (the graph lives in the same database).
        embedder: Embeds knowledge units and abstracts.
        graph: The LTM graph.
        abstractor: Episodes → knowledge units (extractive by default).
        deidentifier: Scrubs episodes before abstraction (names of the user's speakers are added per cycle).
        llm: When given, decides sleep-time updates and writes cluster abstracts.
        spec: What a cycle does.
        clock: Unix seconds (tests pass a fake).
        crash_hook: Called between the computation and the commit (tests use it to kill a cycle).
        fact_keyer: Writes the fact keys when ``spec.fact_keys`` (default: SLM-3 on ``llm``).
    """

    def __init__(self, store: MemoryStore, embedder: Embedder, graph: KnowledgeGraph, abstractor: Abstractor | None = None,
                 deidentifier: Deidentifier | None = None, llm: LLM | None = None, spec: ConsolidationSpec | None = None,
                 clock: Callable[[], float] = wall_clock, crash_hook: Callable[[str], None] | None = None,
                 fact_keyer: FactKeyer | None = None) -> None:
        self.store, self.embedder, self.graph = store, embedder, graph
        self.abstractor = abstractor or ExtractiveAbstractor()
        self.deid = deidentifier or Deidentifier()
        self.llm, self.spec, self.clock, self.crash_hook = llm, spec or ConsolidationSpec(), clock, crash_hook
        if fact_keyer is None and self.spec.fact_keys:
            if llm is None:
                raise ValueError("fact keys (consolidation.fact_keys) need an LLM runtime for SLM-3 (LTMOptions.llm) "
                                 "or a fact keyer (LTMOptions.fact_keyer)")
            fact_keyer = SLMFactKeyer(llm, self.spec.fact_window)
        self.fact_keyer = fact_keyer

    def run(self, user_id: str) -> CycleReport:
        """One cycle for one user. Returns what it did (an empty batch does nothing)."""
        sp, rep, t0 = self.spec, CycleReport(user_id), time.perf_counter()
        batch = self.store.consolidation_candidates(user_id, sp.batch_size, sp.reactivation, sp.pressure)
        for _, _, why in batch:
            rep.selected[why] = rep.selected.get(why, 0) + 1
        if not batch:
            return rep
        t1 = time.perf_counter()
        units = self._abstract(user_id, [it for _, it, _ in batch]) if sp.ltm else []
        rep.units = len(units)
        plan = self.graph.prepare(units, user_id) if units else None
        t2 = time.perf_counter()
        changes = OfflineChanges(marks=[(it.id, it.access_count) for _, it, _ in batch])
        if sp.sleep_update:
            self._sleep_update(user_id, batch, changes)
        t3 = time.perf_counter()
        if sp.recursive:
            # Entries the sleep-time update touched wait for the next cycle to be clustered.
            self._recursive(user_id, batch, changes, {x for t, by, _ in changes.supersede for x in (t, by)})
        t4 = time.perf_counter()
        if sp.fact_keys and self.fact_keyer is not None:
            archived = {m for _, _, members in changes.abstracts for m in members}  # by this cycle's clusters
            fresh = [it for _, it, why in batch if why != "reactivated" and keyable(it) and it.id not in archived]
            changes.facts = self.fact_keyer.facts(fresh) if fresh else []
            changes.rekey = plan_rekey(fresh, changes.facts, self.embedder.encode)
        t5 = time.perf_counter()
        if self.crash_hook is not None:
            self.crash_hook("before_commit")
        # One store call commits the graph and MTM changes together and refreshes the MTM
        # indexes before readers get the store's lock back.
        update = CycleUpdate(self.graph, plan, user_id, decay=sp.ltm)
        done = self.store.commit_offline(user_id, changes, self.clock(), update, {"units": rep.units},
                                         before_commit=self._in_transaction)
        rep.cycle, rep.graph, rep.mtm = done.cycle, done.graph, done.mtm
        self.graph.refresh(update.delta)  # its own lock: MTM searches need not wait for it
        t6 = time.perf_counter()
        rep.seconds = {"select": t1 - t0, "abstract": t2 - t1, "sleep_update": t3 - t2, "recursive": t4 - t3,
                       "fact_keys": t5 - t4, "commit": t6 - t5, "total": t6 - t0}
        return rep

    def _in_transaction(self) -> None:
        if self.crash_hook is not None:
            self.crash_hook("in_transaction")

    # -- steps -----------------------------------------------------------------------------------
    def _abstract(self, user_id: str, items: list[MemoryItem]) -> list:
        """Episodes → de-identified knowledge units (the user's speakers are names to scrub)."""
        speakers = set(self.store.speakers(user_id))
        deid = self.deid.with_context(names=[s for s in speakers if s.lower() not in ("user", "assistant", "system")],
                                      user_ids=[user_id])
        episodes = deid.scrub_many([strip_speaker(it.text) for it in items])
        units = [u for us in self.abstractor.abstract(episodes) for u in us]
        # The abstractor may have rephrased; scrub its statements and names once more.
        statements = deid.scrub_many([u.statement for u in units]) if units else []
        for u, s in zip(units, statements):
            u.statement = s
        return units

    def _sleep_update(self, user_id: str, batch: list, changes: OfflineChanges) -> None:
        """LightMem §3.3: update queues of the batch's entries over the user's current MTM."""
        spec = self.spec.queue
        pool: dict[int, MemoryItem] = {rid: it for rid, it, _ in batch if it.is_current}
        if not pool:
            return
        targets_rid = set(pool)
        pool = self._neighbourhood(user_id, pool, spec.k + 4)
        rids, vecs = self._vectors(user_id, pool)
        pool = {r: pool[r] for r in rids}
        targets = [i for i, r in enumerate(rids) if r in targets_rid]
        if not targets:
            return
        # rank in (event time, row id) order: a later write of the same moment counts as later
        order = np.empty(len(rids), dtype=np.int64)
        order[np.lexsort((np.asarray(rids), np.asarray([pool[r].event_time for r in rids])))] = np.arange(len(rids))
        queues = sleep.update_queues(vecs, order, targets, spec.k, spec.min_similarity)
        pairs = [(i, j, s) for i, q in queues.items() for j, s in q]
        decisions = sleep.decide([(pool[rids[i]].text, pool[rids[j]].text, s) for i, j, s in pairs], spec, self.llm)
        changes_list = sleep.resolve(queues, {(i, j): d for (i, j, _), d in zip(pairs, decisions)}, order)
        moved: dict[int, list[str]] = {}
        for ch in changes_list:  # oldest first: a chain of merges carries provenance to its end
            target, by = pool[rids[ch.target]], pool[rids[ch.by]]
            changes.supersede.append((target.id, by.id, ch.decision.value))
            if ch.decision is sleep.Decision.MERGE:
                carried = [*target.provenance, *moved.get(ch.target, [])]
                moved.setdefault(ch.by, []).extend(carried)
        for row, turns in moved.items():
            changes.provenance[pool[rids[row]].id] = list(dict.fromkeys(turns))

    def _neighbourhood(self, user_id: str, seeds: dict[int, MemoryItem], k: int) -> dict[int, MemoryItem]:
        """Seeds plus their ``k`` nearest current entries. Each read takes the store's lock
        on its own, so a search waits at most one lookup, never a whole batch."""
        pool = dict(seeds)
        for rid in list(seeds):
            with self.store.lock:
                if rid not in self.store.indexed(user_id, [rid]):
                    pool.pop(rid, None)
                    continue
                vec = self.store.vectors(user_id, [rid])[0]
                ids, _ = self.store.search_dense(user_id, vec, k, Filters())
            pool.update(self.store.fetch(user_id, [int(i) for i in ids if int(i) not in pool]))
        return pool

    def _vectors(self, user_id: str, pool: dict[int, MemoryItem]) -> tuple[list[int], np.ndarray]:
        """Row ids still indexed and their vectors (rows archived meanwhile drop out)."""
        with self.store.lock:
            rids = [r for r in pool if r in self.store.indexed(user_id, list(pool))]
            return rids, self.store.vectors(user_id, rids)

    def _recursive(self, user_id: str, batch: list, changes: OfflineChanges, busy: set[str]) -> None:
        """SimpleMem §2.2: clusters around the batch's entries become abstract entries."""
        spec = self.spec.cluster
        seeds = {rid: it for rid, it, _ in batch if it.is_current and it.id not in busy}
        if not seeds:
            return
        pool = self._neighbourhood(user_id, seeds, spec.neighbours)
        pool = {r: it for r, it in pool.items() if it.id not in busy and not it.archived}
        rids, vecs = self._vectors(user_id, pool)
        pool = {r: pool[r] for r in rids}
        seeds = {r: it for r, it in seeds.items() if r in pool}
        if len(rids) < spec.min_size:
            return
        omega = recursive.affinity(vecs, np.asarray([pool[r].event_time for r in rids]), spec.beta, spec.lam)
        seed_rows = [i for i, r in enumerate(rids) if r in seeds]
        clusters = recursive.dense_clusters(omega, seed_rows, spec.tau, spec.min_size, spec.max_size)
        if not clusters:
            return
        members = [[pool[rids[i]] for i in sorted(c, key=lambda i: (pool[rids[i]].event_time, rids[i]))] for c in clusters]
        texts = recursive.synthesize([[m.text for m in ms] for ms in members], spec.max_words, self.llm)
        kept = [(ms, t) for ms, t in zip(members, texts) if t]
        if not kept:
            return
        vecs_abs = self.embedder.encode([t for _, t in kept])
        counts = self.embedder.token_counter().count([t for _, t in kept])
        now = self.clock()
        for (ms, text), vec, n in zip(kept, vecs_abs, counts):
            prov = list(dict.fromkeys(p for m in ms for p in m.provenance))
            ents = list(dict.fromkeys(e for m in ms for e in m.entities))
            topics = [m.topic for m in ms if m.topic]
            item = MemoryItem(
                id=self.store.new_id(), user_id=user_id, text=text, provenance=prov, created_at=now,
                event_time=max(m.event_time for m in ms), last_access=now, topic=max(set(topics), key=topics.count) if topics else None,
                entities=ents, kind=ItemKind.ABSTRACT, valid_from=min(m.event_time for m in ms), n_tokens=int(n),
                metadata={"members": [m.id for m in ms]},
            )
            changes.abstracts.append((item, np.asarray(vec, dtype=np.float32), [m.id for m in ms]))
