"""The sensory stages: pure scoring functions, the compressors, and the sensory stage's buffers."""
from __future__ import annotations

import math
from datetime import datetime, timezone

import numpy as np
import pytest

from lightmem.language.normalize import Referents, anchor_dates, resolve_pronouns
from lightmem.models.word_scorer import protected, select_words
from lightmem.sensory import gates, segmenter

MAY8 = datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc).timestamp()  # a Monday


# -- normalization ---------------------------------------------------------------------------
def test_iso_dates_for_days_weeks_months_years_and_weekdays():
    text = "yesterday, last month, on Friday, next week, 2 years ago, this Sunday"
    out = anchor_dates(text, MAY8, "iso")
    for expected in ("yesterday [2023-05-07]", "last month [2023-04]", "on Friday [2023-05-05]",
                     "next week [2023-05-15/2023-05-21]", "2 years ago [2021]", "this Sunday [2023-05-14]"):
        assert expected in out
    with pytest.raises(ValueError):
        anchor_dates(text, MAY8, "roman")


def test_malformed_or_unknown_dates_are_left_as_written():
    text = "on 31 Februaryy, last Blursday, in the year 20233, next next week"
    assert anchor_dates(text, MAY8, "iso") == text.replace("next week", "next week [2023-05-15/2023-05-21]")


def test_pronouns_resolve_to_the_last_person_of_that_gender():
    refs = Referents()
    refs.observe(["Anna"], "Caroline's sister came with Anna")
    assert refs.female == "Caroline's sister" and refs.person == "Anna"
    out = resolve_pronouns("She said her dog likes her. He called.", refs)
    # "her dog" is possessive, "likes her" an object; no male referent: "He" falls back to Anna
    assert out == "Caroline's sister said Caroline's sister's dog likes Caroline's sister. Anna called."


def test_pronouns_never_resolve_to_the_speaker_and_unknowns_stay():
    refs = Referents(person="Melanie")
    assert resolve_pronouns("she is great", refs, exclude=("Melanie",)) == "she is great"
    assert resolve_pronouns("he left", Referents()) == "he left"


# -- word selection --------------------------------------------------------------------------
def test_select_words_keeps_the_top_rate_plus_protected_annotations():
    words = "Caroline went yesterday [2023-05-07] to the group".split()
    scores = [0.9, 0.8, 0.1, 0.0, 0.2, 0.05, 0.7]
    assert protected(words) == [False, False, False, True, False, False, False]
    # 6 free words at r = 0.5 -> 3 kept (Caroline, went, group), the annotation always
    assert select_words(words, scores, 0.5) == "Caroline went [2023-05-07] group"
    assert protected("a [7 May 2023] b".split()) == [False, True, True, True, False]


def test_select_words_never_empties_a_turn():
    assert select_words(["!!!", "..."], [0.9, 0.1], 0.1) == "!!! ..."  # nothing readable: the original
    assert select_words(["🎉🎉"], [0.0], 0.1) == "🎉🎉"


# -- segmentation ----------------------------------------------------------------------------
def test_local_peaks_and_attention_boundaries():
    assert segmenter.local_peaks([0, 2, 1, 3, 3, 1]) == [1]
    m = np.array([
        [1.0, 0, 0, 0, 0],
        [0.5, 1, 0, 0, 0],
        [0.8, 0.2, 1, 0, 0],  # a[2] = 0.2
        [0.1, 0.1, 0.8, 1, 0],  # a[3] = 0.8 (peak)
        [0.4, 0.4, 0.1, 0.1, 1],  # a[4] = 0.1
    ])
    a = segmenter.adjacent_attention(m)
    assert math.isnan(a[0]) and a[1] == pytest.approx(1.0) and a[3] == pytest.approx(0.8)
    assert segmenter.attention_boundaries(m) == [3]


def test_similarity_boundaries_and_their_intersection():
    v = np.array([[1, 0], [1, 0], [0, 1], [0, 1], [1, 0]], dtype=float)
    assert segmenter.similarity_boundaries(v, 0.5) == [2, 4]
    assert segmenter.combine([2, 3], [2, 4], "hybrid") == [2]
    assert segmenter.combine([2, 3], [2, 4], "attention") == [2, 3]
    assert segmenter.combine([2, 3], [2, 4], "similarity") == [2, 4]
    with pytest.raises(ValueError):
        segmenter.combine([], [], "magic")
    assert segmenter.segments_from([2, 4, 0, 9], 5) == [(0, 2), (2, 4), (4, 5)]


def test_turn_attention_masks_sinks_and_averages_spans():
    L = 10
    att = np.full((L, L), 1.0 / L)
    att[:, 0] = 5.0  # a sink at position 0
    m = segmenter.turn_attention(att, [(3, 5), (5, 7)], sink=3)
    assert m.shape == (2, 2)
    assert np.allclose(m, m[0, 0])  # with the sink masked, the uniform rest is all that is left


# -- gates -----------------------------------------------------------------------------------
def test_information_score_is_eq1():
    w, p = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    assert gates.information_score(2, 10, w, p, alpha=0.5) == pytest.approx(0.5 * 0.2 + 0.5 * 1.0)
    assert gates.information_score(0, 10, w, w, alpha=0.5) == pytest.approx(0.0)
    assert gates.information_score(0, 10, w, None, alpha=0.0) == pytest.approx(1.0)


def test_entropy_gate_drops_repetition_and_keeps_novelty():
    same = np.tile([[1.0, 0.0]], (10, 1))
    new = np.tile([[0.0, 1.0]], (10, 1))
    vecs = np.vstack([same, same, new])
    ents = [set() for _ in range(20)] + [{"paris"} for _ in range(10)]
    keep, scores, hist = gates.entropy_gate(ents, vecs, window=10, stride=5, alpha=0.5, tau=0.35)
    assert keep[:10] == [True] * 10  # the first window has no history: all novel
    assert not any(keep[10:15])  # repeats the history exactly
    assert all(keep[20:])  # new topic and a new entity
    assert len(scores) == 5 and len(hist.entities) == 10
    # the history carries into the next block: the same content again is redundant
    keep2, _, _ = gates.entropy_gate([{"paris"}] * 10, np.tile([[0.0, 1.0]], (10, 1)), history=hist)
    assert not any(keep2)


def test_importance_windows_keep_anchors_and_similar_neighbours():
    vecs = np.array([[1, 0], [0.9, 0.436], [0, 1], [1, 0], [1, 0]], dtype=float)
    keep = gates.importance_windows([True, False, False, False, False], vecs, radius=2, tau=0.3)
    assert keep == [True, True, False, False, False]  # turn 3 is similar but out of the window
    assert gates.importance_windows([False] * 3, vecs[:3]) == [False] * 3


def test_attention_boundary_shift_moves_the_cut_and_stays_in_range():
    m = np.array([
        [1.0, 0, 0, 0, 0],
        [0.5, 1, 0, 0, 0],
        [0.8, 0.2, 1, 0, 0],
        [0.1, 0.1, 0.8, 1, 0],
        [0.4, 0.4, 0.1, 0.1, 1],
    ])
    assert segmenter.attention_boundaries(m, shift=-1) == [2]
    assert segmenter.attention_boundaries(m, shift=5) == []
