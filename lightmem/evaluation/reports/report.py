"""Markdown tables and plots of evaluation results."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def save_figure(plt, fig, path: str | Path) -> Path:
    """Lay out ``fig``, write it as a PNG at ``path`` (its folder made if missing) and close it."""
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _fmt(v: Any) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def retrieval_table(results: dict[str, Any], ks: list[int], budget: int) -> str:
    """Per-category and overall evidence recall, as a markdown table."""
    ret = results["retrieval"]
    # Strict recall leads: evidence counts only where its memory is packed whole; the excerpt-credited figure
    # and the two controls (gold evidence alone, a random context of the conversation) stand beside it.
    cols = [f"R_all@{k}" for k in ks] + [f"P@{ks[len(ks) // 2]}", f"R_all@{budget}tok (strict)", f"R_any@{budget}tok",
                                         "R_all credited", "answer cov. (no dates)", "cov. gold ctx", "cov. random ctx",
                                         f"prompt tokens ({budget})", "memories (excerpts)", "R_all of Stage-1 pool"]
    keys = [f"recall_all@{k}" for k in ks] + [f"precision@{ks[len(ks) // 2]}", "recall_all@budget", "recall_any@budget",
                                              "recall_all@budget_credited", "answer_coverage@budget", "gold_coverage",
                                              "random_coverage", "tokens@budget", "memories@budget", "pool_recall_all"]
    lines = ["| category | n | " + " | ".join(cols) + " |", "|---" * (len(cols) + 2) + "|"]
    rows = list(ret["by_category"].items()) + [("**overall**", ret["overall"])]
    for name, agg in rows:
        if not agg.get("n"):
            continue
        cells = [_fmt(agg.get(k, float("nan"))) for k in keys]
        cells[keys.index("memories@budget")] = f"{agg.get('memories@budget', float('nan')):.1f} ({agg.get('excerpts@budget', float('nan')):.1f})"
        lines.append(f"| {name} | {agg['n']} | " + " | ".join(cells) + " |")
    lat = results["latency"]
    lines += [
        "",
        f"search latency (K={max(ks)}): P50 {lat['search_ms_p50']:.1f} ms, P95 {lat['search_ms_p95']:.1f} ms "
        f"(embed P50 {lat['embed_ms_p50']:.1f}, stage 1 P50 {lat['stage1_ms_p50']:.1f}, stage 2 P50 {lat['stage2_ms_p50']:.1f}); "
        f"ingest {lat['ingest_turns_per_s']:.1f} turns/s{_cached(lat)}",
    ]
    return "\n".join(lines)


def _cached(lat: dict[str, Any]) -> str:
    share = lat.get("ingest_vectors_from_cache")
    return f" ({share:.0%} of the vectors read from the vector cache)" if share else ""


def recorded_note(n: int | None) -> str:
    """The line a run recorded with ``llm=record`` shows where its reader scores would be ("" otherwise)."""
    if not n:
        return ""
    return (f"\n{n} reader prompts were recorded (`llm=record`), not answered, so no answer is scored here: answer them "
            "with `tools/answer_prompts.py` and score them with `tools/score_answers.py`.")


def qa_table(results: dict[str, Any]) -> str:
    """LoCoMo QA per category (adversarial apart), with end-to-end latency and context cost."""
    qa = results["qa"]
    keys = ("f1", "bleu1", "rouge_l", "judge_accuracy", "gold_f1", "random_f1")
    lines = ["| category | n | F1 | BLEU-1 | ROUGE-L | judge | F1 gold ctx | F1 random ctx |", "|---" * 8 + "|"]
    rows = [(k, v) for k, v in qa["by_category"].items() if not k.startswith("5")]
    rows += [("**overall (1-4)**", qa["overall"]), ("5-adversarial (apart)", qa["adversarial"])]
    for name, agg in rows:
        if agg.get("n"):
            lines.append(f"| {name} | {agg['n']} | " + " | ".join("-" if agg.get(k) is None else _fmt(agg[k]) for k in keys) + " |")
    lat, cost = results["latency"], results["cost"]
    lines += ["", f"end-to-end latency P50 {lat.get('e2e_ms_p50', float('nan')):.0f} ms, P95 {lat.get('e2e_ms_p95', float('nan')):.0f} ms "
              f"(generation P50 {lat.get('generate_ms_p50', float('nan')):.0f} ms, amortised over its batch); "
              f"context {cost.get('context_tokens_per_question', float('nan')):.0f} tokens per question"]
    note = recorded_note(qa["overall"].get("recorded"))
    return "\n".join(lines + [note] if note else lines)


def longmemeval_table(results: dict[str, Any], ks: list[int]) -> str:
    """LongMemEval per question type: session- and turn-level recall_all@k and NDCG@k, QA."""
    ret = results["retrieval"]
    cols = [(f"S R_all@{k}", f"session_recall_all@{k}") for k in ks] + [(f"S NDCG@{ks[-1]}", f"session_ndcg@{ks[-1]}")]
    cols += [(f"T R_any@{k}", f"turn_recall_any@{k}") for k in ks] + [(f"T NDCG@{ks[-1]}", f"turn_ndcg@{ks[-1]}")]
    cols += [("T R_all@budget (strict)", "turn_recall_all@budget"), ("T R_any@budget", "turn_recall_any@budget"),
             ("T R_all credited", "turn_recall_all@budget_credited"), ("answer cov. (no dates)", "answer_coverage@budget"),
             ("cov. gold ctx", "gold_coverage"), ("cov. random ctx", "random_coverage"),
             ("prompt tokens", "tokens@budget"), ("QA F1", "qa_f1"), ("QA F1 gold ctx", "qa_gold_f1"),
             ("QA F1 random ctx", "qa_random_f1"), ("QA acc (judge)", "qa_accuracy")]
    lines = ["| type | n | " + " | ".join(c for c, _ in cols) + " |", "|---" * (len(cols) + 2) + "|"]
    for name, agg in list(ret["by_type"].items()) + [("**overall**", ret["overall"])]:
        if agg.get("n"):
            lines.append(f"| {name} | {agg['n']} | " + " | ".join("-" if agg.get(k) is None else _fmt(agg[k]) for _, k in cols) + " |")
    lat = results["latency"]
    lines += ["", f"search P50 {lat['search_ms_p50']:.1f} ms, P95 {lat['search_ms_p95']:.1f} ms; ingest {lat['ingest_turns_per_s']:.1f} turns/s{_cached(lat)}"]
    note = recorded_note(ret["overall"].get("qa_recorded"))
    return "\n".join(lines + [note] if note else lines)


def plot_recall(results: dict[str, Any], ks: list[int], path: str | Path) -> Path:
    """Recall_all against K per category (PNG)."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7.5, 4))
    series = list(results["retrieval"]["by_category"].items()) + [("overall", results["retrieval"]["overall"])]
    for name, agg in series:
        if agg.get("n"):
            ax.plot(ks, [agg[f"recall_all@{k}"] for k in ks], marker="o", label=name, lw=2.5 if name == "overall" else 1.2)
    ax.set_xlabel("K (items retrieved)")
    ax.set_ylabel("recall_all (all evidence turns covered)")
    ax.set_xticks(ks)
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))
    ax.set_title("LoCoMo evidence recall")
    return save_figure(plt, fig, path)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], bold_first: bool = False) -> str:
    """A Markdown table of cells already formatted, ending in a newline; ``bold_first`` sets the first row's cells
    in bold (the row the table is about)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for i, row in enumerate(rows):
        cells = [f"**{c}**" if bold_first and i == 0 and c else c for c in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _table(rows: list[dict[str, Any]], cols: list[str]) -> str:
    return markdown_table(cols, [[_fmt(r.get(c, "")) for c in cols] for r in rows]).rstrip("\n")


def sensory_tables(results: dict[str, Any]) -> str:
    """The write-path benchmark's sections as markdown tables."""
    parts = []
    if results.get("compression"):
        parts.append("## Compression (LoCoMo turns)\n\n" + _table(results["compression"], ["rate", "word_ratio", "answer_words",
                                                                                           "answer_word_retention"]))
    if results.get("segmentation"):
        parts.append("## Segmentation vs LongMemEval session boundaries (user turns; recall = the paper's accuracy)\n\n"
                     + _table(results["segmentation"], ["rate", "method", "tau", "true", "pred", "recall", "precision", "f1",
                                                        "recall_tol1", "precision_tol1"]))
    if results.get("ingest"):
        parts.append("## Ingestion (one Memory.add per turn, CPU)\n\n" + _table(
            results["ingest"], ["sensory", "writer", "conversation", "turns", "turns_per_s", "items", "item_tokens", "llm_calls"]))
    return "\n\n".join(parts)


