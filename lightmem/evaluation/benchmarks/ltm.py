"""LTM benchmark: consolidation cost and growth, and search latency idle vs during consolidation.

Writes numbers; asserts nothing. One user's conversation is ingested and consolidated
(cycle by cycle: nodes added per turn, seconds per batch). Then the same questions are
searched twice on that user: once idle, once while a background thread consolidates other
users' freshly ingested copies of the conversation, cycle after cycle.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from lightmem.datasets.formats import Conversation
from lightmem.memory import Memory
from lightmem.metrics.stats import percentile

log = logging.getLogger(__name__)


def consolidation_growth(memory: Memory, conv: Conversation, user: str) -> dict[str, Any]:
    """Ingest ``conv`` as ``user`` then consolidate it; per-cycle counts and seconds."""
    t0 = time.perf_counter()
    for s in conv.sessions:
        memory.add_turns(user, s.turns)
    memory.flush(user)
    memory.flush_index()
    ingest_s = time.perf_counter() - t0
    reports = memory.consolidate(user)
    turns = sum(len(s.turns) for s in conv.sessions)
    stats = memory.ltm_stats()
    secs = [r.seconds["total"] for r in reports]
    added = sum(r.graph.get("nodes_added", 0) for r in reports)
    return {
        "turns": turns, "ingest_s": ingest_s, "cycles": len(reports),
        "batch_items": float(np.mean([sum(r.selected.values()) for r in reports])) if reports else 0.0,
        "batch_s_mean": float(np.mean(secs)) if secs else float("nan"), "batch_s_p95": percentile(secs, 95),
        "nodes_added": added, "nodes_added_per_turn": added / turns if turns else float("nan"),
        "nodes_active": stats["nodes"], "nodes_active_per_turn": stats["nodes"] / turns if turns else float("nan"),
        "nodes_dropped": stats["nodes_dropped"], "edges": stats["edges"],
        "abstracts": sum(r.mtm.get("abstracts", 0) for r in reports),
        "archived": sum(r.mtm.get("archived", 0) for r in reports),
        "superseded": sum(r.mtm.get("superseded", 0) + r.mtm.get("merged", 0) for r in reports),
        "step_s": {k: float(np.sum([r.seconds.get(k, 0.0) for r in reports])) for k in
                   ("select", "abstract", "sleep_update", "recursive", "commit")},
    }


def _search_ms(memory: Memory, user: str, queries: Sequence[str], k: int, now: float | None) -> list[float]:
    out = []
    for q in queries:
        t = time.perf_counter()
        memory.search(q, user, k=k, now=now)
        out.append((time.perf_counter() - t) * 1000)
    return out


def latency_under_consolidation(memory: Memory, conv: Conversation, user: str, queries: Sequence[str], k: int,
                                copies: int, now: float | None = None, nice: int = 10) -> dict[str, Any]:
    """Search P50/P95 on ``user`` idle, then while a background thread consolidates ``copies``
    other users (each a fresh copy of ``conv``) at priority +``nice``.

    ``failures`` in the result names what did not happen: the background consolidation raised
    (its exception would otherwise die with the thread), or no search overlapped a cycle.
    """
    _search_ms(memory, user, queries[:5], k, now)  # warm caches
    idle = _search_ms(memory, user, queries, k, now)
    others = [f"{user}-copy{i}" for i in range(copies)]
    for o in others:
        for s in conv.sessions:
            memory.add_turns(o, s.turns)
    memory.flush_index()
    started, stop = threading.Event(), threading.Event()  # started: the first cycle began, or the thread ended
    cycles: list[float] = []
    errors: list[BaseException] = []

    def consolidate_others() -> None:
        import os

        if nice and hasattr(os, "setpriority"):
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
            except OSError:
                pass
        for o in others:
            while not stop.is_set():
                started.set()
                rep = memory.ltm.consolidator.run(o)
                if not rep.cycle:
                    break
                cycles.append(rep.seconds["total"])

    def worker() -> None:
        try:
            consolidate_others()
        except Exception as exc:  # noqa: BLE001  (recorded as a failure instead of dying with the thread)
            log.exception("background consolidation failed")
            errors.append(exc)
        finally:
            started.set()  # never left unset: a cycle that raised at once must not hold the searches back

    th = threading.Thread(target=worker, daemon=True)
    th.start()
    started.wait(60)
    busy: list[float] = []
    overlapped = 0
    while th.is_alive() and len(busy) < 5 * len(queries):
        for q in queries:
            if not th.is_alive():
                break
            t = time.perf_counter()
            memory.search(q, user, k=k, now=now)
            busy.append((time.perf_counter() - t) * 1000)
            overlapped += 1
    stop.set()
    th.join()
    return {
        "queries": len(queries), "idle_ms_p50": percentile(idle, 50), "idle_ms_p95": percentile(idle, 95),
        "busy_ms_p50": percentile(busy, 50), "busy_ms_p95": percentile(busy, 95), "busy_searches": overlapped,
        "background_cycles": len(cycles), "background_cycle_s_mean": float(np.mean(cycles)) if cycles else float("nan"),
        "idle_ms": idle, "busy_ms": busy, "failures": _consolidation_failures(errors, busy),
    }


def _consolidation_failures(errors: Sequence[BaseException], busy: Sequence[float]) -> list[str]:
    out = [f"background consolidation failed: {type(e).__name__}: {e}" for e in errors]
    if not busy:
        out.append("no search overlapped a background consolidation cycle (nothing to consolidate? copies=0?)")
    return out


def plot_latency_split(result: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.boxplot([result["idle_ms"], result["busy_ms"]], whis=(5, 95), showfliers=False)
    ax.set_xticks([1, 2], ["idle", "during consolidation"])
    ax.set_ylabel("search latency (ms); whiskers P5-P95")
    ax.set_title(f"search() P50 {result['idle_ms_p50']:.1f} vs {result['busy_ms_p50']:.1f} ms, "
                 f"P95 {result['idle_ms_p95']:.1f} vs {result['busy_ms_p95']:.1f} ms", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
