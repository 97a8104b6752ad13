"""search() latency as one user's MTM grows (a benchmark that writes numbers, not a test)."""
from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from lightmem.datasets.formats import Conversation
from lightmem.memory import Memory
from lightmem.metrics.stats import percentile
from lightmem.types import Turn


def corpus_and_queries(convs: Sequence[Conversation], n_turns: int, n_queries: int, seed: int) -> tuple[list[Turn], list[str]]:
    """Real turns (re-id'd to be unique) and real benchmark questions, shuffled by seed."""
    rng = random.Random(seed)
    turns = [
        Turn(f"{c.conv_id}/{t.turn_id}", t.speaker, t.text, t.timestamp, t.session_id, t.caption)
        for c in convs for t in c.turns
    ]
    rng.shuffle(turns)
    if len(turns) < n_turns:
        raise ValueError(f"the corpus has {len(turns)} turns; {n_turns} were asked for (add a corpus file)")
    questions = list(dict.fromkeys(q.question for c in convs for q in c.qa if q.question.strip()))
    rng.shuffle(questions)
    return turns[:n_turns], questions[:n_queries]


def measure_growth(
    memory: Memory,
    turns: Sequence[Turn],
    queries: Sequence[str],
    sizes: Sequence[int],
    k: int,
    user: str = "bench",
    chunk: int = 256,
    budget: int | None = None,
    sync: Callable[[], None] = lambda: None,
    show_progress: bool = True,
    other: Callable[[], Memory] | None = None,
    single_adds: int = 50,
) -> list[dict[str, Any]]:
    """Grow one user's MTM along one trajectory; at each size time every query's search(), and with
    ``other`` (opens a second Memory on the same store) what seeing another process's commits costs.

    Writes are timed three ways: the caller's time of ``add_turns`` in chunks of ``chunk`` turns
    (``ingest_turns_per_s``), the time until those turns are fully indexed (with background indexing,
    ``index_wait_s`` after the caller returned; ``indexed_turns_per_s`` end to end), and the last
    ``single_adds`` turns before each size added one per call, as an agent adds them (``add_ms_p50``/``p95``:
    the caller's time)."""
    rows = []
    added = 0
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  disable=not show_progress) as progress:
        task = progress.add_task("ingest", total=max(sizes))
        for size in sorted(sizes):
            t_ingest = time.perf_counter()
            start = added
            singles = min(single_adds, size - added - 1) if size - added > 1 else 0
            while added < size - singles:
                batch = turns[added : min(size - singles, added + chunk)]
                memory.add_turns(user, batch)
                added += len(batch)
                progress.update(task, completed=added, description=f"ingest to {size}")
            ingest_s = time.perf_counter() - t_ingest
            chunked = added - start
            t_wait = time.perf_counter()
            memory.flush_index()
            index_wait_s = time.perf_counter() - t_wait
            adds = []
            for turn in turns[added:size]:
                t = time.perf_counter()
                memory.add_turns(user, [turn])
                adds.append((time.perf_counter() - t) * 1000)
                added += 1
            progress.update(task, completed=added)
            memory.flush_index()
            for q in queries[:5]:  # warm-up: first-call allocations are not steady-state latency
                memory.retrieve(q, user, k=k, budget=budget)
            total, stages, returned = [], {"embed": [], "stage1": [], "stage2": []}, []
            for q in queries:
                t = time.perf_counter()
                result = memory.retrieve(q, user, k=k, budget=budget)
                sync()
                total.append((time.perf_counter() - t) * 1000)
                returned.append(len(result.hits))
                for s in stages:
                    stages[s].append(result.timings_ms[s])
            row = {
                "items": memory.store.size(user),
                "queries": len(queries),
                "search_ms_p50": percentile(total, 50),
                "search_ms_p95": percentile(total, 95),
                "search_ms_mean": sum(total) / len(total),
                "hits_mean": sum(returned) / len(returned),  # with a budget, what Stage 2 packed (can exceed K)
                "ingest_turns_per_s": chunked / ingest_s if ingest_s > 0 else float("nan"),
                "index_wait_s": index_wait_s,
                "indexed_turns_per_s": chunked / (ingest_s + index_wait_s) if ingest_s + index_wait_s > 0 else float("nan"),
                "add_ms_p50": percentile(adds, 50) if adds else float("nan"),
                "add_ms_p95": percentile(adds, 95) if adds else float("nan"),
                # the indexer's own rate while it worked (all sizes so far), None without background indexing
                "index_items_per_s": memory.index_status().get("items_per_s"),
            }
            for s, vals in stages.items():
                row[f"{s}_ms_p50"] = percentile(vals, 50)
                row[f"{s}_ms_p95"] = percentile(vals, 95)
            if other is not None:
                row.update(measure_freshness(memory, other(), turns[0], user))
            rows.append(row)
    return rows


