"""Growth benchmark on PostgreSQL: search cost as one database grows to millions of memories (writes numbers).

One database is filled in steps (default 100k, 1M, 5M memories; 100 per user, so 50,000 users at 5M) through the
store's own write path with the hashing encoder (384-d vectors: no model, the same row size as MiniLM's), and
after each step a fresh process opens it as an API replica would and searches: a sample of users it has not served
(cold: the user's BM25 view is built from the table) and the last of them again (warm). Per step it reports
search P50/P95 cold and warm, the replica's RSS, and the database's size per million memories.

    python tools/pg_growth.py --store postgresql://user:pw@host/db              # 100k, 1M, 5M
    python tools/pg_growth.py --store ... --steps 20000 100000 --cold 100      # a short run
    python tools/pg_growth.py --store ... --resume                               # keep what the database holds
    python tools/pg_growth.py --store x --figure run1/growth.json run2/growth.json  # one figure of several runs

Writes OUT/growth.json, OUT/growth.md and OUT/growth.png (OUT: --out, default outputs/pg_growth).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DIM = 384
PER_USER = 100


def _uid(u: int) -> str:
    return f"g{u:06d}"


def fill(uri: str, start_users: int, end_users: int, seed: int = 0) -> float:
    """Write users ``start_users .. end_users - 1``, PER_USER memories each; returns seconds."""
    from rich.progress import Progress

    from lightmem.evaluation.benchmarks.scale import text_of
    from lightmem.models.embedder import HashingEmbedder
    from lightmem.stores.factory import open_store
    from lightmem.types import ItemKind, MemoryItem, Turn

    embedder = HashingEmbedder(DIM)
    store = open_store(uri, dim=DIM, embedder=embedder.name)
    t0 = time.perf_counter()
    try:
        with Progress() as bar:
            task = bar.add_task(f"fill users {start_users:,}-{end_users:,}", total=(end_users - start_users) * PER_USER)
            for u in range(start_users, end_users):
                rng, uid = random.Random(seed * 1_000_003 + u), _uid(u)
                turns, items = [], []
                for j in range(PER_USER):
                    ts, text = 1.6e9 + j * 600.0, text_of(rng, j)
                    turns.append(Turn(turn_id=f"{uid}-{j}", speaker="user", text=text, timestamp=ts))
                    items.append(MemoryItem(id=store.new_id(), user_id=uid, text=text, kind=ItemKind.EPISODIC, event_time=ts,
                                            created_at=ts, last_access=ts, provenance=[f"{uid}-{j}"]))
                store.write(uid, turns, items, embedder.encode([t.text for t in turns]), now=1.7e9)
                bar.advance(task, PER_USER)
    finally:
        store.close()
    return time.perf_counter() - t0


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def probe(uri: str, users: int, cold: int, warm: int, seed: int, out: Any) -> None:
    """In a fresh process: cold searches of ``cold`` users drawn from all, then ``warm`` rounds over the last 20."""
    from lightmem.evaluation.benchmarks.scale import NAMES, PLACES, THINGS
    from lightmem.memory import Memory
    from lightmem.models.embedder import HashingEmbedder
    from lightmem.retrieval.stage2 import Stage1Selector
    from lightmem.stores.factory import open_store

    rng = random.Random(seed)
    store = open_store(uri, dim=DIM, embedder=f"hashing-{DIM}")
    memory = Memory.open(store, embedder=HashingEmbedder(DIM), selector=Stage1Selector(), background_index=False)
    queries = [f"When did {rng.choice(NAMES)} go to {rng.choice(THINGS)} in {rng.choice(PLACES)}?" for _ in range(64)]
    memory.search(queries[0], user_id=_uid(0), k=10)  # imports and lazy set-up
    memory.store.drop_views()
    sample = rng.sample(range(users), min(cold, users))
    cold_ms, warm_ms = [], []
    for i, u in enumerate(sample):
        t0 = time.perf_counter()
        memory.search(queries[i % 64], user_id=_uid(u), k=10)
        cold_ms.append((time.perf_counter() - t0) * 1e3)
    recent = sample[-20:]
    for rep in range(warm):
        for j, u in enumerate(recent):
            t0 = time.perf_counter()
            memory.search(queries[(rep * 7 + j) % 64], user_id=_uid(u), k=10)
            warm_ms.append((time.perf_counter() - t0) * 1e3)
    (db_bytes, items_bytes, items), = store._query(
        "SELECT pg_database_size(current_database()), pg_total_relation_size('items'), (SELECT COUNT(*) FROM items)")
    out.put({"cold": cold_ms, "warm": warm_ms, "rss_mb": round(_rss_mb(), 1), "db_bytes": int(db_bytes),
             "items_bytes": int(items_bytes), "items": int(items), "cache": memory.store.cache_stats()})
    memory.close()


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def figure(paths: list[Path], out: Path) -> None:
    """One figure of several runs' rows (growth.json files, or the lists they hold): per table size, the median of the
    runs' cold and warm P50 / P95, with their range."""
    import statistics

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_size: dict[int, list[dict[str, Any]]] = {}
    for path in paths:
        for row in json.loads(Path(path).read_text()):
            by_size.setdefault(row["memories"] // 10_000 * 10_000, []).append(row)
    xs = sorted(by_size)
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for key, label in (("cold_p50_ms", "cold P50"), ("cold_p95_ms", "cold P95"), ("warm_p50_ms", "warm P50"),
                       ("warm_p95_ms", "warm P95")):
        vals = [[r[key] for r in by_size[x]] for x in xs]
        med = [statistics.median(v) for v in vals]
        ax.errorbar(xs, med, yerr=[[m - min(v) for m, v in zip(med, vals)], [max(v) - m for m, v in zip(med, vals)]],
                    marker="o", capsize=3, label=label)
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("memories in the PostgreSQL table (100 per user)")
    ax.set_ylabel("one user's search, ms")
    ax.set_title(f"One user's search as the table grows (median of {min(len(v) for v in by_size.values())}+ runs, range)")
    ax.legend(loc="lower right", ncol=2, fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--store", required=True, help="postgresql:// URI of an empty database (or one this tool filled)")
    p.add_argument("--steps", type=int, nargs="+", default=[100_000, 1_000_000, 5_000_000], help="memories after each step")
    p.add_argument("--cold", type=int, default=400, help="users searched cold per step")
    p.add_argument("--warm", type=int, default=10, help="rounds over the last 20 of them")
    p.add_argument("--resume", action="store_true", help="the database holds earlier steps: fill only what is missing")
    p.add_argument("--out", type=Path, default=ROOT / "outputs/pg_growth")
    p.add_argument("--figure", nargs="+", type=Path, metavar="JSON",
                   help="draw OUT/growth_runs.png from these runs' growth.json files instead of measuring")
    args = p.parse_args(argv)
    if args.figure:
        args.out.mkdir(parents=True, exist_ok=True)
        figure(args.figure, args.out / "growth_runs.png")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    from lightmem.stores.factory import open_store

    have = 0
    if args.resume:
        store = open_store(args.store, dim=DIM, embedder=f"hashing-{DIM}")
        (have,), = store._query("SELECT COUNT(DISTINCT user_id) FROM items")
        store.close()
    rows: list[dict[str, Any]] = []
    ctx = mp.get_context("spawn")
    for step in args.steps:
        users = step // PER_USER
        fill_s = fill(args.store, have, users) if users > have else 0.0
        rate = (users - have) * PER_USER / fill_s if fill_s else None
        have = max(have, users)
        q = ctx.Queue()
        child = ctx.Process(target=probe, args=(args.store, users, args.cold, args.warm, step, q))
        child.start()
        r = q.get(timeout=7200)
        child.join()
        row = {"memories": r["items"], "users": users, "fill_s": round(fill_s, 1),
               "fill_per_s": round(rate, 1) if rate else None,
               "cold_p50_ms": round(pct(r["cold"], 50), 2), "cold_p95_ms": round(pct(r["cold"], 95), 2),
               "warm_p50_ms": round(pct(r["warm"], 50), 2), "warm_p95_ms": round(pct(r["warm"], 95), 2),
               "replica_rss_mb": r["rss_mb"], "db_gb": round(r["db_bytes"] / 1e9, 2),
               "db_mb_per_million": round(r["db_bytes"] / 1e6 / (r["items"] / 1e6), 1),
               "items_table_mb_per_million": round(r["items_bytes"] / 1e6 / (r["items"] / 1e6), 1),
               "n_cold": len(r["cold"]), "n_warm": len(r["warm"])}
        rows.append(row)
        print(json.dumps(row), flush=True)
        (args.out / "growth.json").write_text(json.dumps(rows, indent=1))
    _report(rows, args.out)
    return 0


def _report(rows: list[dict[str, Any]], out: Path) -> None:
    head = ("| memories | users | cold P50 / P95 ms | warm P50 / P95 ms | replica RSS MB | database GB | MB per million |\n"
            "|---:|---:|---:|---:|---:|---:|---:|\n")
    lines = [f"| {r['memories']:,} | {r['users']:,} | {r['cold_p50_ms']} / {r['cold_p95_ms']} | {r['warm_p50_ms']} / "
             f"{r['warm_p95_ms']} | {r['replica_rss_mb']} | {r['db_gb']} | {r['db_mb_per_million']} |" for r in rows]
    (out / "growth.md").write_text(head + "\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6, 3.6))
    xs = [r["memories"] for r in rows]
    for key, label in (("cold_p95_ms", "cold P95"), ("cold_p50_ms", "cold P50"), ("warm_p95_ms", "warm P95"),
                       ("warm_p50_ms", "warm P50")):
        ax.plot(xs, [r[key] for r in rows], marker="o", label=label)
    ax.set_xscale("log")
    ax.set_xlabel("memories in the database (100 per user)")
    ax.set_ylabel("search latency, ms")
    ax.set_ylim(bottom=0)
    ax.set_title("PostgreSQL: one user's search as the table grows")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "growth.png", dpi=120)


if __name__ == "__main__":
    sys.exit(main())
