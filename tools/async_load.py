"""AsyncMemory under concurrent coroutines: the event loop's lag and the throughput against the synchronous API
(writes numbers, asserts nothing).

The same list of operations (adds of 1-3 turns and budgeted build_context calls, over many users) runs twice on
fresh stores: one by one through ``Memory``, then by ``--coroutines`` concurrent coroutines through ``AsyncMemory``
while a probe coroutine sleeps 5 ms again and again and records how late each wake-up is (the loop's lag: how long
the loop could not run anything else).

    python tools/async_load.py                                   # the default pipeline, 16 coroutines over 20 users
    python tools/async_load.py --encoder hashing --ops 2000      # no model: the overhead of the wrapper itself

Writes OUT/results.json and OUT/results.md (OUT: --out, default outputs/async_load).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from lightmem import AsyncMemory, Memory
from lightmem.async_memory import freeze_loaded

THINGS = ["cello lessons", "a pottery class", "the marathon", "a chess club", "the bakery", "a jazz concert",
          "the climbing gym", "a book fair", "the observatory", "a cooking course"]
PLACES = ["Lisbon", "Kyoto", "Oslo", "Lima", "Cairo", "Quito", "Perth", "Riga", "Turin", "Hanoi"]
PROBE_S = 0.005


def operations(n: int, users: int, write_share: float, seed: int) -> list[tuple[str, str, object]]:
    """(kind, user, argument) in a fixed order: an add's list of turns or a context's question."""
    rng = random.Random(seed)
    ops: list[tuple[str, str, object]] = []
    for i in range(n):
        user = f"user{rng.randrange(users):03d}"
        if rng.random() < write_share:
            turns = [f"{user} went to {rng.choice(THINGS)} in {rng.choice(PLACES)} on day {i}-{j}"
                     for j in range(rng.randint(1, 3))]
            ops.append(("add", user, turns))
        else:
            ops.append(("context", user, f"When did {user} go to {rng.choice(THINGS)}?"))
    return ops


def _options(args: argparse.Namespace) -> dict:
    return {} if args.encoder == "tuned" else {"encoder": args.encoder}


def _seed(memory: Memory, users: int) -> None:
    for u in range(users):
        memory.add([f"user{u:03d} likes {THINGS[u % len(THINGS)]}", f"user{u:03d} lives in {PLACES[u % len(PLACES)]}"],
                   user_id=f"user{u:03d}")
    memory.flush_index()


def run_sync(args: argparse.Namespace, ops: list, store: Path) -> dict:
    memory = Memory.open(store, **_options(args))
    freeze_loaded()  # as AsyncMemory.open does: both runs pay the same collector, the comparison is of the APIs
    try:
        _seed(memory, args.users)
        ms = []
        t0 = time.perf_counter()
        for kind, user, arg in ops:
            s = time.perf_counter()
            if kind == "add":
                memory.add(arg, user_id=user)
            else:
                memory.build_context(arg, user, budget=args.budget)
            ms.append((time.perf_counter() - s) * 1000)
        elapsed = time.perf_counter() - t0
    finally:
        memory.close()
    return {"seconds": round(elapsed, 2), "ops_per_s": round(len(ops) / elapsed, 1), **_percentiles("op_ms", ms)}


async def _run_async(args: argparse.Namespace, ops: list, store: Path) -> dict:
    memory = await AsyncMemory.open(store, **_options(args))
    lags: list[float] = []
    ms: list[float] = []
    done = asyncio.Event()

    async def probe() -> None:
        while not done.is_set():
            s = time.perf_counter()
            await asyncio.sleep(PROBE_S)
            lags.append((time.perf_counter() - s - PROBE_S) * 1000)

    try:
        await asyncio.to_thread(_seed, memory.memory, args.users)
        queue = list(reversed(ops))

        async def worker() -> None:
            while queue:
                kind, user, arg = queue.pop()
                s = time.perf_counter()
                if kind == "add":
                    await memory.add(arg, user_id=user)
                else:
                    await memory.build_context(arg, user, budget=args.budget)
                ms.append((time.perf_counter() - s) * 1000)

        watcher = asyncio.ensure_future(probe())
        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(args.coroutines)))
        elapsed = time.perf_counter() - t0
        done.set()
        await watcher
    finally:
        await memory.aclose()
    return {"seconds": round(elapsed, 2), "ops_per_s": round(len(ops) / elapsed, 1), **_percentiles("op_ms", ms),
            **_percentiles("loop_lag_ms", lags), "lag_samples": len(lags)}


def _percentiles(name: str, values: list[float]) -> dict:
    a = np.asarray(values, dtype=np.float64)
    return {f"{name}_p50": round(float(np.percentile(a, 50)), 2), f"{name}_p99": round(float(np.percentile(a, 99)), 2),
            f"{name}_max": round(float(a.max()), 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", type=int, default=400, help="operations in each run (default 400)")
    p.add_argument("--users", type=int, default=20, help="users the operations spread over (default 20)")
    p.add_argument("--coroutines", type=int, default=16, help="concurrent coroutines of the async run (default 16)")
    p.add_argument("--write-share", type=float, default=0.5, help="share of adds; the rest build contexts (default 0.5)")
    p.add_argument("--budget", type=int, default=600, help="prompt budget of each context (default 600)")
    p.add_argument("--encoder", choices=["tuned", "minilm", "hashing"], default="tuned",
                   help="tuned: the default pipeline (all-mpnet-base-v2 + the trained adapter, the trained ranker)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="outputs/async_load")
    args = p.parse_args(argv)
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    ops = operations(args.ops, args.users, args.write_share, args.seed)
    load = os.getloadavg()[0]
    sync = run_sync(args, ops, out / "store-sync")
    asyn = asyncio.run(_run_async(args, ops, out / "store-async"))
    results = {"sync": sync, "async": asyn, "args": vars(args), "load_average_before": round(load, 2),
               "cpu_count": os.cpu_count()}
    (out / "results.json").write_text(json.dumps(results, indent=2))
    md = "\n".join([
        f"AsyncMemory against Memory: {args.ops} operations ({args.write_share:.0%} adds of 1-3 turns, the rest "
        f"build_context at {args.budget} tokens) over {args.users} users, encoder {args.encoder}; "
        f"{os.cpu_count()} CPU cores, load average {load:.1f} before the run", "",
        "| API | callers | ops/s | op P50 / P99 ms | event-loop lag P50 / P99 / max ms |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| Memory | 1 | {sync['ops_per_s']} | {sync['op_ms_p50']} / {sync['op_ms_p99']} | (no loop) |",
        f"| AsyncMemory | {args.coroutines} coroutines | {asyn['ops_per_s']} | {asyn['op_ms_p50']} / {asyn['op_ms_p99']} | "
        f"{asyn['loop_lag_ms_p50']} / {asyn['loop_lag_ms_p99']} / {asyn['loop_lag_ms_max']} |"])
    (out / "results.md").write_text(md + "\n")
    print(md)
    print(f"\nwrote {out}/results.json, results.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
