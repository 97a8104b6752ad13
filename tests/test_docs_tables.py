"""Results tables are rendered from committed run summaries and model cards (``make docs``), so they cannot drift."""
from __future__ import annotations

import argparse
import json
import shutil

import pytest
from conftest import ROOT, entry_point

from lightmem.evaluation.reports.tables import (
    DOCS_WITH_TABLES,
    blocks,
    card_result,
    gpu_reader_figure,
    gpu_reader_table,
    reader_table,
    render_tables,
    replace_blocks,
    retrieval_table,
    run_summary,
)


def _docs_cli():
    return entry_point("docs", "tools")


def locomo_results(f1: float, strict: float, controls: bool = False) -> dict:
    cats = ("1-multi-hop", "2-temporal", "3-open-domain", "4-single-hop")
    qa_cat = {c: {"n": 5, "f1": f1 + i / 100, "bleu1": 0.1} for i, c in enumerate(cats)}
    qa_all = {"n": 20, "f1": f1, "bleu1": 0.2}
    overall = {"n": 20, "recall_all@budget": strict, "recall_all@budget_credited": strict + 0.1, "answer_coverage@budget": 0.5}
    if controls:
        qa_all.update(gold_f1=0.3, random_f1=0.1)
        for c in cats:
            qa_cat[c].update(gold_f1=0.31, random_f1=0.11)
        overall.update(gold_recall_all=1.0, random_recall_all=0.01)
    return {"retrieval": {"overall": overall, "by_category": {c: {"recall_all@budget": strict} for c in cats}},
            "latency": {"search_ms_p50": 12.5, "ingest_turns_per_s": 30.0, "e2e_ms_p50": 4930.0},
            "qa": {"overall": qa_all, "by_category": qa_cat, "adversarial": {"n": 0}}}


def test_every_committed_generated_table_is_what_its_files_render():
    rendered = render_tables(ROOT)
    for doc in DOCS_WITH_TABLES:
        found = blocks((ROOT / doc).read_text())
        assert found, f"{doc} has no generated table"
        for name, body in found.items():
            assert body == rendered[name], f"{doc}: the {name!r} table differs from its files; run `make docs`"


def test_the_gpu_reader_table_sets_both_readers_side_by_side_with_the_bigger_ones_paired_differences():
    cats = ("1-multi-hop", "2-temporal", "3-open-domain", "4-single-hop")

    def scores(f1s):
        return {"summaries": {k: {"n": 3, "f1": v, "bleu1": v, "f1_by_category": dict.fromkeys(cats, v)} for k, v in f1s.items()},
                "versus_first": {k: {"diff": f1s["defaults"] - v, "ci_low": -0.01, "ci_high": 0.2, "n": 3}
                                 for k, v in f1s.items() if k != "defaults"}}

    small = scores({"defaults": 0.3, "bm25": 0.2})
    big = scores({"defaults": 0.4, "bm25": 0.25, "defaults/gold context": 0.5})
    rows = gpu_reader_table(small, big).splitlines()[2:]
    assert rows[0].startswith("| **lightmem defaults** | **0.300** | **0.400** |")
    assert rows[1] == "| BM25 over raw turns, packed whole | 0.200 | 0.250 | 0.250 / 0.250 / 0.250 / 0.250 | +0.150 [-0.010, +0.200] |"
    # a row only the bigger reader answered keeps an empty cell for the other; rows neither has are left out
    assert rows[2].startswith("| control: the gold evidence turns alone |  | 0.500 |") and len(rows) == 3


