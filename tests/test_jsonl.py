"""JSONL / JSON-list turn files: every bad line is named by number and field; all or nothing unless skip_bad."""
from __future__ import annotations

import gzip
import json

import pytest

from lightmem.datasets import load_conversations
from lightmem.datasets.formats import MAX_LISTED, load_jsonl_turns, read_json
from lightmem.errors import InvalidInputError

GOOD = [
    {"speaker": "me", "text": "I parked on level 3", "timestamp": "2024-03-01T10:00:00"},
    {"speaker": "bot", "text": "Noted.", "timestamp": "2024-03-01T10:00:05"},
    {"speaker": "me", "text": "My sister is Ana", "timestamp": 1709287210},
]


def _write(path, lines: list[str]):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _good(i: int) -> str:
    return json.dumps(GOOD[i])


def test_broken_json_on_line_2_names_line_2(tmp_path):
    f = _write(tmp_path / "chat.jsonl", [_good(0), '{"speaker": "me", "text": "oops"', _good(1)])
    with pytest.raises(InvalidInputError) as exc:
        load_conversations(f)
    msg = str(exc.value)
    assert "line 2: not valid JSON" in msg and "line 1:" not in msg and "line 3:" not in msg
    assert str(f) in msg and "--skip-bad-lines" in msg
    with pytest.raises(InvalidInputError, match="line 2: not valid JSON"):
        read_json(f)  # the generic reader names the line too


def test_line_numbers_count_blank_lines_and_gzip(tmp_path):
    f = tmp_path / "chat.jsonl.gz"
    with gzip.open(f, "wt", encoding="utf-8") as fh:
        fh.write(f"{_good(0)}\n\n\n{{broken\n{_good(1)}\n")
    with pytest.raises(InvalidInputError, match="line 4: not valid JSON"):
        load_conversations(f)


@pytest.mark.parametrize(
    "row, field",
    [
        ({"speaker": "me", "timestamp": "2024-03-01"}, "missing field 'text' or 'content'"),
        ({"text": "  ", "timestamp": "2024-03-01"}, "field 'text' is empty"),
        ({"speaker": "me", "text": "hi"}, "missing field 'timestamp'"),
        ({"text": "hi", "timestamp": "the day after never"}, "field 'timestamp': cannot parse"),
        ({"text": "hi", "timestamp": [2024]}, "field 'timestamp'"),
        ({"text": "hi", "timestamp": True}, "field 'timestamp': timestamp must be"),
        ({"text": "hi \ud800", "timestamp": "2024-03-01"}, "field 'text' is not valid Unicode text: character 4 is a lone surrogate"),
        ({"text": "hi", "timestamp": 10**309}, "field 'timestamp': timestamp 1000"),
        ({"text": "hi", "timestamp": float("inf")}, "field 'timestamp': timestamp inf is outside the years 1900-3000"),
        ({"text": "hi", "timestamp": "2024-03-01", "metadata": {"x": float("nan")}},
         "field 'metadata' (with the extra fields) must be JSON-serialisable with finite numbers (NaN"),
        ({"text": "hi", "timestamp": "2024-03-01", "score": float("-inf")}, "field 'metadata' (with the extra fields) must be"),
        ({"text": 42, "timestamp": "2024-03-01"}, "field 'text' must be a string, got int"),
        ({"speaker": ["me"], "text": "hi", "timestamp": "2024-03-01"}, "field 'speaker' must be a string, got list"),
        ({"text": "hi", "timestamp": "2024-03-01", "session_id": 3}, "field 'session_id' must be a string"),
        ({"text": "hi", "timestamp": "2024-03-01", "metadata": "x"}, "field 'metadata' must be an object"),
        (["not", "an", "object"], "expected a JSON object {speaker, text, timestamp}, got an array"),
    ],
)
def test_validation_errors_name_the_line_and_the_field(tmp_path, row, field):
    f = _write(tmp_path / "chat.jsonl", [_good(0), _good(1), json.dumps(row)])
    with pytest.raises(InvalidInputError) as exc:
        load_conversations(f)
    assert f"line 3: {field}" in str(exc.value)
    assert "1 of 3 lines" in str(exc.value)


def test_every_bad_line_is_listed_and_nothing_is_loaded(tmp_path):
    lines = [_good(0), "{nope", _good(1), json.dumps({"text": "no time"}), _good(2)]
    f = _write(tmp_path / "chat.jsonl", lines)
    with pytest.raises(InvalidInputError) as exc:
        load_conversations(f)
    msg = str(exc.value)
    assert "2 of 5 lines are not valid turns" in msg
    assert "line 2: not valid JSON" in msg and "line 4: missing field 'timestamp'" in msg


