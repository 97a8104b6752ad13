"""Results tables that cannot drift: rendered from committed run summaries and model cards, never typed by hand.

A run summary is the handful of numbers a results table shows, cut from an evaluation's ``results.json``
(``run_summary``) and committed under ``docs/results/runs/`` with the command that produced it. The
results tables of ``docs/results/README.md`` and the table of ``checkpoints/README.md`` are rendered from those
files and from each checkpoint's ``card.json``, and written between marker comments::

    <!-- generated: reader -->
    ...
    <!-- end generated -->

``python tools/docs.py`` (``make docs``) rewrites every marked block; a test fails when a committed
block differs from what the files render. Everything here is pure: JSON in, Markdown out.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lightmem.evaluation.reports.report import markdown_table, pyplot, save_figure

LOCOMO_CATEGORIES = ("1-multi-hop", "2-temporal", "3-open-domain", "4-single-hop")
CONTROLS = {"gold": "control: the gold evidence turns alone", "random": "control: a random context of the conversation"}
_BLOCK = re.compile(r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)


def run_summary(results: Mapping[str, Any]) -> dict[str, Any]:
    """The numbers the results tables show, from one ``results.json`` of ``eval/locomo.py`` or
    ``eval/longmemeval.py`` (told apart by LongMemEval's ``by_type`` breakdown)."""
    retrieval = results["retrieval"]
    overall = retrieval["overall"]
    latency = results.get("latency", {})
    if "by_type" in retrieval:
        out: dict[str, Any] = {
            "benchmark": "longmemeval",
            "n": int(overall.get("n", 0)) or None,
            "strict": overall["turn_recall_all@budget"],
            "credited": overall.get("turn_recall_all@budget_credited"),
            "coverage": overall.get("answer_coverage@budget"),
            "session_recall_all@10": overall.get("session_recall_all@10"),
            "turn_recall_all@10": overall.get("turn_recall_all@10"),
        }
    else:
        out = {
            "benchmark": "locomo",
            "n": int(overall["n"]),
            "strict": overall["recall_all@budget"],
            "credited": overall.get("recall_all@budget_credited"),
            "coverage": overall.get("answer_coverage@budget"),
            "strict_by_category": {c: v["recall_all@budget"] for c, v in retrieval.get("by_category", {}).items()},
        }
    # answer coverage of the two control contexts (the gold evidence alone, a random context), where the run has them
    cov = {name: overall[f"{name}_coverage"] for name in CONTROLS if overall.get(f"{name}_coverage") is not None}
    if cov:
        out["coverage_controls"] = cov
    if "by_type" in retrieval and overall.get("qa_f1") is not None:  # LongMemEval's reader scores sit in its overall
        out["qa"] = {"n": out["n"], "f1": overall["qa_f1"], "e2e_ms_p50": latency.get("e2e_ms_p50"),
                     "controls": {name: {"f1": overall[f"qa_{name}_f1"]} for name in CONTROLS
                                  if overall.get(f"qa_{name}_f1") is not None}}
    out["search_ms_p50"] = latency.get("search_ms_p50")
    out["ingest_turns_per_s"] = latency.get("ingest_turns_per_s")
    if latency.get("ingest_vectors_from_cache"):  # that rate is partly reading vectors back, not embedding
        out["ingest_vectors_from_cache"] = latency["ingest_vectors_from_cache"]
    qa = results.get("qa") or {}
    if qa.get("overall", {}).get("n") and qa["overall"].get("f1") is not None:  # None: prompts recorded, not answered
        by = {c: v for c, v in qa.get("by_category", {}).items() if v.get("n")}
        out["qa"] = {"n": qa["overall"]["n"], "f1": qa["overall"]["f1"], "bleu1": qa["overall"].get("bleu1"),
                     "f1_by_category": {c: v["f1"] for c, v in by.items()},
                     "e2e_ms_p50": latency.get("e2e_ms_p50")}
        controls = {}
        for name in CONTROLS:  # the same questions answered from the control contexts (qa.controls=true)
            if f"{name}_f1" in qa["overall"]:
                controls[name] = {"f1": qa["overall"][f"{name}_f1"], "strict": overall.get(f"{name}_recall_all"),
                                  "f1_by_category": {c: v[f"{name}_f1"] for c, v in by.items() if f"{name}_f1" in v}}
        if controls:
            out["qa"]["controls"] = controls
    return out


def fmt(value: Any, digits: int = 3) -> str:
    """A table cell: a number with ``digits`` decimals, an integer as is, nothing for a missing value."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int) or float(value).is_integer() and abs(value) >= 10:
        return f"{int(value):,}"
    return f"{value:.{digits}f}"


def reader_table(runs: Sequence[Mapping[str, Any]]) -> str:
    """Reader F1 per LoCoMo category, F1 and strict recall of each run (rows in the file's order), then the
    control contexts' rows from the first run that answered them (a run marked ``controls_only`` gives only those)."""
    header = ["600-token prompts; the 0.5B reader unless a row names another", "F1 multi-hop", "temporal", "open-domain", "single-hop", "F1 (1-4)",
              "BLEU-1", "strict R_all@600", "s per question (P50)"]
    rows = []
    for run in runs:
        if run.get("controls_only"):  # a run kept for the control rows it answered
            continue
        s, qa = run["summary"], run["summary"].get("qa", {})
        by = qa.get("f1_by_category", {})
        e2e = qa.get("e2e_ms_p50")  # retrieval and the reader; blank for runs recorded before it was kept
        rows.append([run["name"], *(fmt(by.get(c)) for c in LOCOMO_CATEGORIES), fmt(qa.get("f1")), fmt(qa.get("bleu1")),
                     fmt(s.get("strict")), fmt(e2e / 1000, 2) if e2e is not None else ""])
    for name, label in CONTROLS.items():  # from the first run that answered the controls too
        ctl = next((r["summary"]["qa"]["controls"][name] for r in runs
                    if name in r["summary"].get("qa", {}).get("controls", {})), None)
        if ctl is not None:
            by = ctl["f1_by_category"]
            rows.append([label, *(fmt(by.get(c)) for c in LOCOMO_CATEGORIES), fmt(ctl["f1"]), "", fmt(ctl.get("strict")), ""])
    return markdown_table(header, rows, bold_first=True)


# The rows of the GPU reader table and figure: a run's name in tools/score_answers.py's scores, its label in the
# table and its short label under the figure's bars.
GPU_READER_ROWS = {
    "defaults": ("lightmem defaults", "lightmem\ndefaults"),
    "linear_ranker": ("linear ranker (`selector=experimental/ranker_linear`)", "linear\nranker"),
    "bm25": ("BM25 over raw turns, packed whole", "BM25"),
    "dense": ("dense over raw turns, packed whole", "dense"),
    "rrf": ("RRF of BM25 and dense, packed whole", "RRF"),
    "full_context": ("full context: the most recent turns that fit", "full\ncontext"),
    "defaults/gold context": (CONTROLS["gold"], "gold\nevidence"),
    "defaults/random context": (CONTROLS["random"], "random\ncontext"),
}


def gpu_reader_table(small: Mapping[str, Any], big: Mapping[str, Any]) -> str:
    """The same recorded runs answered on a GPU by two readers (``tools/score_answers.py --out`` files: ``summaries``
    and ``versus_first``, the first run being the defaults): each reader's F1, the bigger one's F1 per category, and
    the defaults minus each row with the bigger reader (paired bootstrap)."""
    header = ["LoCoMo 3-4, all questions, 600-token prompts, answered in bf16 on a GPU", "F1, 0.5B reader", "F1, 1.5B reader",
              "1.5B: multi-hop / temporal / open-domain / single-hop", "defaults − row, 1.5B [95% CI]"]
    rows = []
    for key, (label, _) in GPU_READER_ROWS.items():
        b = big["summaries"].get(key)
        if b is None:
            continue
        s, d = small["summaries"].get(key, {}), big["versus_first"].get(key)
        by = " / ".join(fmt(b["f1_by_category"].get(c)) for c in LOCOMO_CATEGORIES)
        diff = f"{d['diff']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]" if d else ""
        rows.append([label, fmt(s.get("f1")), fmt(b["f1"]), by, diff])
    return markdown_table(header, rows, bold_first=True)


def gpu_reader_figure(small: Mapping[str, Any], big: Mapping[str, Any], path: Any) -> Any:
    """The GPU reader table as a picture (PNG at ``path``): for each run and control, the 0.5B and the 1.5B reader's
    F1 side by side, with the 1.5B's per category as dots."""
    plt = pyplot()
    keys = [k for k in GPU_READER_ROWS if k in big["summaries"]]
    x = list(range(len(keys)))
    fig, ax = plt.subplots(figsize=(9, 3.6))
    for dx, (name, scores, color) in zip((-0.2, 0.2), (("0.5B reader", small, "#9ecae1"), ("1.5B reader", big, "#3182bd"))):
        ax.bar([i + dx for i in x], [scores["summaries"].get(k, {}).get("f1", 0.0) for k in keys], width=0.38,
               label=name, color=color)
    for c, marker in zip(LOCOMO_CATEGORIES, "o^sD"):
        ax.scatter([i + 0.2 for i in x], [big["summaries"][k]["f1_by_category"].get(c, float("nan")) for k in keys],
                   s=14, marker=marker, color="#08306b", zorder=3, label=f"1.5B, {c}")
    ax.set_xticks(x, [GPU_READER_ROWS[k][1] for k in keys], fontsize=8)
    ax.set_ylabel("F1 (LoCoMo 3-4, all questions)")
    top = max(max(big["summaries"][k]["f1_by_category"].values(), default=0.0) for k in keys)
    ax.set_ylim(0, top + 0.22)  # room for the legend above the tallest dot
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, ncol=3, loc="upper center")
    ax.set_title("Reader F1 from 600-token prompts, answered in bf16 on a GPU", fontsize=10)
    return save_figure(plt, fig, path)


def _pair(values: Mapping[str, Any]) -> str:
    """``gold / random`` of a control mapping, blank when the run has neither."""
    return " / ".join(fmt(values.get(name)) for name in CONTROLS) if values else ""


def retrieval_table(runs: Sequence[Mapping[str, Any]]) -> str:
    """Strict and credited recall within the budget, answer coverage beside that of the two control contexts, the
    reader's F1 where the run answered (and its controls' F1), and search latency of each run."""
    header = ["data", "questions", "strict R_all@600", "multi-hop / temporal / open-domain / single-hop", "credited",
              "answer coverage", "coverage: gold / random context", "reader F1", "F1: gold / random context", "search P50 ms"]
    rows = []
    for run in runs:
        s, qa = run["summary"], run["summary"].get("qa") or {}
        by = s.get("strict_by_category") or {}
        cats = " / ".join(fmt(by.get(c)) for c in LOCOMO_CATEGORIES) if by else ""
        f1s = {name: c["f1"] for name, c in (qa.get("controls") or {}).items()}
        rows.append([run["name"], fmt(s.get("n")), fmt(s.get("strict")), cats, fmt(s.get("credited")), fmt(s.get("coverage")),
                     _pair(s.get("coverage_controls") or {}), fmt(qa.get("f1")), _pair(f1s), fmt(s.get("search_ms_p50"), 1)])
    return markdown_table(header, rows)


# What the checkpoints table shows of each card: (label, metric before training, metric after). A metric that a
# card lacks shows as "?", so a renamed metric is seen, not silently dropped.
CARD_METRICS: dict[str, list[tuple[str, str, str]]] = {
    "embedder": [("LoCoMo 3-4 recall_all@10, cosine", "test/locomo/base_cosine/recall_all@10", "test/locomo/tuned_cosine/recall_all@10"),
                 ("LongMemEval test", "test/longmemeval/base_cosine/recall_all@10", "test/longmemeval/tuned_cosine/recall_all@10")],
    "embedder_minilm": [("LoCoMo 3-4 recall_all@10, cosine", "test/locomo/base_cosine/recall_all@10",
                         "test/locomo/tuned_cosine/recall_all@10"),
                        ("LongMemEval test", "test/longmemeval/base_cosine/recall_all@10",
                         "test/longmemeval/tuned_cosine/recall_all@10")],
    "embedder_docs": [("LoCoMo 3-4 recall_all@10 of the served question vectors, served documents → distilled",
                       "test/test_locomo/teacher_recall_all@10", "test/test_locomo/student_recall_all@10"),
                      ("LongMemEval test", "test/test_longmemeval/teacher_recall_all@10",
                       "test/test_longmemeval/student_recall_all@10")],
    "ranker": [("LoCoMo 3-4 R_all@600 whole memories, Stage-1 order → ranker", "test/locomo/stage1/overall/recall_all@budget",
                "test/locomo/ranker/overall/recall_all@budget"),
               ("LongMemEval test", "test/longmemeval/stage1/overall/recall_all@budget",
                "test/longmemeval/ranker/overall/recall_all@budget"),
               ("strict, the composed prompt, LoCoMo 3-4", "test/locomo/stage1_served/overall/recall_all@budget",
                "test/locomo/ranker_served/overall/recall_all@budget"),
               ("LongMemEval test", "test/longmemeval/stage1_served/overall/recall_all@budget",
                "test/longmemeval/ranker_served/overall/recall_all@budget")],
    "ranker_trees": [("strict, the composed prompt, Stage-1 order → trees, LoCoMo 3-4",
                      "test/locomo/stage1_served/overall/recall_all@budget", "test/locomo/ranker_served/overall/recall_all@budget"),
                     ("LongMemEval test", "test/longmemeval/stage1_served/overall/recall_all@budget",
                      "test/longmemeval/ranker_served/overall/recall_all@budget")],
    "slm": [("R_all@600 of the held-apart groups, ranker → ranker + SLM-2, LoCoMo 3-4", "test/locomo/ranker/overall/recall_all@budget",
             "test/locomo/slm/overall/recall_all@budget"),
            ("LongMemEval test", "test/longmemeval/ranker/overall/recall_all@budget",
             "test/longmemeval/slm/overall/recall_all@budget")],
    "cross_encoder": [("recall_all@10 after reranking, LoCoMo 3-4", "test/locomo/stage1/recall_all@10", "test/locomo/selector/recall_all@10"),
                 ("LongMemEval test", "test/longmemeval/stage1/recall_all@10", "test/longmemeval/selector/recall_all@10")],
    "complexity": [("accuracy against the majority class, LoCoMo 3-4", "test/locomo/majority", "test/locomo/accuracy"),
                   ("LongMemEval test", "test/longmemeval/majority", "test/longmemeval/accuracy")],
    "word_scorer": [("word keep F1 against random, LoCoMo 3-4 turns", "test/random/token_f1", "test/trained/token_f1"),
                   ("answer words kept at r=0.5", "test/random/answer_kept@r0.5", "test/trained/answer_kept@r0.5")],
}
# Extra facts of a card worth a line: (label, metric, formatter).
CARD_FACTS: dict[str, list[tuple[str, str, Callable[[Any], str]]]] = {
    "slm": [("chosen top N", "stack/top_n", lambda v: f"{int(v)}"), ("alpha", "stack/alpha", lambda v: f"{v:g}")],
    "embedder_docs": [("mean cosine to the served vectors, LoCoMo 3-4 memories", "test/test_locomo/cosine", lambda v: f"{v:.3f}"),
                      ("LongMemEval test", "test/test_longmemeval/cosine", lambda v: f"{v:.3f}")],
}


def card_result(name: str, card: Mapping[str, Any]) -> str:
    """The held-out result of checkpoint ``name`` as its card records it: each "before → after" pair of
    ``CARD_METRICS`` and the facts of ``CARD_FACTS``, joined into one cell."""
    metrics = card.get("metrics") or {}
    value = lambda key: fmt(metrics[key]) if key in metrics else "?"  # noqa: E731
    parts = [f"{label} {value(before)} → {value(after)}" for label, before, after in CARD_METRICS.get(name, [])]
    parts += [f"{label} {show(metrics[key]) if key in metrics else '?'}" for label, key, show in CARD_FACTS.get(name, [])]
    return "; ".join(parts)


def checkpoints_table(cards: Mapping[str, Mapping[str, Any]], roles: Mapping[str, str]) -> str:
    """One row per checkpoint folder (sorted): what loads it (``roles``), its held-out result and the commit its card names."""
    rows = [[f"`{name}/`", roles.get(name, ""), card_result(name, card), f"`{str(card.get('commit', '?'))[:7]}`"]
            for name, card in sorted(cards.items())]
    return markdown_table(["checkpoint", "loaded by", "held-out result (card.json)", "exported from"], rows)


def blocks(text: str) -> dict[str, str]:
    """The generated blocks of a Markdown text, by name."""
    return {m.group("name"): m.group("body") for m in _BLOCK.finditer(text)}


def replace_blocks(text: str, rendered: Mapping[str, str]) -> str:
    """``text`` with each generated block whose name ``rendered`` holds replaced by it.

    Raises:
        KeyError: a block of ``text`` that ``rendered`` has no table for.
    """
    def sub(m: re.Match) -> str:
        name = m.group("name")
        if name not in rendered:
            raise KeyError(f"no table renders the generated block {name!r}")
        return m.group(1) + rendered[name] + m.group(4)

    return _BLOCK.sub(sub, text)


# What loads each committed checkpoint (the checkpoints table's second column).
CHECKPOINT_ROLES = {
    "embedder": "`SentenceTransformerEmbedder(adapter=...)`: the default encoder of new stores (`encoder=mpnet_tuned`)",
    "embedder_minilm": "`encoder=minilm_tuned`, the default before `embedder/`",
    "embedder_docs": "`SplitEmbedder`'s document side (`encoder=experimental/mpnet_split`; off: it costs recall)",
    "ranker": "`LearnedRanker`, linear (`selector=experimental/ranker_linear`; the default Stage 2 before `ranker_trees/`; SLM-2's base)",
    "ranker_trees": "`LearnedRanker`, boosted trees: the default Stage 2 (`selector=ranker`)",
    "slm": "`SLMSelector` (`selector=slm`; off: served, it has not beaten the ranker, see docs/results/locomo.md)",
    "cross_encoder": "`CrossEncoderSelector` (`selector=cross_encoder`, the Stage 2 before the ranker)",
    "complexity": "`TrainedComplexity` (`controller=experimental/fast_trained`)",
    "word_scorer": "`TokenClassifierWordScorer` (squeezed excerpts, `memory.word_scores`; the sensory stage)",
}
RUN_TABLES = {"reader": reader_table, "retrieval": retrieval_table}
# The scores of the 0.5B and 1.5B readers on all of LoCoMo 3-4 (docs/results/gpu.md), rendered by gpu_reader_table
GPU_READER_FILES = ("gpu_reader_scores.json", "gpu_reader15_scores.json")
GPU_READER_FIGURE = "docs/figures/reader_f1.png"  # gpu_reader_figure, written by `make docs`
DOCS_WITH_TABLES = ("docs/results/README.md", "checkpoints/README.md")


def gpu_reader_scores(root: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The 0.5B and 1.5B readers' scores on LoCoMo 3-4 from ``GPU_READER_FILES`` (None when either is missing)."""
    import json
    from pathlib import Path

    small, big = (Path(root) / "docs" / "results" / "runs" / f for f in GPU_READER_FILES)
    if not (small.exists() and big.exists()):
        return None
    return json.loads(small.read_text()), json.loads(big.read_text())["test_locomo_decline"]


def render_tables(root: Any) -> dict[str, str]:
    """Every generated table of the repository at ``root``, by block name: one per run file of
    ``docs/results/runs/`` (``<name>.json``, rendered by ``RUN_TABLES[name]``) and ``checkpoints``."""
    import json
    from pathlib import Path

    root = Path(root)
    out = {}
    for name, render in RUN_TABLES.items():
        path = root / "docs" / "results" / "runs" / f"{name}.json"
        if path.exists():
            out[name] = render(json.loads(path.read_text())["runs"])
    scores = gpu_reader_scores(root)
    if scores is not None:
        out["gpu_reader"] = gpu_reader_table(*scores)
    cards = {p.parent.name: json.loads(p.read_text()) for p in sorted((root / "checkpoints").glob("*/card.json"))}
    out["checkpoints"] = checkpoints_table(cards, CHECKPOINT_ROLES)
    return out
