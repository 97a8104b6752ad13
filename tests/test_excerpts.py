"""Whole memories then excerpts within a token budget (retrieval/excerpts.py and the engine's pack)."""
from __future__ import annotations

import random

import pytest

from lightmem.models.word_scorer import encode_keep
from lightmem.retrieval.composer import pack_by_budget
from lightmem.retrieval.excerpts import (
    best_excerpt,
    coded_excerpt,
    keep_scores,
    pack_whole_then_excerpts,
    query_terms,
    realign_keep,
    squeeze,
)


def test_the_excerpt_is_the_sentence_sharing_most_query_words_under_the_speaker():
    text = "Melanie: I went camping with the kids last week. We also painted a sunset together. It was lovely out there."
    terms = query_terms(["What did Melanie paint?"])
    assert best_excerpt(text, terms) == "Melanie: We also painted a sunset together."


def test_a_single_sentence_memory_has_no_excerpt():
    assert best_excerpt("Caroline: I joined a support group.", query_terms(["support group"])) is None
    # chit-chat does not count as a sentence to cut away
    assert best_excerpt("Caroline: Thanks! I joined a support group.", query_terms(["group"])) is None


def test_on_a_tie_or_no_overlap_the_first_sentence_is_kept():
    text = "Jon: The studio opened in May. Dancers came from three towns."
    assert best_excerpt(text, query_terms(["unrelated question"])) == "Jon: The studio opened in May."
    assert best_excerpt("No speaker here at all. Second sentence follows.", frozenset()) == "No speaker here at all."


def test_whole_budget_at_or_above_the_budget_is_plain_greedy_packing():
    rng = random.Random(0)
    for _ in range(200):
        whole = [rng.randint(0, 40) for _ in range(rng.randint(0, 30))]
        excerpt = [rng.choice([None, rng.randint(0, 10)]) for _ in whole]
        budget = rng.randint(0, 200)
        got = pack_whole_then_excerpts(whole, excerpt.__getitem__, budget, budget + rng.randint(0, 50))
        assert got == [(i, False) for i in pack_by_budget(whole, budget)]


def test_head_is_whole_in_rank_order_and_the_tail_is_excerpts_within_the_budget():
    whole = [30, 30, 30, 30, 30, 30]
    excerpt = [10, 10, None, 10, 10, 10]
    got = pack_whole_then_excerpts(whole, excerpt.__getitem__, budget=120, whole_budget=70)
    # two whole (60 of 70), then excerpts; the memory without one goes whole: 60 + 30 + 3 × 10 = 120
    assert got == [(0, False), (1, False), (2, False), (3, True), (4, True), (5, True)]
    # an excerpt that does not fit is skipped and a later, shorter one may still go in
    got = pack_whole_then_excerpts([30, 30, 30, 30], [None, 25, 5, None].__getitem__, budget=40, whole_budget=35)
    assert got == [(0, False), (2, True)]


def test_packing_never_exceeds_the_budget_and_only_cuts_after_the_head():
    rng = random.Random(1)
    for _ in range(300):
        n = rng.randint(0, 25)
        whole = [rng.randint(1, 60) for _ in range(n)]
        excerpt = [rng.choice([None, rng.randint(1, 20)]) for _ in range(n)]
        budget = rng.randint(1, 400)
        whole_budget = rng.randint(0, budget)
        got = pack_whole_then_excerpts(whole, excerpt.__getitem__, budget, whole_budget)
        assert sum(excerpt[i] if cut else whole[i] for i, cut in got) <= budget
        head = [i for i, cut in got if not cut and excerpt[i] is not None]
        cuts = [i for i, cut in got if cut]
        assert all(excerpt[i] is not None for i in cuts)
        if whole_budget < budget:  # then every memory with an excerpt past the head is cut
            assert not cuts or not head or max(head) < min(cuts)
            assert sum(whole[i] for i in head) <= whole_budget
        assert [i for i, _ in got] == sorted({i for i, _ in got})