def test_the_listing_is_capped(tmp_path):
    f = _write(tmp_path / "chat.jsonl", [_good(0)] + ["{bad"] * (MAX_LISTED + 5))
    with pytest.raises(InvalidInputError) as exc:
        load_conversations(f)
    msg = str(exc.value)
    assert f"line {MAX_LISTED + 1}:" in msg and f"line {MAX_LISTED + 2}:" not in msg
    assert "... and 5 more" in msg


def test_skip_bad_keeps_the_good_turns_with_stable_ids(tmp_path):
    bad = _write(tmp_path / "chat.jsonl", [_good(0), "{nope", _good(1), json.dumps({"text": "no time"}), _good(2)])
    conv = load_conversations(bad, skip_bad=True)[0]
    assert [t.text for t in conv.turns] == [g["text"] for g in GOOD]
    assert [s.split(":")[0] for s in conv.skipped] == ["line 2", "line 4"]
    (tmp_path / "fixed").mkdir()
    fixed = _write(tmp_path / "fixed" / "chat.jsonl",
                   [_good(0), json.dumps(GOOD[0] | {"text": "x"}), _good(1), json.dumps(GOOD[1] | {"text": "y"}), _good(2)])
    ids = {t.text: t.turn_id for t in load_conversations(fixed)[0].turns}
    assert [t.turn_id for t in conv.turns] == [ids[g["text"]] for g in GOOD]  # a later fixed re-ingest resumes


def test_skip_bad_with_no_good_line_is_still_an_error(tmp_path):
    f = _write(tmp_path / "chat.jsonl", ["{nope", json.dumps({"text": "no time"})])
    with pytest.raises(InvalidInputError, match="none of the 2 lines is a valid turn"):
        load_conversations(f, skip_bad=True)


def test_empty_file_is_an_error(tmp_path):
    with pytest.raises(InvalidInputError, match="empty"):
        load_conversations(_write(tmp_path / "chat.jsonl", ["", "  "]))


def test_json_list_of_turns_names_the_element(tmp_path):
    f = tmp_path / "chat.json"
    f.write_text(json.dumps([{"text": "no time"}, GOOD[0], {"text": 3, "timestamp": 1}]))
    with pytest.raises(InvalidInputError) as exc:
        load_conversations(f)
    msg = str(exc.value)
    assert "2 of 3 elements" in msg
    assert "element [0]: missing field 'timestamp'" in msg and "element [2]: field 'text' must be a string" in msg
    conv = load_conversations(f, skip_bad=True)[0]
    assert [t.text for t in conv.turns] == [GOOD[0]["text"]] and len(conv.skipped) == 2


def test_load_jsonl_turns_accepts_plain_rows():
    conv = load_jsonl_turns(GOOD, "c")
    ids = [t.turn_id for t in conv.turns]
    assert [i.split("-")[0] for i in ids] == ["L1", "L2", "L3"] and conv.skipped == []
    assert [t.turn_id for t in load_jsonl_turns(GOOD, "c").turns] == ids  # the same file gives the same ids


def test_two_jsonl_files_for_one_user_both_land(tmp_path):
    """Default turn ids carry the content: a second file is not mistaken for the first one again."""
    from lightmem.cli import main

    store = tmp_path / "mem"
    for name, text in (("a", "I adopted a cat"), ("b", "I moved to Lisbon")):
        (tmp_path / f"{name}.jsonl").write_text(json.dumps({"speaker": "me", "text": text, "timestamp": "2024-01-01"}) + "\n")
        assert main(["ingest", str(tmp_path / f"{name}.jsonl"), "--user", "me", "--store", str(store), "--encoder", "hashing", "-q"]) == 0
    assert main(["ingest", str(tmp_path / "b.jsonl"), "--user", "me", "--store", str(store), "--encoder", "hashing", "-q"]) == 0
    from lightmem.memory import Memory
    from lightmem.models.embedder import HashingEmbedder
    from lightmem.retrieval.stage2 import Stage1Selector

    with Memory.open(store, embedder=HashingEmbedder(256), selector=Stage1Selector()) as m:
        assert sorted(t.text for t in m.store.turns("me")) == ["I adopted a cat", "I moved to Lisbon"]