def measure_freshness(memory: Memory, other: Memory, turn: Turn, user: str, n_checks: int = 2000,
                      n_commits: int = 10) -> dict[str, float]:
    """What seeing other processes' commits costs ``memory`` (``other`` is a second connection).

    ``check``: the test every call makes when nothing changed. ``replay``: applying one item
    another connection added (then deleted), measured on the next call.
    """
    check = []
    for _ in range(n_checks):
        t = time.perf_counter()
        memory.store.refresh()
        check.append((time.perf_counter() - t) * 1e6)
    added, deleted = [], []
    try:
        for i in range(n_commits):
            [item] = other.add_turns(user, [replace(turn, turn_id=f"freshness-{i}-{time.time_ns()}")]) or [None]
            t = time.perf_counter()
            memory.store.refresh()
            added.append((time.perf_counter() - t) * 1000)
            if item is not None:
                other.delete(item.id, user)
                t = time.perf_counter()
                memory.store.refresh()
                deleted.append((time.perf_counter() - t) * 1000)
    finally:
        other.close()
    return {"freshness_check_us_p50": percentile(check, 50), "freshness_check_us_p95": percentile(check, 95),
            "replay_add_ms_p50": percentile(added, 50), "replay_delete_ms_p50": percentile(deleted, 50)}


def latency_table(rows: Sequence[dict[str, Any]], device: str) -> str:
    lines = [
        f"search() latency, K from config, device: {device}",
        "",
        "| items | P50 ms | P95 ms | mean ms | embed P50 | stage 1 P50 | stage 1 P95 | stage 2 P50 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['items']} | {r['search_ms_p50']:.2f} | {r['search_ms_p95']:.2f} | {r['search_ms_mean']:.2f} | "
            f"{r['embed_ms_p50']:.2f} | {r['stage1_ms_p50']:.2f} | {r['stage1_ms_p95']:.2f} | {r['stage2_ms_p50']:.3f} |"
        )
    lines += ["", "Writes: the caller's time, and the time until the turns are fully indexed (vectors included):", "",
              "| items | ingest turns/s (caller) | then index wait s | indexed turns/s (end to end) | add P50 ms (1 turn) | add P95 ms |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {r['items']} | {r['ingest_turns_per_s']:.1f} | {r.get('index_wait_s', 0.0):.2f} | "
              f"{r.get('indexed_turns_per_s', r['ingest_turns_per_s']):.1f} | {r.get('add_ms_p50', float('nan')):.2f} | "
              f"{r.get('add_ms_p95', float('nan')):.2f} |" for r in rows]
    if all("freshness_check_us_p50" in r for r in rows):
        lines += ["", "Seeing other processes' commits (a second connection writes; the next call replays):", "",
                  "| items | check P50 µs (nothing changed) | check P95 µs | replay 1 added item P50 ms | replay 1 deleted item P50 ms |",
                  "|---|---|---|---|---|"]
        lines += [f"| {r['items']} | {r['freshness_check_us_p50']:.1f} | {r['freshness_check_us_p95']:.1f} | "
                  f"{r['replay_add_ms_p50']:.3f} | {r['replay_delete_ms_p50']:.3f} |" for r in rows]
    return "\n".join(lines)


def plot_latency(rows: Sequence[dict[str, Any]], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [r["items"] for r in rows]
    for key, label in (("search_ms_p50", "search P50"), ("search_ms_p95", "search P95"), ("stage1_ms_p50", "stage 1 P50"), ("embed_ms_p50", "query embed P50")):
        ax.plot(xs, [r[key] for r in rows], marker="o", label=label)
    ax.set_xscale("log")
    ax.set_xlabel("MTM items of the user")
    ax.set_ylabel("milliseconds")
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("search() latency vs MTM size")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
