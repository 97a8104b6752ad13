"""How a store behaves as it grows to many users and many items: build rate, a serving process's
memory, and cold and warm search latency (``tools/scale.py``; writes numbers, asserts nothing).

One grid point is ``users × items`` (items per user). The store is built once per point with
texts drawn from a small template language and a hashing embedder's 384-d vectors of them (no model
runs, so only the store's own cost counts; texts that share words have near vectors, so an
approximate index's recall means something). Then a *fresh process* opens it as a server worker
would and searches every user once in random order (each user's first search: **cold**, its views
loaded from the tables or from its view snapshot), then searches the most recently served users again (**warm**). It reports
the process's resident memory (RSS) before and after, and what its view cache holds.
"""
from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lightmem.metrics.stats import percentile
from lightmem.stores.base import DEFAULT_CAPACITY

DIM = 384
NAMES = ["Ana", "Bo", "Caro", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lea"]
PLACES = ["Lisbon", "Kyoto", "Oslo", "Lima", "Cairo", "Quito", "Perth", "Riga", "Turin", "Hanoi", "Accra", "Bergen"]
THINGS = ["cello lessons", "a pottery class", "the marathon", "a chess club", "the bakery", "a jazz concert",
          "the climbing gym", "a book fair", "the observatory", "a cooking course", "the flea market", "a sailing trip"]
VERBS = ["went to", "talked about", "signed up for", "missed", "loved", "wrote a post on", "planned", "took photos at"]


@dataclass
class Point:
    users: int
    items: int  # per user
    index: str = "flat"

    @property
    def name(self) -> str:
        return f"{self.users}x{self.items}" + ("" if self.index == "flat" else f"-{self.index}")


@dataclass
class Result:
    point: Point
    backend: str
    build_s: float = 0.0  # 0: the store was there already
    serve: dict[str, Any] = field(default_factory=dict)

    @property
    def build_items_per_s(self) -> float | None:
        return self.point.users * self.point.items / self.build_s if self.build_s else None


def parse_point(text: str) -> Point:
    """``USERSxITEMS`` or ``USERSxITEMS:hnsw``."""
    shape, _, index = text.partition(":")
    users, _, items = shape.lower().partition("x")
    try:
        point = Point(int(users), int(items), index or "flat")
    except ValueError:
        raise ValueError(f"a grid point is USERSxITEMS[:hnsw], got {text!r}") from None
    if point.users <= 0 or point.items <= 0 or point.index not in ("flat", "hnsw"):
        raise ValueError(f"a grid point is USERSxITEMS[:hnsw] with positive numbers, got {text!r}")
    return point


def text_of(rng: random.Random, i: int) -> str:
    """A turn-like sentence (15-30 words) from the template language."""
    a, b = rng.choice(NAMES), rng.choice(NAMES)
    return (f"{a} {rng.choice(VERBS)} {rng.choice(THINGS)} in {rng.choice(PLACES)} with {b} on day {i}, "
            f"and {b} said the {rng.choice(THINGS)} in {rng.choice(PLACES)} was worth it because {a} "
            f"{rng.choice(VERBS)} {rng.choice(THINGS)} before.")


def store_options(location: str, point: Point, cache_mb: float | None,
                  snapshot_min_items: int | None = None) -> dict[str, Any]:
    """The store settings of a grid point (capacity raised to its items; None: the store's default)."""
    from lightmem.stores.factory import is_server

    options: dict[str, Any] = {"index": point.index, "capacity": max(DEFAULT_CAPACITY, point.items)}
    if cache_mb is not None:
        options["cache_mb"] = cache_mb
    if not is_server(location):
        options["synchronous"] = "NORMAL"
        if snapshot_min_items is not None:
            options["snapshot_min_items"] = snapshot_min_items
    return options


def build(location: str, point: Point, batch: int = 1000, seed: int = 0, progress: bool = True) -> float:
    """Write ``point.users × point.items`` items (one turn each); returns the seconds it took."""
    from rich.progress import Progress

    from lightmem.models.embedder import HashingEmbedder
    from lightmem.stores.factory import open_store
    from lightmem.types import ItemKind, MemoryItem, Turn

    rng, embedder = random.Random(seed), HashingEmbedder(DIM)
    store = open_store(location, dim=DIM, embedder=embedder.name, **store_options(location, point, None, 0))
    t0 = time.perf_counter()
    try:
        with Progress(disable=not progress) as bar:
            task = bar.add_task(f"build {point.name}", total=point.users * point.items)
            for u in range(point.users):
                uid = f"user{u:05d}"
                for start in range(0, point.items, batch):
                    n = min(batch, point.items - start)
                    turns, items = [], []
                    for j in range(start, start + n):
                        ts = 1.6e9 + j * 600.0
                        text = text_of(rng, j)
                        turns.append(Turn(turn_id=f"{uid}-{j}", speaker="user", text=text, timestamp=ts))
                        items.append(MemoryItem(id=store.new_id(), user_id=uid, text=text, kind=ItemKind.EPISODIC,
                                                event_time=ts, created_at=ts, last_access=ts, provenance=[f"{uid}-{j}"]))
                    store.write(uid, turns, items, embedder.encode([t.text for t in turns]), now=1.7e9)
                    bar.advance(task, n)
    finally:
        store.close()
    return time.perf_counter() - t0


def rss_mb(field: str = "VmRSS") -> float:
    """This process's resident memory (``VmHWM``: its peak since it started; ``ru_maxrss`` would count
    the memory of the process that forked it)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def index_recall(memory: Any, user_id: str, queries: list[str], k: int = 10) -> float | None:
    """recall@k of the user's vector index (HNSW) against exact search over the same vectors, for the
    queries' embeddings; None for a store whose index is in the database (PostgreSQL)."""
    part = getattr(memory.store, "_part", None)
    if part is None:
        return None
    index = part(user_id).vectors
    found = 0
    for q in memory.embedder.encode(queries):
        exact = index.ids[np.argsort(-(index.vecs @ q), kind="stable")[:k]]
        found += len(set(index.search(q, k)[0].tolist()) & set(exact.tolist()))
    return found / (k * len(queries))


def serve(location: str, point: Point, cache_mb: float | None, warm_users: int = 20, warm_reps: int = 5,
          min_cold: int = 20, seed: int = 1, snapshot_min_items: int | None = None) -> dict[str, Any]:
    """In this (fresh) process: search every user once (cold), then the last served users again (warm).

    With few users each is searched cold several times (its views dropped before each search); the first
    search of a large user builds its view from the tables and writes its snapshot, later ones read that.
    """
    from lightmem.memory import Memory
    from lightmem.models.embedder import HashingEmbedder
    from lightmem.retrieval.stage2 import Stage1Selector

    rss0 = rss_mb()
    memory = Memory.open(location, embedder=HashingEmbedder(DIM), selector=Stage1Selector(),
                         **store_options(location, point, cache_mb, snapshot_min_items))
    rng = random.Random(seed)
    users = [f"user{u:05d}" for u in range(point.users)]
    rng.shuffle(users)
    queries = [f"When did {rng.choice(NAMES)} go to {rng.choice(THINGS)} in {rng.choice(PLACES)}?" for _ in range(64)]
    memory.search(queries[0], user_id="scale-warm-up", k=10)  # imports and lazy set-up, not the store's cost
    rss_open = rss_mb()
    cold: list[float] = []
    try:
        for i, uid in enumerate(users * max(1, min_cold // len(users))):
            if i >= len(users):
                memory.store.drop_views()
            t0 = time.perf_counter()
            memory.search(queries[i % len(queries)], user_id=uid, k=10)
            cold.append((time.perf_counter() - t0) * 1e3)
        recent = users[-min(warm_users, len(users)):]
        warm: list[float] = []
        for rep in range(warm_reps):
            for j, uid in enumerate(recent):
                t0 = time.perf_counter()
                memory.search(queries[(rep * 7 + j) % len(queries)], user_id=uid, k=10)
                warm.append((time.perf_counter() - t0) * 1e3)
        cache = memory.store.cache_stats()
        recall = index_recall(memory, users[0], queries) if point.index == "hnsw" else None
    finally:
        memory.close()
    return {
        "rss_start_mb": round(rss0, 1), "rss_open_mb": round(rss_open, 1), "rss_end_mb": round(rss_mb(), 1),
        "rss_peak_mb": round(rss_mb("VmHWM"), 1),
        "cold_p50_ms": round(percentile(cold, 50), 2), "cold_p95_ms": round(percentile(cold, 95), 2),
        "warm_p50_ms": round(percentile(warm, 50), 2), "warm_p95_ms": round(percentile(warm, 95), 2),
        "first_cold_ms": round(cold[0], 1), "cache": cache, "index_recall_at_10": recall,
    }


def serve_in_child(location: str, point: Point, cache_mb: float | None,
                   snapshot_min_items: int | None = None) -> dict[str, Any]:
    """``serve`` in a fresh Python process, so that its memory is that of a new worker."""
    cmd = [sys.executable, "-c",
           "import json, sys; from lightmem.evaluation.benchmarks.scale import Point, serve; a = json.loads(sys.argv[1]); "
           "print('RESULT ' + json.dumps(serve(a['loc'], Point(**a['point']), a['cache_mb'], snapshot_min_items=a['snap'])))",
           json.dumps({"loc": location, "point": asdict(point), "cache_mb": cache_mb, "snap": snapshot_min_items})]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
    if out.returncode != 0:
        raise RuntimeError(f"the serving process failed ({out.returncode}):\n{out.stderr[-3000:]}")
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def table(results: list[Result]) -> str:
    cols = ["backend", "point", "items", "build items/s", "RSS open MB", "RSS end MB", "views held", "views MB",
            "first search ms", "cold P50/P95 ms", "warm P50/P95 ms", "index recall@10"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in results:
        s = r.serve
        lines.append("| " + " | ".join([
            r.backend, r.point.name, f"{r.point.users * r.point.items:,}",
            "—" if r.build_items_per_s is None else f"{r.build_items_per_s:,.0f}",
            f"{s['rss_open_mb']:.0f}", f"{s['rss_end_mb']:.0f}", str(s["cache"]["views"]), f"{s['cache']['mb']:.0f}",
            f"{s['first_cold_ms']:.0f}", f"{s['cold_p50_ms']:.1f} / {s['cold_p95_ms']:.1f}",
            f"{s['warm_p50_ms']:.1f} / {s['warm_p95_ms']:.1f}",
            "exact" if s.get("index_recall_at_10") is None else f"{s['index_recall_at_10']:.3f}",
        ]) + " |")
    return "\n".join(lines) + "\n"


def plot(results: list[Result], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for backend in sorted({r.backend for r in results}):
        rs = sorted((r for r in results if r.backend == backend), key=lambda r: r.point.users * r.point.items)
        total = [r.point.users * r.point.items for r in rs]
        a.plot(total, [r.serve["rss_end_mb"] for r in rs], "o-", label=f"{backend}: RSS after serving all")
        a.plot(total, [r.serve["cache"]["mb"] for r in rs], "s--", label=f"{backend}: views held (estimate)")
        per_user = sorted({r.point.items for r in rs})
        for kind in ("cold", "warm"):
            b.plot(per_user, [np.median([r.serve[f"{kind}_p50_ms"] for r in rs if r.point.items == n]) for n in per_user],
                   "o-", label=f"{backend}: {kind} search P50")
    a.set(xscale="log", xlabel="items in the store", ylabel="MB", title="a serving process's memory")
    b.set(xscale="log", xlabel="items per user", ylabel="ms", title="search latency")
    for ax in (a, b):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_report(results: list[Result], out: Path, meta: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rows = [{**asdict(r), "build_items_per_s": r.build_items_per_s} for r in results]
    (out / "results.json").write_text(json.dumps({"meta": meta, "results": rows}, indent=2))
    (out / "results.md").write_text(f"# tools/scale.py\n\n`{meta['command']}`\n\n" + table(results))
    plot(results, out / "scale.png")
