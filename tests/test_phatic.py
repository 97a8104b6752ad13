"""Chit-chat removal for compact turn items: social glue goes, every fact stays."""
from __future__ import annotations

import pytest

from lightmem.language.phatic import compact_turn, drop_chitchat, is_chitchat, sentence_units
from lightmem.roles.writer import TurnWriter
from lightmem.types import Turn


@pytest.mark.parametrize("sentence", ["Hey Mel!", "Thanks, Melanie!", "Wow, that's amazing!", "How are you doing?",
                                      "Take care!", "Yeah, totally!", "Congrats!", "..."])
def test_social_glue_is_chitchat(sentence):
    assert is_chitchat(sentence)


@pytest.mark.parametrize("sentence", ["I went to a LGBTQ support group yesterday.", "Nate adopted a turtle.",
                                      "It was so powerful.", "I'm allergic to cats!", "I love pottery!", "Paris!"])
def test_a_sentence_with_a_fact_is_kept(sentence):
    assert not is_chitchat(sentence)


def test_drop_chitchat_keeps_every_fact_in_order():
    text = "Hey Tim! Great to hear from you. Last week I signed with Nike. Thanks! I also met Gatorade."
    assert drop_chitchat(text) == "Last week I signed with Nike. I also met Gatorade."


def test_a_turn_made_only_of_chitchat_is_kept_whole():
    assert drop_chitchat("Thanks, Mel! Take care!") == "Thanks, Mel! Take care!"
    assert drop_chitchat("(image)") == "(image)"


def test_compact_turn_names_the_speaker_and_trims_caption_boilerplate():
    out = compact_turn("Caroline", "Wow! I painted this sunrise.", "a photo of a painting of a sunrise over a lake")
    assert out == "Caroline: I painted this sunrise. [image: a painting of a sunrise over a lake]"


def test_compact_writer_keeps_provenance_and_shortens_text():
    turns = [Turn("D1:1", "Mel", "Hey Caroline! Good to see you! I ran a charity race last Saturday.", 1_683_561_600.0, "s1"),
             Turn("D1:2", "Caroline", "Thanks, Mel!", 1_683_561_600.0, "s1")]
    plain, compact = TurnWriter().write(turns), TurnWriter(compact=True).write(turns)
    assert [d.provenance for d in compact] == [["D1:1"], ["D1:2"]]
    assert compact[0].text == "Mel: I ran a charity race last Saturday."
    assert compact[1].text == plain[1].text == "Caroline: Thanks, Mel!"
    assert compact[0].metadata == plain[0].metadata == {"speaker": "Mel", "session_id": "s1"}


def test_sentence_units_split_facts_and_join_short_sentences():
    text = "Hey Tim! Yes! I went to the support group yesterday. It was so powerful. I also signed with Nike last week."
    assert sentence_units("I adopted Max. He is a golden retriever.", min_words=6) == ["I adopted Max. He is a golden retriever."]
    assert sentence_units(text, min_words=6) == ["I went to the support group yesterday.",
                                                 "It was so powerful. I also signed with Nike last week."]
    # min_words=1: one unit per sentence that is not chit-chat ("Hey Tim!", "Yes!")
    assert sentence_units(text, min_words=1) == ["I went to the support group yesterday.", "It was so powerful.",
                                                 "I also signed with Nike last week."]
    assert sentence_units("Thanks, Mel! Take care!") == ["Thanks, Mel! Take care!"]
    assert sentence_units("   ") == []


def test_sentence_writer_gives_each_unit_the_turn_as_provenance_and_the_caption_once():
    turns = [Turn("D1:1", "Mel", "Hey Caroline! I ran a charity race last Saturday. My kids painted a sunset after that.",
                  1_683_561_600.0, "s1", caption="a photo of a painted sunset")]
    drafts = TurnWriter(granularity="sentence").write(turns)
    assert [d.text for d in drafts] == ["Mel: I ran a charity race last Saturday.",
                                        "Mel: My kids painted a sunset after that. [image: a painted sunset]"]
    assert all(d.provenance == ["D1:1"] and d.metadata == {"speaker": "Mel", "session_id": "s1"} for d in drafts)
    with pytest.raises(ValueError, match="granularity"):
        TurnWriter(granularity="paragraph")
