"""Markdown tables and plots of evaluation results."""
from __future__ import annotations

from pathlib import Path
from typing import Any


def _fmt(v: Any) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def retrieval_table(results: dict[str, Any], ks: list[int], budget: int) -> str:
    """Per-category and overall evidence recall, as a markdown table."""
    ret = results["retrieval"]
    cols = [f"R_all@{k}" for k in ks] + [f"P@{ks[len(ks) // 2]}", f"R_all@{budget}tok", f"R_any@{budget}tok", f"R_mean@{budget}tok",
                                         f"tokens@{budget}"]
    keys = [f"recall_all@{k}" for k in ks] + [f"precision@{ks[len(ks) // 2]}", "recall_all@budget", "recall_any@budget",
                                              "recall_mean@budget", "tokens@budget"]
    lines = ["| category | n | " + " | ".join(cols) + " |", "|---" * (len(cols) + 2) + "|"]
    rows = list(ret["by_category"].items()) + [("**overall**", ret["overall"])]
    for name, agg in rows:
        if not agg.get("n"):
            continue
        lines.append(f"| {name} | {agg['n']} | " + " | ".join(_fmt(agg.get(k, float('nan'))) for k in keys) + " |")
    lat = results["latency"]
    lines += [
        "",
        f"search latency (K={max(ks)}): P50 {lat['search_ms_p50']:.1f} ms, P95 {lat['search_ms_p95']:.1f} ms "
        f"(embed P50 {lat['embed_ms_p50']:.1f}, stage 1 P50 {lat['stage1_ms_p50']:.1f}, stage 2 P50 {lat['stage2_ms_p50']:.1f}); "
        f"ingest {lat['ingest_turns_per_s']:.1f} turns/s",
    ]
    return "\n".join(lines)


def qa_table(results: dict[str, Any]) -> str:
    """LoCoMo QA per category (adversarial apart), with end-to-end latency and context cost."""
    qa = results["qa"]
    keys = ("f1", "bleu1", "rouge_l", "judge_accuracy")
    lines = ["| category | n | F1 | BLEU-1 | ROUGE-L | judge |", "|---|---|---|---|---|---|"]
    rows = [(k, v) for k, v in qa["by_category"].items() if not k.startswith("5")]
    rows += [("**overall (1-4)**", qa["overall"]), ("5-adversarial (apart)", qa["adversarial"])]
    for name, agg in rows:
        if agg.get("n"):
            lines.append(f"| {name} | {agg['n']} | " + " | ".join("-" if agg.get(k) is None else _fmt(agg[k]) for k in keys) + " |")
    lat, cost = results["latency"], results["cost"]
    lines += ["", f"end-to-end latency P50 {lat.get('e2e_ms_p50', float('nan')):.0f} ms, P95 {lat.get('e2e_ms_p95', float('nan')):.0f} ms "
              f"(generation P50 {lat.get('generate_ms_p50', float('nan')):.0f} ms, amortised over its batch); "
              f"context {cost.get('context_tokens_per_question', float('nan')):.0f} tokens per question"]
    return "\n".join(lines)


def longmemeval_table(results: dict[str, Any], ks: list[int]) -> str:
    """LongMemEval per question type: session- and turn-level recall_all@k and NDCG@k, QA."""
    ret = results["retrieval"]
    cols = [(f"S R_all@{k}", f"session_recall_all@{k}") for k in ks] + [(f"S NDCG@{ks[-1]}", f"session_ndcg@{ks[-1]}")]
    cols += [(f"T R_any@{k}", f"turn_recall_any@{k}") for k in ks] + [(f"T NDCG@{ks[-1]}", f"turn_ndcg@{ks[-1]}")]
    cols += [("QA F1", "qa_f1"), ("QA acc (judge)", "qa_accuracy")]
    lines = ["| type | n | " + " | ".join(c for c, _ in cols) + " |", "|---" * (len(cols) + 2) + "|"]
    for name, agg in list(ret["by_type"].items()) + [("**overall**", ret["overall"])]:
        if agg.get("n"):
            lines.append(f"| {name} | {agg['n']} | " + " | ".join("-" if agg.get(k) is None else _fmt(agg[k]) for _, k in cols) + " |")
    lat = results["latency"]
    lines += ["", f"search P50 {lat['search_ms_p50']:.1f} ms, P95 {lat['search_ms_p95']:.1f} ms; ingest {lat['ingest_turns_per_s']:.1f} turns/s"]
    return "\n".join(lines)


def plot_recall(results: dict[str, Any], ks: list[int], path: str | Path) -> Path:
    """Recall_all against K per category (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _table(rows: list[dict[str, Any]], cols: list[str]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|---" * len(cols) + "|"]
    lines += ["| " + " | ".join(_fmt(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

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
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
