"""Timestamp parsing of every format lightmem ingests."""
from __future__ import annotations

from datetime import date, datetime, timezone

import pytest

from lightmem.errors import InvalidInputError
from lightmem.timeutil import iso, parse_timestamp


@pytest.mark.parametrize(
    "value, expected",
    [
        ("1:56 pm on 8 May, 2023", "2023-05-08 13:56"),
        ("10:37 am on 27 June, 2023", "2023-06-27 10:37"),
        ("2023/05/23 (Tue) 19:11", "2023-05-23 19:11"),
        ("2024-01-02T03:04:05Z", "2024-01-02 03:04"),
        ("2024-01-02T03:04:05+02:00", "2024-01-02 01:04"),
        (1_700_000_000, "2023-11-14 22:13"),
        (datetime(2023, 1, 1, 12, 0), "2023-01-01 12:00"),
        (datetime(2023, 1, 1, 12, 0, tzinfo=timezone.utc), "2023-01-01 12:00"),
        (date(2023, 1, 1), "2023-01-01 00:00"),
    ],
)
def test_formats(value, expected):
    assert iso(parse_timestamp(value)) == expected


@pytest.mark.parametrize("value", ["", "   ", "not a date at all", None, True, float("nan"), 1e20, [2023], {"y": 1}])
def test_bad_timestamps_raise(value):
    with pytest.raises(InvalidInputError):
        parse_timestamp(value)