@pytest.mark.parametrize("whole,excerpt", [([1, -1], [None, None]), ([1, 2], [None, -3])])
def test_bad_costs_are_refused(whole, excerpt):
    with pytest.raises(ValueError, match="non-negative"):
        pack_whole_then_excerpts(whole, excerpt.__getitem__, 10, 0)


def test_excerpts_are_made_only_past_the_head_and_until_the_budget_is_full():
    asked: list[int] = []

    def cost(i: int) -> int:
        asked.append(i)
        return 10

    got = pack_whole_then_excerpts([30] * 10, cost, budget=80, whole_budget=60)
    assert got == [(0, False), (1, False), (2, True), (3, True)]
    assert asked == [2, 3]


def test_the_engine_fills_the_budget_tail_with_excerpts_that_keep_id_and_provenance(memory):
    long_turns = [
        f"I trained for the marathon in week {i}. The weather in town {i} was cold and wet. "
        f"My coach {i} changed the plan again." for i in range(12)
    ]
    memory.add([{"speaker": "Ann", "text": t} for t in long_turns], user_id="u", timestamp=1_600_000_000)
    memory.retriever.whole_share = 1.0
    whole = memory.retrieve("marathon training", "u", k=4, budget=150).hits
    memory.retriever.whole_share = 0.5
    mixed = memory.retrieve("marathon training", "u", k=4, budget=150).hits
    assert sum(h.item.n_tokens for h in mixed) <= 150
    cut = [h for h in mixed if h.item.metadata.get("excerpt")]
    assert cut and len(mixed) > len(whole)
    stored = {it.id: it for it in memory.store.list("u")}
    for h in cut:
        assert h.item.id in stored and h.item.provenance == stored[h.item.id].provenance
        assert h.item.text.startswith("Ann: ") and "marathon" in h.item.text
        assert len(h.item.text) < len(stored[h.item.id].text)
        assert "excerpt" not in stored[h.item.id].metadata  # the stored memory is untouched
    first = [h for h in mixed if not h.item.metadata.get("excerpt")]
    assert first and sum(h.item.n_tokens for h in first) <= 75


@pytest.mark.parametrize("bad", [-0.1, 1.5, True])
def test_a_whole_share_outside_0_1_is_refused(bad):
    from lightmem.retrieval.spec import PackingSpec, retrieval_specs

    with pytest.raises(ValueError, match="whole_share"):
        PackingSpec(whole_share=bad)
    with pytest.raises(ValueError, match="whole_share"):
        retrieval_specs({"whole_share": bad})


# Squeezed excerpts: word keep scores stored at write time, the tail keeps the best-scored share of each excerpt.

def test_keep_codes_round_trip_and_are_ignored_for_a_text_they_do_not_fit():
    text = "Ann: I went swimming today"
    code = encode_keep([0.5, 0.123, 0.999, 1.0, 0.0])
    assert code == "5012999900"
    assert keep_scores(text, code) == {"Ann:": 50, "I": 12, "went": 99, "swimming": 99, "today": 0}
    assert keep_scores(text + " again", code) is None  # the text was edited after it was scored
    assert keep_scores(text, None) is None and keep_scores(text, "ab" * 5) is None
    assert keep_scores("go go", "1070") == {"go": 70}  # a repeated word keeps its best score
    assert keep_scores("go on", "1\u00b270") is None  # a digit only Unicode calls one is no code


def test_squeeze_keeps_the_best_scored_share_in_order_and_every_unscored_bracketed_or_numeric_word():
    keep = {"I": 10, "went": 50, "swimming": 90, "with": 5, "the": 20, "kids": 80}
    assert squeeze("I went swimming with the kids", keep, 0.5) == "went swimming kids"
    assert squeeze("I went swimming with the kids", keep, 1.0) == "I went swimming with the kids"
    # "yesterday" has no score and the date is an annotation: both stay; one of the 3 scored words is kept
    assert squeeze("I went yesterday [7 May 2023] swimming", {"I": 1, "went": 2, "swimming": 3}, 0.34) == \
        "yesterday [7 May 2023] swimming"
    assert squeeze("... !!!", {"...": 1, "!!!": 2}, 0.5) == "... !!!"  # nothing readable would remain
    # a word with a digit is a count, an amount or a date: it stays whatever its score
    assert squeeze("I ran 2 races on 5/7 for $40", {"I": 1, "ran": 90, "2": 1, "races": 80, "on": 2, "5/7": 1,
                                                    "for": 3, "$40": 1}, 0.4) == "ran 2 races 5/7 $40"


