"""De-identification: every identifier kind becomes its placeholder; ordinary text survives."""
from __future__ import annotations

import pytest

from lightmem.ltm.deidentify import ADDRESS, EMAIL, ID, PERSON, PHONE, URL, USER, Deidentifier, strip_speaker


@pytest.fixture
def deid():
    return Deidentifier(names=["Caroline", "Melanie Smith"], user_ids=["conv-26", "alice@example.com"])


@pytest.mark.parametrize("text, secret, placeholder", [
    ("write to bob.jones@gmail.com today", "bob.jones@gmail.com", EMAIL),
    ("call +1 (555) 123-4567 tonight", "555", PHONE),
    ("my number is 0612345678.", "0612345678", PHONE),
    ("call 555.123.4567", "555.123.4567", PHONE),
    ("I live at 221B Baker Street, London", "Baker Street", ADDRESS),
    ("we met at 12 Rue de Rivoli", "Rivoli", ADDRESS),
    ("ship it to 42 Elm Avenue apt 5", "Elm Avenue", ADDRESS),
    ("see https://example.org/x?y=1 for details", "example.org", URL),
    ("ticket from user_42 again", "user_42", USER),
    ("session 123e4567-e89b-12d3-a456-426614174000 ended", "123e4567", ID),
    ("token 3f2a9c1b7e4d5a6f expired", "3f2a9c1b7e4d5a6f", ID),
    ("Dr. Watson called", "Watson", PERSON),
])
def test_each_identifier_kind_is_replaced(deid, text, secret, placeholder):
    out = deid.scrub(text)
    assert secret not in out and placeholder in out


def test_known_names_and_user_ids_case_and_possessive(deid):
    out = deid.scrub("CAROLINE met Melanie; Smith's kids and melanie smith too. conv-26 wrote alice@example.com")
    assert out == "[PERSON] met [PERSON]; [PERSON]'s kids and [PERSON] too. [USER] wrote [USER]"


def test_session_dates_are_removed_and_ordinary_numbers_kept(deid):
    out = deid.scrub("I went yesterday [2023-05-07] and ran 5 km in 2023, on 2023-05-08, version 3.11.2, 1,000 people")
    assert "[2023-05-07]" not in out and "yesterday" in out
    assert "5 km in 2023" in out and "2023-05-08" in out and "3.11.2" in out and "1,000 people" in out


def test_spacy_person_entities_are_replaced():
    from lightmem.models.registry import ModelRegistry

    deid = Deidentifier(ModelRegistry().spacy(disable=("parser", "lemmatizer")))
    out = deid.scrub_many(["Yesterday Barack Obama visited Paris with John.", "Nothing personal here."])
    assert "Obama" not in out[0] and "John" not in out[0] and "Paris" in out[0] and PERSON in out[0]
    assert out[1] == "Nothing personal here."


def test_context_copies_do_not_leak_between_users(deid):
    a = deid.with_context(names=["Zed"], user_ids=["u-1"])
    assert a.scrub("Zed and u-1") == "[PERSON] and [USER]"
    assert deid.scrub("Zed and u-1") == "Zed and u-1"  # the shared instance learned nothing


@pytest.mark.parametrize("bad", [None, 3, b"bytes"])
def test_wrong_type_is_a_clear_error(deid, bad):
    with pytest.raises(TypeError, match="must be a string"):
        deid.scrub(bad)


def test_empty_and_unicode_text(deid):
    assert deid.scrub("") == ""
    assert deid.scrub("Caroline 喜欢 🎨 und Müsli") == "[PERSON] 喜欢 🎨 und Müsli"
    assert strip_speaker("Caroline: hi there") == "hi there"
