"""The two-stage retrieval engine (paper §3.4, Algorithm 1).

Stage 1 retrieves ⌈cK/n⌉ candidates per hypothetical query by hybrid dense + BM25
scoring under the plan's filters, unions them (keeping each item's best score) and
truncates to cK (c = ``candidate_factor``: 2 in the paper, 5 by default here). Stage 2
hands the candidates to the Selector, which keeps ≤ K, or with a token budget packs
its ranking of all of them.
"""
from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lightmem.models.embedder import Embedder
from lightmem.models.tokens import CachedCount
from lightmem.retrieval import scoring
from lightmem.retrieval.anchoring import dated, wants_dates
from lightmem.retrieval.composer import ContextComposer
from lightmem.retrieval.diversity import spread_sessions
from lightmem.retrieval.excerpts import coded_excerpt, pack_whole_then_excerpts, query_terms, realign_keep
from lightmem.retrieval.scoring import Fusion
from lightmem.retrieval.spec import PackingSpec, RoutingSpec, Stage1Spec
from lightmem.retrieval.stage2 import Selector
from lightmem.stores.base import SearchIndex
from lightmem.types import Hit, ItemKind, MemoryItem, RetrievalPlan, Route

# Settings that only reorder or pack what Stage 2 returns: Stage 1's candidates do not depend on them.
PACKING_SETTINGS = ("whole_share", "excerpt_rate", "anchor_dates", "session_spread")


@dataclass
class RetrievalResult:
    """Final hits, the Stage-1 candidates they came from, the plan, and per-stage milliseconds."""

    hits: list[Hit]
    candidates: list[Hit]
    timings_ms: dict[str, float] = field(default_factory=dict)
    plan: RetrievalPlan | None = None


def dated_item(item: MemoryItem, count: Callable[[str], int]) -> MemoryItem:
    """``item`` with its relative dates resolved from its event time (a copy, ``n_tokens`` by ``count``, its word
    scores realigned, ``metadata["dated"]`` set), or ``item`` itself when nothing changes. Only an episode is dated:
    an abstract's event time is its latest member's, a knowledge node has none. The engine dates a time question's
    memories with it, and the ranker's trainer its candidates."""
    if item.kind is not ItemKind.EPISODIC:
        return item
    text = dated(item.text, item.event_time)
    if text == item.text:
        return item
    meta = {**item.metadata, "dated": True}
    if meta.get("keep"):  # the written-in dates get no score: squeezing keeps them
        meta["keep"] = realign_keep(item.text, text, meta["keep"])
    return dataclasses.replace(item, text=text, n_tokens=count(text), metadata=meta)


def pack_items(composer: ContextComposer, items: Sequence[MemoryItem], queries: Sequence[str], budget: int,
               whole_share: float, excerpt_rate: float, count: Callable[[str], int]) -> list[tuple[int, MemoryItem | None]]:
    """Which of ``items`` (rank order) the composer's prompt holds within ``budget`` tokens of memory lines: whole
    memories in the first ``whole_share`` of it, then one-sentence excerpts chosen by the words of ``queries``
    (squeezed to ``excerpt_rate`` of their words by a stored ``metadata["keep"]``). Returns ``(index, excerpt)`` in
    rank order, ``excerpt`` the cut copy of the item (``metadata["excerpt"]`` set, ``n_tokens`` by ``count``) or None
    for a whole memory. The engine packs with it, and the ranker's trainer scores its orders with it
    (``training.ranker.ServedPacking``)."""
    whole_budget = int(round(whole_share * budget))
    if whole_budget >= budget:
        return [(i, None) for i in composer.pack(items, budget)]
    terms = query_terms(queries)  # only where excerpts are cut
    whole = [composer.line_cost(m) for m in items]  # each with its own date: an upper bound
    cuts: dict[int, MemoryItem] = {}  # memory index -> its excerpt copy

    def excerpt_tokens(i: int) -> int | None:
        item = items[i]
        text = coded_excerpt(item.text, terms, item.metadata.get("keep"), excerpt_rate)
        if text is None:
            return None
        cuts[i] = dataclasses.replace(item, text=text, n_tokens=count(text), metadata={**item.metadata, "excerpt": True})
        return composer.line_cost(cuts[i])

    return [(i, cuts[i] if is_excerpt else None)
            for i, is_excerpt in pack_whole_then_excerpts(whole, excerpt_tokens, budget, whole_budget)]


