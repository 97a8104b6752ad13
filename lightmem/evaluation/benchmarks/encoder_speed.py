"""How fast an encoder embeds one query and a stream of turns, for several backends measured in turns.

Backends are measured round-robin (each round runs every backend once), so a load that drifts on a
shared machine shifts all of them alike and the ratios stay comparable.
"""
from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from lightmem.metrics.stats import percentile
from lightmem.models.embedder import Embedder


@contextmanager
def busy_processes(n: int) -> Iterator[None]:
    """``n`` processes that each keep one core busy while the block runs (another job on the
    machine): latencies that hold up alone can collapse when threads wait on a descheduled peer."""
    if n < 0:
        raise ValueError("busy_processes must be >= 0")
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def time_queries(embedder: Embedder, queries: Sequence[str], warmup: int = 5) -> list[float]:
    """Milliseconds to embed each query alone (the search path; use an embedder without a query cache)."""
    for q in queries[:warmup]:
        embedder.encode([q], is_query=True)
    out = []
    for q in queries:
        t = time.perf_counter()
        embedder.encode([q], is_query=True)
        out.append((time.perf_counter() - t) * 1000)
    return out


def time_ingest(embedder: Embedder, texts: Sequence[str], chunk: int = 256) -> float:
    """Seconds to embed ``texts`` in chunks of ``chunk`` (as ``Memory.add_turns`` hands them over)."""
    t = time.perf_counter()
    for start in range(0, len(texts), chunk):
        embedder.encode(texts[start : start + chunk])
    return time.perf_counter() - t


def compare_backends(
    build: Callable[[str], Embedder],
    backends: Sequence[str],
    queries: Sequence[str],
    texts: Sequence[str],
    rounds: int = 2,
    chunk: int = 256,
) -> list[dict[str, Any]]:
    """Query P50/P95 ms and ingest turns/s per backend, plus how far its vectors are from the first one's.

    Args:
        build: Makes the embedder of a backend (its load and any one-time export are not timed).
        backends: Backend names; the first is the reference for ``cosine_to_ref``.
        queries: Texts embedded one by one.
        texts: Texts embedded in chunks.
        rounds: Round-robin rounds over the backends.
        chunk: Texts per ``encode`` call while ingesting.
    """
    embedders, load_s = {}, {}
    for b in backends:
        t = time.perf_counter()
        embedders[b] = build(b)
        load_s[b] = time.perf_counter() - t
    if len({e.dim for e in embedders.values()}) > 1:
        raise ValueError(f"backends of one encoder give vectors of one size; got {({b: e.dim for b, e in embedders.items()})}")
    q_ms = {b: [] for b in backends}
    ingest_s = {b: 0.0 for b in backends}
    for _ in range(rounds):
        for b in backends:
            q_ms[b] += time_queries(embedders[b], queries)
            ingest_s[b] += time_ingest(embedders[b], texts, chunk)
    ref = embedders[backends[0]].encode(texts)
    rows = []
    for b in backends:
        cos = np.sum(ref * embedders[b].encode(texts), axis=1)
        rows.append({
            "backend": b, "name": embedders[b].name, "load_s": load_s[b],
            "query_ms_p50": percentile(q_ms[b], 50), "query_ms_p95": percentile(q_ms[b], 95),
            "ingest_turns_per_s": rounds * len(texts) / ingest_s[b] if ingest_s[b] > 0 else float("nan"),
            "cosine_to_ref_mean": float(cos.mean()), "cosine_to_ref_min": float(cos.min()),
        })
    return rows


def speed_table(rows: Sequence[dict[str, Any]], device: str, n_queries: int, n_texts: int, rounds: int, busy: int = 0) -> str:
    load = f"; {busy} other busy process(es) running" if busy else "; nothing else running"
    lines = [
        f"Encoder speed on {device}: {n_queries} queries one at a time, {n_texts} turns in chunks; {rounds} round(s), "
        f"backends interleaved{load}",
        "",
        "| backend | name | query P50 ms | query P95 ms | ingest turns/s | cosine to first (mean / min) | load s |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [f"| {r['backend']} | {r['name']} | {r['query_ms_p50']:.2f} | {r['query_ms_p95']:.2f} | "
              f"{r['ingest_turns_per_s']:.1f} | {r['cosine_to_ref_mean']:.4f} / {r['cosine_to_ref_min']:.4f} | "
              f"{r['load_s']:.1f} |" for r in rows]
    return "\n".join(lines)
