"""The two-stage engine's contract: quotas per HQ, union of ≤ 2K candidates, Stage 2 keeps ≤ K."""
from __future__ import annotations

from collections.abc import Sequence

import pytest

from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.types import Filters, Hit, HypotheticalQuery, RetrievalPlan, Route

TOPICS = ["tennis", "violin", "sourdough", "marathon", "python"]


class MultiHQController:
    """A controller that asks one HQ per topic word of the query."""

    def plan(self, query: str, k: int, filters: Filters, stm: Sequence[str] = (), now: float | None = None) -> RetrievalPlan:
        hqs = tuple(HypotheticalQuery(w, Route.MTM) for w in query.split())
        return RetrievalPlan(query=query, hqs=hqs, filters=filters, k=k)


class ReverseSelector:
    """Keeps the K *worst* Stage-1 candidates, to prove Stage 2 decides the final set."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def select(self, plan: RetrievalPlan, candidates: Sequence[Hit], k: int) -> list[Hit]:
        self.seen.append(len(candidates))
        return sorted(candidates, key=lambda h: h.score)[:k]


@pytest.fixture
def topical(memory):
    for t in TOPICS:
        memory.add([f"note {i} about {t} practice" for i in range(10)], user_id="u", timestamp=1_600_000_000)
    memory.flush_index()
    return memory


def test_each_hq_gets_its_quota_and_the_union_is_at_most_2k(topical):
    topical.controller = MultiHQController()
    topical.retriever.candidate_factor = 2  # the paper's 2K (the default is 5K)
    result = topical.retrieve("tennis violin sourdough", "u", k=4)
    # ⌈2K/n⌉ = ⌈8/3⌉ = 3 per HQ, 9 in the union, truncated to 2K = 8
    assert len(result.candidates) == 8
    assert len({h.item.id for h in result.candidates}) == 8  # deduplicated
    per_topic = {t: sum(t in h.item.text for h in result.candidates) for t in ("tennis", "violin", "sourdough")}
    assert all(n >= 2 for n in per_topic.values()), per_topic
    assert len(result.hits) == 4 and {h.item.id for h in result.hits} <= {h.item.id for h in result.candidates}
    assert set(result.timings_ms) == {"controller", "embed", "stage1", "stage2"}


def test_duplicate_hqs_do_not_duplicate_candidates(topical):
    topical.controller = MultiHQController()
    result = topical.retrieve("tennis tennis", "u", k=3)
    ids = [h.item.id for h in result.candidates]
    assert len(ids) == len(set(ids)) <= 3 * topical.retriever.candidate_factor  # at most cK, each once


def test_stage2_selector_decides_the_final_set(topical):
    sel = ReverseSelector()
    topical.retriever.selector = sel
    result = topical.retrieve("marathon practice", "u", k=3)
    assert sel.seen == [15]  # 5K candidates by default
    worst = sorted(result.candidates, key=lambda h: h.score)[:3]
    assert [h.item.id for h in result.hits] == [h.item.id for h in worst]


def test_hits_carry_every_signal_and_update_access_stats(topical):
    hit = topical.search("violin", "u", k=1)[0]
    assert {"dense", "bm25", "bm25_norm", "meta", "stage1"} <= set(hit.scores)
    assert hit.scores["bm25"] > 0 and hit.score == hit.scores["stage1"]
    topical.store.flush()
    assert topical.get(hit.item.id, "u").access_count == 1


def test_a_budget_is_filled_from_all_candidates_in_stage2_order(topical):
    sel = ReverseSelector()
    topical.retriever.selector = sel
    topical.retriever.excerpt_rate = 1.0  # whole memories only: these one-sentence notes are never cut
    topical.retriever.composer.group_dates = False  # each line with its own date: costs add up
    result = topical.retrieve("marathon practice", "u", k=3, budget=120)
    assert sel.seen == [15]
    cost = topical.retriever.composer.line_cost  # a memory's rendered prompt line, date prefix and newline included
    assert sum(cost(h.item) for h in result.hits) <= 120
    # more than K short memories fit: Stage 2's order, packed until the budget is full
    worst_first = sorted(result.candidates, key=lambda h: h.score)
    packed, used = [], 0
    for h in worst_first:
        if used + cost(h.item) <= 120:
            packed.append(h.item.id)
            used += cost(h.item)
    assert [h.item.id for h in result.hits] == packed and len(packed) > 3


def test_without_fill_a_budget_packs_only_the_best_k(topical):
    topical.retriever.fill_budget = False
    full = topical.retrieve("marathon practice", "u", k=3)
    capped = topical.retrieve("marathon practice", "u", k=3, budget=1000)
    assert [h.item.id for h in capped.hits] == [h.item.id for h in full.hits]
    tiny = topical.retrieve("marathon practice", "u", k=3, budget=topical.retriever.composer.line_cost(full.hits[0].item))
    assert [h.item.id for h in tiny.hits] == [full.hits[0].item.id]


@pytest.mark.parametrize("bad", [0, -5, 2.5, "600", True])
def test_a_budget_that_is_not_a_positive_int_is_refused(topical, bad):
    from lightmem.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="budget"):
        topical.retrieve("marathon", "u", k=3, budget=bad)


def test_a_second_hop_adds_what_the_best_memories_lead_to_scored_against_the_question(memory):
    # The question names Lars; only the memory about Lars names the shop, and only the shop's memory names the town.
    memory.add(["My cousin Lars runs the old bicycle shop."], user_id="u", timestamp=1_600_000_000)
    memory.add(["The old bicycle shop is down by the harbour in Bergen."], user_id="u", timestamp=1_600_000_100)
    memory.add([f"note {i} about {t} practice" for t in TOPICS for i in range(6)], user_id="u", timestamp=1_600_000_200)
    question = "Where does Lars work?"
    memory.retriever.candidate_factor = 1
    plain = memory.retrieve(question, "u", k=1)
    assert [h.item.text for h in plain.candidates] == ["user: My cousin Lars runs the old bicycle shop."]
    memory.retriever.hop_seeds, memory.retriever.hop_extra = 1, 2
    hop = memory.retrieve(question, "u", k=1)
    texts = [h.item.text.removeprefix("user: ") for h in hop.candidates]
    assert texts[0] == "My cousin Lars runs the old bicycle shop." and len(texts) == 3  # the first hop first, then ≤ hop_extra
    assert "The old bicycle shop is down by the harbour in Bergen." in texts[1:]
    added = hop.candidates[texts.index("The old bicycle shop is down by the harbour in Bergen.")]
    assert added.hq == question and added.scores["bm25"] == 0.0  # scored against the question, which it does not share
    assert added.score == added.scores["stage1"] < hop.candidates[0].score


def test_retrieval_settings_are_split_into_validated_specs_and_an_unknown_one_is_refused(tmp_path):
    from lightmem.retrieval.spec import PackingSpec, RoutingSpec, Stage1Spec, retrieval_specs

    stage1, packing, routing = retrieval_specs({"candidate_factor": 3, "whole_share": 0.5, "routing": "mtm_only"})
    assert (stage1, packing, routing) == (Stage1Spec(candidate_factor=3), PackingSpec(whole_share=0.5),
                                          RoutingSpec(routing="mtm_only"))
    with pytest.raises(TypeError, match="candidate_factr"):
        retrieval_specs({"candidate_factr": 3})
    for bad in ({"fusion": "max"}, {"w_dense": "high"}, {"depth_factor": 1.5}, {"session_spread": -1}, {"routing": "both"},
                {"recency_half_life_days": 0}):
        with pytest.raises(ValueError):
            retrieval_specs(bad)
    with Memory.open(tmp_path / "s", embedder=HashingEmbedder(32), retrieval={"candidate_factor": 3, "w_lexical": 1}) as m:
        assert (m.retriever.candidate_factor, m.retriever.w_lexical) == (3, 1.0)