def plot_segmentation(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """Boundary recall / precision / F1 per segmentation setting (PNG)."""
    import numpy as np

    plt = pyplot()

    labels = [f"{r['method']}\nr={r['rate']}" + (f" τ={r['tau']}" if r.get("tau") is not None else "") for r in rows]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(rows)), 4))
    for i, key in enumerate(("recall", "precision", "f1")):
        ax.bar(x + (i - 1) * 0.27, [r[key] for r in rows], 0.27, label=key)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylim(0, 1)
    ax.set_ylabel("session boundaries (exact turn)")
    ax.set_title("Topic segmentation vs LongMemEval sessions")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(plt, fig, path)


def growth_table(rows: list[dict[str, Any]]) -> str:
    """Recall and latency per MTM size, reranking against vector-only, with the gap."""
    by = {}
    for r in rows:
        if "variant" in r:
            by.setdefault(r["size"], {})[r["variant"]] = r
    lines = ["| MTM size | entries | questions | R_all@budget vector-only | R_all@budget reranking | Δ | search P50/P95 vector (ms) | search P50/P95 rerank (ms) |",
             "|---|---|---|---|---|---|---|---|"]
    for size, v in sorted(by.items()):
        vec, rr = v.get("vector_only"), v.get("reranking")
        if not vec or not rr:
            continue
        lines.append(f"| ~{size:,} | {rr['entries']:,} | {rr['n']} | {vec['recall_all@budget']:.3f} | {rr['recall_all@budget']:.3f} | "
                     f"{rr['recall_all@budget'] - vec['recall_all@budget']:+.3f} | {vec['search_ms_p50']:.1f} / {vec['search_ms_p95']:.1f} | "
                     f"{rr['search_ms_p50']:.1f} / {rr['search_ms_p95']:.1f} |")
    notes = [r["note"] for r in rows if "note" in r]
    return "\n".join(lines + [f"\n{n}" for n in notes])


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_growth(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """Recall (left) and search latency (right) against MTM size, one line per variant (PNG)."""
    plt = pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for variant in ("vector_only", "reranking"):
        pts = sorted((r["entries"], r) for r in rows if r.get("variant") == variant)
        if not pts:
            continue
        x = [p[0] for p in pts]
        a1.plot(x, [p[1]["recall_all@budget"] for p in pts], marker="o", label=variant)
        a2.plot(x, [p[1]["search_ms_p50"] for p in pts], marker="o", label=f"{variant} P50")
        a2.plot(x, [p[1]["search_ms_p95"] for p in pts], marker="x", ls="--", label=f"{variant} P95")
    for ax, ylabel in ((a1, "recall_all within budget"), (a2, "search latency (ms)")):
        ax.set_xscale("log")
        ax.set_xlabel("MTM entries")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("MTM growth along one trajectory")
    return save_figure(plt, fig, path)


def plot_bars(names: list[str], series: dict[str, list[tuple[float, float]]], path: str | Path, title: str) -> Path:
    """Grouped bars (mean with std error bars) of several metrics per run (PNG)."""
    import numpy as np

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(names) * max(1, len(series)) / 1.5), 4))
    width = 0.8 / max(1, len(series))
    x = np.arange(len(names))
    for i, (metric, vals) in enumerate(series.items()):
        means = [v[0] for v in vals]
        stds = [v[1] for v in vals]
        ax.bar(x + i * width - 0.4 + width / 2, means, width, yerr=stds, capsize=3, label=metric)
    ax.set_xticks(x)
    ax.set_xticklabels(names, rotation=25, ha="right", fontsize=8)
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    return save_figure(plt, fig, path)


