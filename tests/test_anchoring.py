"""Relative dates resolved in the memories a time question gets (retrieval/anchoring.py and the engine)."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.anchoring import POLICIES, asks_about_time, dated, wants_dates

MAY_8 = datetime(2023, 5, 8, 14, 30, tzinfo=timezone.utc).timestamp()


@pytest.mark.parametrize("question", [
    "When did Caroline go to the LGBTQ support group?",
    "what year did Jon start dancing?",
    "How long ago was Melanie's camping trip?",
    "Which month did they move?",
    "Did Gina open her store before Jon opened his studio?",
    "How many days passed between the workshop and the planting?",
    "Which show did I start watching first, 'The Crown' or 'Dark'?",
    "Which streaming service did I start using most recently?",
    "Who did I meet for lunch last Tuesday?",  # a relative date in the question itself
])
def test_questions_about_time_are_recognised(question):
    assert asks_about_time(question)


@pytest.mark.parametrize("question", [
    "What activities does Melanie partake in?",
    "Whenever Jon dances, who watches?",  # "whenever" is not "when"
    "What kind of art does Caroline make?",
    "How many dogs has Maria adopted?",
])
def test_other_questions_are_not(question):
    assert not asks_about_time(question)


def test_policies_and_an_unknown_one_is_refused():
    assert POLICIES == ("never", "asked", "always")
    assert wants_dates("always", "What is her dog's name?") and not wants_dates("never", "When did she go?")
    assert wants_dates("asked", "When did she go?") and not wants_dates("asked", "Where did she go?")
    with pytest.raises(ValueError, match="anchor_dates"):
        wants_dates("sometimes", "When?")


def test_a_relative_date_gets_the_day_it_denotes_and_the_words_stay():
    assert dated("Caroline: I went to a support group yesterday.", MAY_8) == \
        "Caroline: I went to a support group yesterday [7 May 2023]."
    assert dated("Caroline: Nothing relative here.", MAY_8) == "Caroline: Nothing relative here."


def test_a_time_question_gets_dated_copies_and_the_store_keeps_the_turn(memory):
    memory.add([{"speaker": "Caroline", "text": "I went to a support group yesterday and it was powerful."},
                {"speaker": "Caroline", "text": "My painting of a sunset is finished."}], user_id="u", timestamp=MAY_8)
    hits = memory.retrieve("When did Caroline go to the support group?", "u", k=2, budget=200).hits
    stored = {it.id: it for it in memory.store.list("u")}  # read after the search: it changed nothing stored
    group = next(h for h in hits if "support group" in h.item.text)
    assert group.item.text.endswith("yesterday [7 May 2023] and it was powerful.")
    assert group.item.metadata["dated"] is True and group.item.provenance == stored[group.item.id].provenance
    assert group.item.n_tokens > stored[group.item.id].n_tokens  # recounted: the budget holds for the dated text
    assert "[7 May 2023]" not in stored[group.item.id].text and "dated" not in stored[group.item.id].metadata
    # without a budget (the best K) the copies are dated too
    top = memory.retrieve("When did Caroline go to the support group?", "u", k=2).hits
    assert any(h.item.text.endswith("yesterday [7 May 2023] and it was powerful.") for h in top)
    painting = next(h for h in hits if "sunset" in h.item.text)
    assert painting.item is not None and "dated" not in painting.item.metadata  # nothing relative: unchanged
    # a question that does not ask about time, or the policy off: the memory as stored
    other = memory.retrieve("What group did Caroline go to?", "u", k=2).hits
    assert all("[7 May 2023]" not in h.item.text for h in other)
    memory.retriever.anchor_dates = "never"
    plain = memory.retrieve("When did Caroline go to the support group?", "u", k=2).hits
    assert all("[7 May 2023]" not in h.item.text for h in plain)


def test_a_memory_already_dated_is_not_dated_again():
    once = dated("Ann: We met yesterday.", MAY_8)
    assert dated(once, MAY_8) == once == "Ann: We met yesterday [7 May 2023]."
    assert dated("Ann: We met yesterday [2023-05-07].", MAY_8) == "Ann: We met yesterday [2023-05-07]."


def test_only_episodes_are_dated(memory):
    import dataclasses

    from lightmem.types import Hit, ItemKind

    memory.add([{"speaker": "Ann", "text": "We met yesterday."}], user_id="u", timestamp=MAY_8)
    item = memory.store.list("u")[0]
    engine = memory.retriever
    assert engine._dated(Hit(item=item, scores={}, score=1.0)).item.text.endswith("[7 May 2023].")
    for kind in (ItemKind.ABSTRACT, ItemKind.KNOWLEDGE):  # an abstract's time is its latest member's
        hit = Hit(item=dataclasses.replace(item, kind=kind), scores={}, score=1.0)
        assert engine._dated(hit) is hit


def test_the_engine_refuses_an_unknown_policy(tmp_path):
    from lightmem.retrieval.spec import PackingSpec

    with pytest.raises(ValueError, match="anchor_dates"):
        PackingSpec(anchor_dates="sometimes")
    with pytest.raises(ValueError, match="anchor_dates"):  # refused when the Memory opens, not at the first question
        Memory.open(tmp_path / "s", embedder=HashingEmbedder(32), retrieval={"anchor_dates": "sometimes"})


def test_served_packing_packs_the_dated_texts_of_a_time_question():
    from lightmem.models.tokens import WhitespaceTokenCounter
    from lightmem.training.ranker import ServedPacking

    texts = ["[2023-05-08] Ann: We moved the piano in yesterday.", "[2023-05-08] Ann: The piano is black."]
    group = {"query": "When did Ann move the piano?", "texts": texts, "tokens": [9, 7],
             "provenance": [["D1:1"], ["D1:2"]], "evidence": ["D1:1"], "category": 2, "labels": [1, 0]}
    counter = WhitespaceTokenCounter()
    packing = ServedPacking(counter, 1.0, "asked")
    dated, plain = packing.items(group, [0, 1]), ServedPacking(counter, 1.0, "never").items(group, [0, 1])
    assert (dated[0].text, dated[0].metadata.get("dated")) == ("Ann: We moved the piano in yesterday [7 May 2023].", True)
    assert plain[0].text == "Ann: We moved the piano in yesterday."
    # room for the day's date line and both memories as written, one token short of both with the first dated
    room = sum(packing.composer.line_cost(m) for m in dated) - packing.composer._header_cost("8 May 2023") - 1
    budget = 1000 - packing.composer.layout(group["query"], (), 1000).memory_budget + room
    assert packing.kept(group, [0, 1], budget) == [0]
    assert ServedPacking(counter, 1.0, "never").kept(group, [0, 1], budget) == [0, 1]
    other = {**group, "query": "Which piano did Ann move?"}  # not a time question: no dates resolved
    assert packing.kept(other, [0, 1], 1000 - packing.composer.layout(other["query"], (), 1000).memory_budget + room) == [0, 1]
    with pytest.raises(ValueError, match="anchor_dates"):
        ServedPacking(counter, 1.0, "sometimes")