def test_a_squeezed_excerpt_is_the_best_matching_sentence_cut_to_its_best_words():
    text = "Melanie: I went camping with the kids last week. We also painted a sunset together."
    scores = {w: 90 if w in {"painted", "sunset", "camping", "kids"} else 10 for w in text.split()}
    terms = query_terms(["What did Melanie paint?"])
    assert best_excerpt(text, terms, keep=scores, rate=0.4) == "Melanie: painted sunset"
    assert best_excerpt(text, terms, keep=scores, rate=1.0) == "Melanie: We also painted a sunset together."
    assert best_excerpt(text, terms, keep=None, rate=0.4) == "Melanie: We also painted a sunset together."


def test_an_excerpt_made_from_the_stored_code_is_the_excerpt_made_from_its_scores():
    text = "Melanie: I went camping with the kids last week. We also painted a sunset together."
    code = encode_keep([0.9 if w in {"painted", "sunset", "camping", "kids"} else 0.1 for w in text.split()])
    one = "Caroline: I joined a support group."
    one_code = encode_keep([0.5, 0.01, 0.8, 0.02, 0.9, 0.95])
    for t, c in ((text, code), (one, one_code), (text, None), (text, "12")):
        for q in ("What did Melanie paint?", "camping trip", "support group"):
            terms = query_terms([q])
            for rate in (0.4, 0.6, 1.0):
                expected = best_excerpt(t, terms, keep=keep_scores(t, c), rate=rate)
                assert coded_excerpt(t, terms, c, rate) == expected
                assert coded_excerpt(t, terms, c, rate) == expected  # again, from the cache
    assert coded_excerpt(text, query_terms(["paint"]), code, 0.4) == "Melanie: painted sunset"
    assert coded_excerpt(one, query_terms(["group"]), None, 0.4) is None  # unscored: nothing to cut


def test_a_one_sentence_memory_is_squeezed_whole_and_has_no_excerpt_when_nothing_is_dropped():
    text = "Caroline: I joined a support group."
    keep = {"Caroline:": 50, "I": 1, "joined": 80, "a": 2, "support": 90, "group.": 95}
    terms = query_terms(["support group"])
    assert best_excerpt(text, terms, keep=keep, rate=0.6) == "Caroline: joined support group."
    assert best_excerpt(text, terms, keep=keep, rate=0.99) is None
    assert best_excerpt(text, terms) is None


def test_dates_written_into_a_memory_keep_the_other_words_scores_and_are_kept_themselves():
    old, new = "I went there yesterday with Jo", "I went there yesterday [7 May 2023] with Jo"
    code = realign_keep(old, new, encode_keep([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]))
    assert keep_scores(new, code) == {"I": 10, "went": 20, "there": 30, "yesterday": 40, "[7": 99, "May": 99,
                                      "2023]": 99, "with": 50, "Jo": 60}
    assert realign_keep(old + " too", new, "0102") == "0102"  # a code that does not fit is left as it was


class LengthScorer:
    """Longer words score higher: a deterministic stand-in for the trained compressor."""

    rate = 0.6

    def word_scores_many(self, docs):
        return [[min(1.0, len(w) / 12) for w in d] for d in docs]

    def compress_many(self, texts, rate=None):
        raise AssertionError("the write path only scores words")


MARATHON = [
    f"I trained for the marathon in week {i}. The weather in town {i} was cold and wet. "
    f"My coach {i} changed the plan again." for i in range(12)
]