def plot_budget_curves(curves: dict[str, list[tuple[float, float]]], path: str | Path) -> Path:
    """Recall_all against context tokens (one point per K and the budget cut) for each run (PNG)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4))
    for name, pts in curves.items():
        pts = sorted(pts)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax.set_xlabel("context tokens per question")
    ax.set_ylabel("recall_all (all evidence covered)")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))
    ax.set_title("Evidence recall against token budget")
    return save_figure(plt, fig, path)


def plot_longmemeval(results: dict[str, Any], ks: list[int], path: str | Path) -> Path:
    """Session-level recall_all@k (solid) and turn-level recall_any@k (dashed) per question type (PNG)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4))
    series = list(results["retrieval"]["by_type"].items()) + [("overall", results["retrieval"]["overall"])]
    for i, (name, agg) in enumerate(series):
        color = f"C{i}"
        for key, ls in (("session_recall_all", "-"), ("turn_recall_any", "--")):
            vals = [agg.get(f"{key}@{k}") for k in ks]
            if agg.get("n") and all(v is not None for v in vals):
                ax.plot(ks, vals, ls=ls, marker="o", color=color, lw=2.5 if name == "overall" else 1.2,
                        label=name if key == "session_recall_all" else None)
    ax.set_xlabel("k")
    ax.set_ylabel("session R_all@k (solid), turn R_any@k (dashed)")
    ax.set_xticks(ks)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))
    ax.set_title("LongMemEval retrieval")
    return save_figure(plt, fig, path)
