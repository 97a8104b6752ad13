"""Relative dates anchored to the session date; speakers named instead of pronouns."""
from __future__ import annotations

import pytest

from lightmem.language.normalize import anchor_dates, find_time_window, name_speakers, relative_span
from lightmem.timeutil import iso, parse_timestamp

MON = parse_timestamp("1:56 pm on 8 May, 2023")  # Monday 8 May 2023


@pytest.mark.parametrize(
    "expr, start, end",
    [
        ("today", "2023-05-08", "2023-05-09"),
        ("yesterday", "2023-05-07", "2023-05-08"),
        ("last night", "2023-05-07", "2023-05-08"),
        ("tomorrow", "2023-05-09", "2023-05-10"),
        ("last week", "2023-05-01", "2023-05-08"),
        ("this week", "2023-05-08", "2023-05-15"),
        ("next week", "2023-05-15", "2023-05-22"),
        ("last weekend", "2023-05-06", "2023-05-08"),
        ("last month", "2023-04-01", "2023-05-01"),
        ("next month", "2023-06-01", "2023-07-01"),
        ("last year", "2022-01-01", "2023-01-01"),
        ("last Friday", "2023-05-05", "2023-05-06"),
        ("last Monday", "2023-05-01", "2023-05-02"),
        ("next Monday", "2023-05-15", "2023-05-16"),
        ("3 days ago", "2023-05-05", "2023-05-06"),
        ("two months ago", "2023-03-01", "2023-04-01"),
        ("a year ago", "2022-01-01", "2023-01-01"),
    ],
)
def test_relative_spans(expr, start, end):
    s, e, _ = relative_span(expr, MON)
    assert (iso(s.timestamp())[:10], iso(e.timestamp())[:10]) == (start, end)


def test_month_arithmetic_crosses_years():
    jan = parse_timestamp("2024-01-15")
    s, e, label = relative_span("last month", jan)
    assert label == "December 2023" and iso(e.timestamp())[:10] == "2024-01-01"


def test_anchor_dates_keeps_the_words_and_adds_the_date():
    assert anchor_dates("I ran yesterday and will rest next week.", MON) == \
        "I ran yesterday [7 May 2023] and will rest next week [the week of 15 May 2023]."
    assert anchor_dates("no dates here", MON) == "no dates here"
    assert find_time_window("no dates", MON) is None
    lo, hi = find_time_window("between yesterday and tomorrow", MON)
    assert (iso(lo)[:10], iso(hi)[:10]) == ("2023-05-07", "2023-05-10")


def test_name_speakers():
    assert name_speakers("I'm glad you liked my cake, I made it for you!", "Ava", "Ben") == \
        "Ava is glad Ben liked Ava's cake, Ava made it for Ben!"
    assert name_speakers("I think you are right", "Ava") == "Ava think you are right"  # no listener: 'you' stays
    assert name_speakers("Me? Mine.", "A\\1") == "A\\1? A\\1's."  # names are literal, never regex templates


def test_relative_dates_tells_whether_a_text_holds_an_expression_anchor_dates_resolves():
    from lightmem.language.normalize import relative_dates

    assert relative_dates("I bought it last Saturday.") and relative_dates("two weeks ago we met")
    assert not relative_dates("I bought it on 3 May 2023.") and not relative_dates("")