def test_the_write_path_stores_word_scores_and_squeezed_excerpts_pack_more_memories(tmp_path, embedder):
    from lightmem.memory import Memory
    from lightmem.retrieval.stage2 import Stage1Selector

    with Memory.open(tmp_path / "s", embedder=embedder, selector=Stage1Selector(), word_scorer=LengthScorer()) as m:
        m.add([{"speaker": "Ann", "text": t} for t in MARATHON], user_id="u", timestamp=1_600_000_000)
        m.flush_index()  # the background indexer scores the words with the vectors
        stored = {it.id: it for it in m.store.list("u")}
        for it in stored.values():
            scores = keep_scores(it.text, it.metadata["keep"])
            assert scores is not None and scores["marathon"] == 66 and scores["I"] == 8
        m.retriever.whole_share = 0.5  # excerpts in the budget's tail (off by default)
        m.retriever.composer.group_dates = False  # a date on every line: each excerpt's cost is its own
        m.retriever.excerpt_rate = 1.0
        plain = m.retrieve("marathon training", "u", k=4, budget=150).hits
        m.retriever.excerpt_rate = 0.5
        squeezed = m.retrieve("marathon training", "u", k=4, budget=150).hits
        assert sum(h.item.n_tokens for h in squeezed) <= 150
        assert len(squeezed) > len(plain)
        cut = [h for h in squeezed if h.item.metadata.get("excerpt")]
        assert cut
        for h in cut:
            words, source = h.item.text.split(), stored[h.item.id].text.split()
            assert words[0] == "Ann:" and set(words) <= set(source) and len(words) < len(source) / 2
            assert "keep" in stored[h.item.id].metadata and "excerpt" not in stored[h.item.id].metadata


def test_without_a_word_scorer_memories_carry_no_scores_and_excerpts_stay_sentences(tmp_path, embedder):
    from lightmem.memory import Memory
    from lightmem.retrieval.stage2 import Stage1Selector

    with Memory.open(tmp_path / "s", embedder=embedder, selector=Stage1Selector(), word_scorer=None) as m:
        m.add([{"speaker": "Ann", "text": t} for t in MARATHON], user_id="u", timestamp=1_600_000_000)
        assert all("keep" not in it.metadata for it in m.store.list("u"))
        m.retriever.whole_share = 0.5  # excerpts in the budget's tail (off by default)
        hits = m.retrieve("marathon training", "u", k=4, budget=150).hits
        cut = [h for h in hits if h.item.metadata.get("excerpt")]
        assert cut and all(h.item.text.startswith("Ann: ") and h.item.text.endswith(".") for h in cut)
    with pytest.raises(ValueError, match="word_scorer"):
        Memory.open(tmp_path / "t", embedder=embedder, word_scorer="fast")


@pytest.mark.parametrize("bad", [0.0, -0.5, 1.5, True])
def test_an_excerpt_rate_outside_0_1_is_refused(bad):
    from lightmem.retrieval.spec import PackingSpec

    with pytest.raises(ValueError, match="excerpt_rate"):
        PackingSpec(excerpt_rate=bad)


def test_a_new_text_is_scored_again_and_metadata_alone_leaves_the_scores(tmp_path, embedder):
    from lightmem.memory import Memory
    from lightmem.retrieval.stage2 import Stage1Selector

    with Memory.open(tmp_path / "s", embedder=embedder, selector=Stage1Selector(), word_scorer=LengthScorer()) as m:
        item = m.add([{"speaker": "Ann", "text": MARATHON[0]}], user_id="u", timestamp=1_600_000_000)[0]
        new = m.update(item.id, "u", text="Ann: I ran the Porto marathon in spring")
        assert keep_scores(new.text, new.metadata["keep"])["marathon"] == 66
        tagged = m.update(item.id, "u", metadata={"source": "fix", "keep": "9999"})
        # metadata given alone replaces the caller's; the scores of the unchanged text stay, and no caller sets them
        assert tagged.metadata == {"source": "fix", "keep": new.metadata["keep"]}
    with Memory.open(tmp_path / "s", embedder=embedder, selector=Stage1Selector(), word_scorer=None) as m:
        item = m.update(item.id, "u", metadata={"source": "fix", "keep": "9999"})
        assert "keep" not in m.update(item.id, "u", text="Ann: one more time").metadata  # no scorer: no stale scores
