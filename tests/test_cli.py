"""The lightmem command: ingest, search --json, stats, delete-user, errors."""
from __future__ import annotations

import json

import pytest
from conftest import TINY_LOCOMO

from lightmem.cli import main


def test_ingest_search_stats_delete(tmp_path, capsys):
    store = str(tmp_path / "s")
    assert main(["ingest", str(TINY_LOCOMO), "--store", store, "--encoder", "hashing", "-q"]) == 0
    assert main(["search", "What breed is Biscuit?", "--user", "tiny-a", "--store", store, "-k", "2", "--json", "--selector", "none"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert len(hits) == 2 and ["D1:3"] in [h["provenance"] for h in hits]
    assert {"text", "provenance", "scores", "score"} <= set(hits[0])
    assert main(["search", "What breed is Biscuit?", "--user", "tiny-a", "--store", store, "-k", "2", "--json"]) == 0
    reranked = json.loads(capsys.readouterr().out)  # the learned ranker (default) scored every hit
    assert len(reranked) == 2 and all("ranker" in h["scores"] for h in reranked)
    # a budget with room for more than k=2 short turns: Stage 2 fills it from its 3K candidates
    assert main(["search", "What breed is Biscuit?", "--user", "tiny-a", "--store", store, "-k", "2", "--budget", "400",
                 "--json", "--selector", "none"]) == 0
    filled = json.loads(capsys.readouterr().out)
    assert len(filled) > 2 and ["D1:3"] in [h["provenance"] for h in filled]
    assert main(["search", "Biscuit", "--user", "tiny-a", "--store", store, "--budget", "0"]) == 2
    capsys.readouterr()
    assert main(["stats", "--store", store, "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["users"]["tiny-a"] == {"turns": 7, "items": 7, "archived": 0, "pending": 0, "unembedded": 0}
    assert stats["embedder"] == "hashing-256"
    assert main(["ingest", str(TINY_LOCOMO), "--store", store, "--encoder", "minilm", "-q"]) == 2  # not what built it
    assert "drop --encoder" in " ".join(capsys.readouterr().err.split())
    # re-ingesting resumes instead of duplicating
    assert main(["ingest", str(TINY_LOCOMO), "--store", store, "-q"]) == 0
    assert "0 items written" in " ".join(capsys.readouterr().err.split())
    assert main(["delete-user", "tiny-a", "--store", store, "-y"]) == 0
    assert main(["search", "Biscuit", "--user", "tiny-a", "--store", store, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_jsonl_ingest_with_one_user(tmp_path, capsys):
    f = tmp_path / "chat.jsonl"
    f.write_text('{"speaker": "me", "text": "I parked on level 3", "timestamp": "2024-03-01T10:00:00"}\n'
                 '{"speaker": "bot", "text": "Noted.", "timestamp": "2024-03-01T10:00:05"}\n')
    store = str(tmp_path / "s")
    assert main(["ingest", str(f), "--store", store, "--user", "me", "--encoder", "hashing", "-q"]) == 0
    assert main(["search", "where did I park", "--user", "me", "--store", store, "-k", "1", "--json"]) == 0
    assert "level 3" in json.loads(capsys.readouterr().out)[0]["text"]


def test_clear_errors(tmp_path, capsys):
    assert main(["search", "x", "--user", "u", "--store", str(tmp_path / "missing")]) == 2
    assert "no lightmem store" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["ingest", str(bad), "--store", str(tmp_path / "s"), "-q"]) == 2
    assert "not valid JSON" in " ".join(capsys.readouterr().err.split())
    assert main(["ingest", str(tmp_path / "nope.json"), "--store", str(tmp_path / "s"), "-q"]) == 2


def test_consolidate_and_graph_export(tmp_path, capsys):
    store = str(tmp_path / "s")
    assert main(["ingest", str(TINY_LOCOMO), "--store", store, "--encoder", "hashing", "-q"]) == 0
    assert main(["consolidate", "--store", store, "--user", "nobody", "-q"]) == 2  # a clear error
    assert main(["consolidate", "--store", store, "--json", "-q"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ltm"]["nodes"] > 0 and out["cycles"][0]["selected"]["new"] > 0
    assert main(["graph", "--store", store, "--export", str(tmp_path / "g.json"), "--json"]) == 0
    data = json.loads((tmp_path / "g.json").read_text())
    assert len(data["nodes"]) == out["ltm"]["nodes"] and (tmp_path / "g.png").stat().st_size > 0
    assert all("user_id" not in n for n in data["nodes"])
    assert main(["graph", "--store", store, "--export", str(tmp_path / "g.graphml"), "--plot", str(tmp_path / "p.png")]) == 0
    assert "<graphml" in (tmp_path / "g.graphml").read_text() and (tmp_path / "p.png").exists()
    assert main(["graph", "--store", str(tmp_path / "missing")]) == 2


# -- bad input: blank user ids, bad JSONL lines ------------------------------------------------
def _chat(path, lines: list[str]):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _turn(text: str) -> str:
    return json.dumps({"speaker": "me", "text": text, "timestamp": "2024-03-01T10:00:00"})


def _err(capsys) -> str:
    return " ".join(capsys.readouterr().err.split())


def _users(store: str, capsys) -> dict:
    capsys.readouterr()
    assert main(["stats", "--store", store, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["users"]


@pytest.mark.parametrize("user", ["", "   ", "\t"])
def test_blank_user_is_refused_by_every_command(tmp_path, capsys, user):
    f = _chat(tmp_path / "chat.jsonl", [_turn("I parked on level 3")])
    fresh = tmp_path / "fresh"
    assert main(["ingest", str(f), "--store", str(fresh), "--user", user, "--encoder", "hashing", "-q"]) == 2
    err = _err(capsys)
    assert "--user is empty or only whitespace" in err and "leave out --user" in err
    assert not fresh.exists()  # refused before the store was even created
    store = str(tmp_path / "s")
    assert main(["ingest", str(f), "--store", store, "--user", "me", "--encoder", "hashing", "-q"]) == 0
    before = _users(store, capsys)
    for argv in (["ingest", str(f), "--store", store, "--user", user, "-q"],
                 ["search", "level", "--user", user, "--store", store, "--selector", "none", "--json"],
                 ["consolidate", "--store", store, "--user", user, "--no-nlp", "-q"],
                 ["delete-user", user, "--store", store, "-y"]):
        assert main(argv) == 2, argv
        out = capsys.readouterr()
        assert "empty or only whitespace" in " ".join(out.err.split()) and out.out == "", argv
    assert _users(store, capsys) == before  # no "chat" user from the file's stem, nobody deleted


def test_ingest_names_the_broken_line(tmp_path, capsys):
    f = _chat(tmp_path / "chat.jsonl", [_turn("a"), '{"speaker": "me", "text": "b"', _turn("c")])
    assert main(["ingest", str(f), "--store", str(tmp_path / "s"), "--encoder", "hashing", "-q"]) == 2
    err = _err(capsys)
    assert "line 2: not valid JSON" in err and "line 1:" not in err and "line 3:" not in err
    assert not (tmp_path / "s").exists()


def test_bad_lines_write_nothing_unless_skipped(tmp_path, capsys):
    store = str(tmp_path / "s")
    seed = _chat(tmp_path / "seed.jsonl", [_turn("I was born in Porto")])
    assert main(["ingest", str(seed), "--store", store, "--user", "other", "--encoder", "hashing", "-q"]) == 0
    before = _users(store, capsys)
    f = _chat(tmp_path / "chat.jsonl", [_turn("I parked on level 3"), "{broken", _turn("Ana is my sister"),
                                         json.dumps({"speaker": "me", "text": "no time"}), _turn("I like green tea")])
    assert main(["ingest", str(f), "--store", store, "--user", "me", "-q"]) == 2
    err = _err(capsys)
    assert "2 of 5 lines are not valid turns" in err and "--skip-bad-lines" in err
    assert "line 2: not valid JSON" in err and "line 4: missing field 'timestamp'" in err
    assert _users(store, capsys) == before
    assert main(["ingest", str(f), "--store", store, "--user", "me", "-q", "--skip-bad-lines"]) == 0
    err = _err(capsys)
    assert "skipped 2 bad line(s)" in err and "line 2: not valid JSON" in err and "line 4: missing field 'timestamp'" in err
    assert "3 turns read, 3 items written" in err
    users = _users(store, capsys)
    assert users["me"]["turns"] == 3 and users["other"] == before["other"]
    assert main(["search", "green tea", "--user", "me", "--store", store, "-k", "3", "--selector", "none", "--json"]) == 0
    assert "I like green tea" in {h["text"].split(": ", 1)[-1] for h in json.loads(capsys.readouterr().out)}


@pytest.mark.parametrize("raw", ["1e400", "1" + "0" * 309, "-1" + "0" * 309],
                         ids=["1e400", "int-10**309", "int--10**309"])
def test_a_timestamp_beyond_float_range_is_a_clear_error_or_a_skipped_line(tmp_path, capsys, raw):
    line = '{"speaker": "a", "text": "x", "timestamp": ' + raw + "}"
    f = _chat(tmp_path / "chat.jsonl", [_turn("I parked on level 3"), line])
    store = str(tmp_path / "s")
    assert main(["ingest", str(f), "--store", store, "--user", "me", "--encoder", "hashing", "-q"]) == 2
    err = _err(capsys)
    assert "line 2: field 'timestamp': timestamp" in err and "outside the years 1900-3000" in err
    assert "Traceback" not in err and not (tmp_path / "s").exists()
    assert main(["ingest", str(f), "--store", store, "--user", "me", "--encoder", "hashing", "-q", "--skip-bad-lines"]) == 0
    err = _err(capsys)
    assert "skipped 1 bad line(s)" in err and "line 2: field 'timestamp'" in err and "1 turns read, 1 items written" in err