def test_the_gpu_reader_figure_is_drawn_from_the_same_scores(tmp_path):
    cats = ("1-multi-hop", "2-temporal", "3-open-domain", "4-single-hop")
    scores = {"summaries": {k: {"n": 3, "f1": 0.3, "bleu1": 0.3, "f1_by_category": dict.fromkeys(cats, 0.3)}
                            for k in ("defaults", "bm25")}, "versus_first": {}}
    path = gpu_reader_figure(scores, scores, tmp_path / "figs" / "reader.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5_000


def test_docs_check_fails_when_the_gpu_reader_figure_is_missing(tmp_path, capsys):
    import shutil

    for rel in ("docs/results/README.md", "checkpoints/README.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    shutil.copytree(ROOT / "docs" / "results" / "runs", tmp_path / "docs" / "results" / "runs")
    for card in (ROOT / "checkpoints").glob("*/card.json"):
        (tmp_path / "checkpoints" / card.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy(card, tmp_path / "checkpoints" / card.parent.name / "card.json")
    docs = _docs_cli()
    assert docs.regenerate(check=True, root=tmp_path) == 1 and "reader_f1.png" in capsys.readouterr().out
    assert docs.regenerate(check=False, root=tmp_path) == 0 and (tmp_path / "docs" / "figures" / "reader_f1.png").exists()
    assert docs.regenerate(check=True, root=tmp_path) == 0


def test_a_locomo_run_is_summarised_with_its_reader_and_control_scores():
    s = run_summary(locomo_results(0.3, 0.8, controls=True))
    assert s["benchmark"] == "locomo" and s["strict"] == 0.8 and s["credited"] == pytest.approx(0.9)
    assert s["qa"]["f1_by_category"]["2-temporal"] == pytest.approx(0.31)
    assert s["qa"]["controls"]["gold"] == {"f1": 0.3, "strict": 1.0, "f1_by_category": {
        c: 0.31 for c in ("1-multi-hop", "2-temporal", "3-open-domain", "4-single-hop")}}


def test_a_longmemeval_run_is_summarised_by_its_turn_recall():
    results = {"retrieval": {"overall": {"turn_recall_all@budget": 0.8, "turn_recall_all@budget_credited": 0.85,
                                         "answer_coverage@budget": 0.6, "session_recall_all@10": 1.0},
                             "by_type": {}}, "latency": {"search_ms_p50": 70.0}}
    s = run_summary(results)
    assert (s["benchmark"], s["strict"], s["session_recall_all@10"], "qa" in s) == ("longmemeval", 0.8, 1.0, False)


def test_the_retrieval_table_puts_the_controls_and_the_reader_beside_each_run():
    lme = {"retrieval": {"overall": {"n": 52, "turn_recall_all@budget": 0.8, "answer_coverage@budget": 0.6,
                                     "gold_coverage": 0.7, "random_coverage": 0.2, "qa_f1": 0.25, "qa_gold_f1": 0.4,
                                     "qa_random_f1": 0.05}, "by_type": {}},
           "latency": {"search_ms_p50": 70.4, "e2e_ms_p50": 5100.0}}
    s = run_summary(lme)
    assert s["coverage_controls"] == {"gold": 0.7, "random": 0.2}
    assert s["qa"] == {"n": 52, "f1": 0.25, "e2e_ms_p50": 5100.0, "controls": {"gold": {"f1": 0.4}, "random": {"f1": 0.05}}}
    plain = run_summary(locomo_results(0.3, 0.8))  # no controls' coverage and no reader in it: blank cells
    lines = retrieval_table([{"name": "lme", "summary": s}, {"name": "locomo", "summary": plain}]).splitlines()
    assert "coverage: gold / random context" in lines[0]
    assert "| 0.600 | 0.700 / 0.200 | 0.250 | 0.400 / 0.050 | 70.4 |" in lines[2]
    assert lines[3].endswith("| 0.500 |  | 0.300 |  | 12.5 |")  # the LoCoMo run answered, without its controls


def test_the_reader_table_lists_runs_in_order_then_the_controls_of_the_first_run_that_has_them():
    runs = [{"name": "ours", "summary": run_summary(locomo_results(0.4, 0.8))},
            {"name": "controls", "controls_only": True, "summary": run_summary(locomo_results(0.2, 0.7, controls=True))}]
    lines = reader_table(runs).splitlines()
    assert lines[2].startswith("| **ours** | **0.400** |") and lines[2].endswith("| **0.800** | **4.93** |")  # seconds, P50
    assert [line.split(" | ")[0] for line in lines[3:]] == ["| control: the gold evidence turns alone",
                                                              "| control: a random context of the conversation"]
    assert len(lines) == 5  # the controls-only run gives no row of its own


def test_a_metric_missing_from_a_card_shows_as_a_question_mark():
    assert card_result("ranker", {"metrics": {"test/locomo/stage1/overall/recall_all@budget": 0.7}}).startswith(
        "LoCoMo 3-4 R_all@600 whole memories, Stage-1 order → ranker 0.700 → ?")


def test_blocks_are_replaced_in_place_and_an_unknown_block_is_refused():
    text = "intro\n<!-- generated: a -->\nold\n<!-- end generated -->\nmiddle\n<!-- generated: b -->\n<!-- end generated -->\n"
    assert replace_blocks(text, {"a": "| new |\n", "b": "x\n"}) == (
        "intro\n<!-- generated: a -->\n| new |\n<!-- end generated -->\nmiddle\n<!-- generated: b -->\nx\n<!-- end generated -->\n")
    with pytest.raises(KeyError, match="'b'"):
        replace_blocks(text, {"a": ""})


def test_record_then_make_docs_renders_a_new_run_and_check_then_passes(tmp_path, capsys):
    docs = _docs_cli()
    for part in ("docs/results/README.md", "checkpoints", "docs/results/runs"):
        src, dst = ROOT / part, tmp_path / part
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
    results = tmp_path / "results.json"
    results.write_text(json.dumps(locomo_results(0.9, 0.95)))
    args = argparse.Namespace(table="reader", name="a new pipeline", command="python eval/locomo.py ...", date="2026-01-01",
                              results=str(results), controls_only=False)
    assert docs.record(args, root=tmp_path) == 0
    assert docs.regenerate(check=True, root=tmp_path) == 1  # the results page's table is now stale
    assert docs.regenerate(check=False, root=tmp_path) == 0
    assert "| a new pipeline | 0.900 | 0.910 | 0.920 | 0.930 | 0.900 | 0.200 | 0.950 |" in (tmp_path / "docs" / "results" / "README.md").read_text()
    assert docs.regenerate(check=True, root=tmp_path) == 0