class TwoStageRetriever:
    """Stage 1 hybrid retrieval over MTM, then Stage 2 selection.

    Args:
        store: The MTM store (the engine reads it through its ``SearchIndex`` part).
        embedder: Encodes hypothetical queries.
        selector: Stage-2 selector.
        stage1: How Stage 1 finds candidates (fusion, weights, pool size, the second hop).
        packing: How a token budget is packed from Stage 2's order (whole share, excerpts, dates).
        routing: How queries reach the tiers when ``ltm`` is set.
        ltm: The LTM knowledge graph (None: MTM only).
        composer: The prompt's composer: a token budget is packed as it packs memory lines (their dates,
            newlines and the prompt's tokenizer counted), so ``build_context`` holds all that Stage 2 returns.
            None: a composer counting with the embedder's tokenizer.

    Every setting is validated in a spec (``lightmem/retrieval/spec.py``, where each is described); the engine
    keeps its values as attributes of the same names, the one place it reads them from.
    """

    def __init__(
        self,
        store: SearchIndex,
        embedder: Embedder,
        selector: Selector,
        stage1: Stage1Spec | None = None,
        packing: PackingSpec | None = None,
        routing: RoutingSpec | None = None,
        ltm: Any = None,
        composer: ContextComposer | None = None,
    ) -> None:
        stage1, packing, routing = stage1 or Stage1Spec(), packing or PackingSpec(), routing or RoutingSpec()
        self.store, self.embedder, self.selector = store, embedder, selector
        self.fusion = Fusion(stage1.fusion)
        self.w_dense, self.w_lexical, self.w_meta, self.w_recency = stage1.w_dense, stage1.w_lexical, stage1.w_meta, stage1.w_recency
        self.rrf_k, self.depth_factor, self.candidate_factor = stage1.rrf_k, stage1.depth_factor, stage1.candidate_factor
        self.half_life = stage1.recency_half_life_days
        self.hop_seeds, self.hop_extra = stage1.hop_seeds, stage1.hop_extra
        self.ltm, self.routing, self.cross_share, self.ltm_hops = ltm, routing.routing, routing.cross_share, routing.ltm_hops
        self.fill_budget, self.session_spread = packing.fill_budget, packing.session_spread
        self.whole_share, self.excerpt_rate = packing.whole_share, packing.excerpt_rate
        self.anchor_dates = packing.anchor_dates
        self._count = CachedCount(embedder.token_counter)  # tokens of excerpts and dated copies
        self.composer = composer or ContextComposer(embedder.token_counter())

    def retrieve(self, plan: RetrievalPlan, user_id: str, now: float, budget: int | None = None,
                 threshold: float | None = None) -> RetrievalResult:
        """Stage 1, then Stage 2: the best ``plan.k`` hits, or with ``budget`` the set Stage 2 packs
        within ``budget`` prompt tokens of memory lines (its ranking of all candidates, greedily packed:
        K then only sizes the candidate pool, so short memories leave room for more of them).

        With ``threshold``, only candidates whose score (Stage 1's, ``Hit.score``) is above it can be hits: the best
        ``plan.k`` of them in Stage 2's order, which ranks the whole pool as it was trained to (its features
        compare a candidate with the others). The result's ``candidates`` are the whole pool, filtered or not."""
        t0 = time.perf_counter()
        texts = [hq.text for hq in plan.hqs]
        qvecs = self.embedder.encode(texts, is_query=True)
        t1 = time.perf_counter()
        ranked = self.stage1(plan, user_id, qvecs, now)
        candidates = [hit for _, hit in ranked]
        t2 = time.perf_counter()
        fill = budget is not None and self.fill_budget
        if threshold is not None and any(h.score <= threshold for h in candidates):
            # Every selector ranks the whole pool anyway: its first k of all are its first k when asked for k.
            hits = [h for h in self.selector.select(plan, candidates, len(candidates)) if h.score > threshold]
        else:
            hits = self.selector.select(plan, candidates, len(candidates) if fill else plan.k)
        hits = hits[: None if fill else plan.k]
        if wants_dates(self.anchor_dates, plan.query):
            hits = [self._dated(h) for h in hits]
        if budget is not None:
            if self.session_spread:
                sessions = [h.item.metadata.get("session_id") for h in hits]
                hits = [hits[i] for i in spread_sessions(sessions, self.session_spread)]
            hits = self.pack(plan, hits, budget)
        t3 = time.perf_counter()
        self.store.touch(user_id, [h.row for h in hits if h.row is not None], now)
        ms = lambda a, b: (b - a) * 1000.0  # noqa: E731
        return RetrievalResult(hits, candidates, {"embed": ms(t0, t1), "stage1": ms(t1, t2), "stage2": ms(t2, t3)}, plan)

    def score_range(self) -> tuple[float, float]:
        """The lowest and highest score a hit can have under these settings (a search's threshold must be within).

        Weighted fusion: ``w_dense`` × a cosine (-1 to 1) plus ``w_lexical`` × BM25 normalised by the best candidate's
        (0 to 1), ``w_meta`` × the metadata match (0 or 1) and ``w_recency`` × the recency decay (0 to 1): -1 to 1.6 with
        the default weights. RRF: each ranking's weight / (``rrf_k`` + rank), ranks from 1, and the metadata match's
        weight / (``rrf_k`` + 1). An LTM node scores its cosine plus ``w_lexical`` × its normalised BM25 (a neighbour:
        its seed's score × the edge's confidence × 0.5 a hop, nearer 0)."""
        def span(weights: Sequence[float], cos_weight: float = 0.0, scale: float = 1.0) -> tuple[float, float]:
            low = -abs(cos_weight) + sum(min(0.0, w) for w in weights)
            high = abs(cos_weight) + sum(max(0.0, w) for w in weights)
            return low * scale, high * scale

        if self.fusion is Fusion.RRF:
            if self.rrf_k + 1 <= 0:  # ranks near -rrf_k: no bound
                return -math.inf, math.inf
            low, high = span([self.w_dense, self.w_lexical, self.w_meta], scale=1.0 / (self.rrf_k + 1))
        else:
            low, high = span([self.w_lexical, self.w_meta, self.w_recency], self.w_dense)
        if self.ltm is not None and self.routing != "mtm_only":
            ltm_low, ltm_high = span([self.w_lexical], 1.0)
            low, high = min(low, ltm_low), max(high, ltm_high)
        return low, high

    def pack(self, plan: RetrievalPlan, hits: list[Hit], budget: int) -> list[Hit]:
        """The ranked ``hits`` packed within ``budget`` prompt tokens (as the composer packs): whole memories
        in the first ``whole_share`` of it, then excerpts (an excerpt hit's item is a copy whose text is one
        sentence of the memory, with ``metadata["excerpt"]`` set; its id and provenance are the memory's)."""
        queries = [plan.query, *(hq.text for hq in plan.hqs)]
        packed = pack_items(self.composer, [h.item for h in hits], queries, budget, self.whole_share, self.excerpt_rate,
                            self._count)
        return [hits[i] if cut is None else dataclasses.replace(hits[i], item=cut) for i, cut in packed]

    def _dated(self, hit: Hit) -> Hit:
        """``hit`` with its memory's relative dates resolved (``dated_item``), or itself without any."""
        item = dated_item(hit.item, self._count)
        return hit if item is hit.item else dataclasses.replace(hit, item=item)

    def stage1(self, plan: RetrievalPlan, user_id: str, qvecs: np.ndarray, now: float) -> list[tuple[Any, Hit]]:
        """Per-HQ hybrid retrieval with quota ⌈cK/n⌉, union keeping the best score, top cK.

        Returns (key, hit) pairs, best first: the key is the store's row id for an MTM item
        and ``("ltm", node id)`` for an LTM node.
        """
        budget = self.candidate_factor * plan.k
        default_quota = math.ceil(budget / len(plan.hqs))
        best: dict[Any, Hit] = {}

        def keep(pairs: list[tuple[Any, Hit]]) -> None:
            for key, hit in pairs:
                if key not in best or hit.score > best[key].score:
                    best[key] = hit

        for hq, qvec in zip(plan.hqs, qvecs):
            quota = hq.quota or default_quota
            mtm_q, ltm_q = self._quotas(hq.route, quota, plan)
            if mtm_q:
                keep(self._hybrid(hq.text, qvec, mtm_q, plan, user_id, now))
            if ltm_q:
                keep(self._ltm(hq.text, qvec, ltm_q, user_id))
        first = sorted(best.items(), key=lambda kv: -kv[1].score)[:budget]
        if self.hop_seeds and self.hop_extra and first:
            first += self._second_hop(plan, user_id, qvecs[0], first, now)
        return first

    def _second_hop(self, plan: RetrievalPlan, user_id: str, qvec: np.ndarray, first: list[tuple[Any, Hit]],
                    now: float) -> list[tuple[Any, Hit]]:
        """Memories found by searching the query together with each of the best first-hop memories, not
        among ``first``: the best ``hop_extra`` of them, each kept at the rank its seed's search gave it."""
        seeds = [(key, hit) for key, hit in first if not isinstance(key, tuple)][: self.hop_seeds]
        if not seeds:
            return []
        have = {key for key, _ in first}
        vecs = self.store.vectors(user_id, [key for key, _ in seeds])
        found: dict[Any, tuple[int, float]] = {}  # row → (best rank in a seed's search, its fused score there)
        quota = max(1, math.ceil(self.hop_extra / len(seeds))) + len(have)
        for (_, seed), vec in zip(seeds, vecs):
            q = qvec + vec
            q = q / max(float(np.linalg.norm(q)), 1e-12)
            with self.store.lock:
                d_ids, l_ids, bm25_of = self._search(f"{plan.query} {seed.item.text}", q, quota * self.depth_factor,
                                                     plan, user_id)
                union = list(dict.fromkeys([*d_ids, *l_ids]))
                if not union:
                    continue
                fused, _ = self._fuse(q, union, d_ids, l_ids, bm25_of, plan, user_id, now)
            for rank, i in enumerate(np.argsort(-fused, kind="stable")[:quota]):
                key = union[i]
                if key not in have and (key not in found or rank < found[key][0]):
                    found[key] = (rank, float(fused[i]))
        ordered = [key for key, _ in sorted(found.items(), key=lambda kv: (kv[1][0], -kv[1][1]))[: self.hop_extra]]
        if not ordered:
            return []
        # Scored against the question itself, as Stage 1 scores its own candidates: Stage 2 compares like with
        # like. BM25 is normalised as among the first hop's candidates (their max, recovered from their scores).
        bm_max = max((h.scores["bm25"] / h.scores["bm25_norm"] for _, h in first
                      if h.scores.get("bm25_norm", 0.0) > 0), default=0.0)
        text = plan.hqs[0].text
        with self.store.lock:
            _, _, bm25_of = self._search(text, qvec, 0, plan, user_id)
            fused, signals = self._fuse(qvec, ordered, [], [], bm25_of, plan, user_id, now, bm_max=bm_max)
            return self._hits(text, user_id, ordered, np.arange(len(ordered)), fused, signals)

    def _quotas(self, route: Route, quota: int, plan: RetrievalPlan) -> tuple[int, int]:
        """(MTM quota, LTM quota) of one HQ under the routing policy."""
        f = plan.filters
        ltm_ok = self.ltm is not None and f.time_from is None and f.time_to is None and (
            not f.kinds or ItemKind.KNOWLEDGE in f.kinds)
        if not ltm_ok or self.routing == "mtm_only":
            return quota, 0
        if self.routing == "ltm_only":
            return 0, quota
        cross = math.ceil(quota * self.cross_share) if self.routing == "concurrent" else 0
        return (quota, cross) if route is Route.MTM else (cross, quota)

    def _ltm(self, text: str, qvec: np.ndarray, quota: int, user_id: str) -> list[tuple[Any, Hit]]:
        """LTM nodes for one HQ, from the graph ``user_id`` may read: hybrid seeds expanded along edges, as
        knowledge hits."""
        out = []
        for node, score, rendered in self.ltm.search(qvec, text, quota, self.ltm_hops, self.w_lexical, user_id=user_id):
            item = MemoryItem(
                id=f"ltm:{node.id}", user_id="", text=rendered, provenance=[], created_at=node.first_seen,
                event_time=node.last_seen, last_access=node.last_seen, kind=ItemKind.KNOWLEDGE, topic=node.text,
                metadata={"ltm_node": node.id, "confidence": node.confidence, "evidence": node.evidence},
            )
            out.append((("ltm", node.id), Hit(item=item, scores={"ltm": score, "stage1": score}, score=score, hq=text)))
        return out

    def _hybrid(self, text: str, qvec: np.ndarray, quota: int, plan: RetrievalPlan, user_id: str, now: float) -> list[tuple[int, Hit]]:
        # One consistent view of the indexes: a consolidation commit in between could
        # archive a row the dense search returned.
        with self.store.lock:
            d_ids, l_ids, bm25_of = self._search(text, qvec, quota * self.depth_factor, plan, user_id)
            union = list(dict.fromkeys([*d_ids, *l_ids]))
            if not union:
                return []
            fused, signals = self._fuse(qvec, union, d_ids, l_ids, bm25_of, plan, user_id, now)
            return self._hits(text, user_id, union, np.argsort(-fused, kind="stable")[:quota], fused, signals)

    def _search(self, text: str, qvec: np.ndarray, depth: int, plan: RetrievalPlan,
                user_id: str) -> tuple[list[int], list[int], Callable[[Sequence[int]], np.ndarray]]:
        """The dense and BM25 top-``depth`` row ids of one query, and its BM25 of any rows (call holding
        the store's lock). A signal with weight 0 cannot move a candidate: its search is not paid for."""
        # A metadata filter's rows are listed once for both searches (a query over the user's rows).
        rids = {"rids": self.store.metadata_rows(user_id, plan.filters)} if plan.filters.metadata else {}
        d_ids = self.store.search_dense(user_id, qvec, depth, plan.filters, **rids)[0].tolist() \
            if self.w_dense and depth else []
        l_ids, _, bm25_of = self.store.search_lexical(user_id, text, depth if self.w_lexical else 0, plan.filters, **rids)
        return d_ids, l_ids.tolist(), bm25_of

    def _fuse(self, qvec: np.ndarray, rows: list[int], d_ids: list[int], l_ids: list[int],
              bm25_of: Callable[[Sequence[int]], np.ndarray], plan: RetrievalPlan, user_id: str, now: float,
              bm_max: float | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Stage 1's fused score of each of ``rows`` and the signals behind it (call holding the store's
        lock). ``d_ids``/``l_ids`` are the ranked lists RRF fuses; BM25 is normalised by its max over
        ``rows``, or by ``bm_max`` for rows scored apart from the candidates they join."""
        cos = self.store.cosine(user_id, qvec, rows)
        bm = bm25_of(rows)
        if bm_max is None:
            bm_norm = scoring.normalize_max(bm)
        else:
            bm_norm = np.minimum(bm / bm_max, 1.0) if bm_max > 0 else np.zeros_like(bm)
        event_times, tags_of = self.store.signals(user_id, rows)
        tags = plan.intent.get("tags")
        meta = scoring.metadata_match(tags_of, set(tags) if tags else None)
        window = plan.intent.get("time_window")
        if window:  # a soft time constraint from the controller counts as a metadata match
            meta = np.maximum(meta, scoring.in_window(event_times, window[0], window[1]))
        if self.fusion is Fusion.RRF:
            fused_map = scoring.reciprocal_rank_fusion([d_ids, l_ids], self.rrf_k, [self.w_dense, self.w_lexical])
            fused = np.asarray([fused_map.get(r, 0.0) for r in rows]) + self.w_meta * meta / (self.rrf_k + 1)
        else:
            rec = scoring.recency_decay(event_times, now, self.half_life)
            fused = scoring.weighted_fusion(cos, bm_norm, meta, rec, self.w_dense, self.w_lexical, self.w_meta, self.w_recency)
        return fused, {"dense": cos, "bm25": bm, "bm25_norm": bm_norm, "meta": meta}

    def _hits(self, text: str, user_id: str, rows: list[int], order: np.ndarray, fused: np.ndarray,
              signals: dict[str, np.ndarray]) -> list[tuple[int, Hit]]:
        """Hits of ``rows[i]`` for i in ``order``; only these rows are read from the store, scoped to the user."""
        items = self.store.fetch(user_id, [rows[i] for i in order])
        out = []
        for i in order:
            rid = rows[i]
            if rid not in items:  # isolation: a row of anyone else is never returned
                continue
            scores = {name: float(v[i]) for name, v in signals.items()} | {"stage1": float(fused[i])}
            out.append((rid, Hit(item=items[rid], scores=scores, score=float(fused[i]), hq=text, row=int(rid))))
        return out
