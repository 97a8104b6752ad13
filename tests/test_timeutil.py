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


@pytest.mark.parametrize("value", [
    10**309, -(10**309), 10**400, float("inf"), float("-inf"),  # beyond float range: not an OverflowError
    datetime(1850, 1, 1), date(3001, 1, 1),
    "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-05:00",  # dates iso() could not show (year 0, year 10000)
], ids=["10**309", "-10**309", "10**400", "inf", "-inf", "datetime-1850", "date-3001", "year-0-utc", "year-10000-utc"])
def test_times_outside_1900_3000_are_refused_whatever_their_form(value):
    with pytest.raises(InvalidInputError, match="outside the years 1900-3000"):
        parse_timestamp(value)


def test_a_huge_number_is_not_echoed_whole():
    with pytest.raises(InvalidInputError) as err:
        parse_timestamp(10**400)
    assert len(str(err.value)) < 200 and "401 characters" in str(err.value)


def test_numpy_numbers_are_epoch_seconds():
    import numpy as np

    assert parse_timestamp(np.int64(1_700_000_000)) == parse_timestamp(np.float32(1_700_000_000)) == 1_700_000_000.0
