"""The adapters' per-call overhead over the direct lightmem call (writes numbers, asserts nothing).

Each pair runs ``--n`` times, the adapter's call and the direct one alternating (so a machine's drift hits both),
on the same store: ``store.get`` against ``memory.get_by_key``, ``store.put`` against ``memory.put`` (with the
metadata the adapter writes) for a new key and for a key that exists, and ``store.search`` with a query against
``memory.search`` with the namespace filter; and the instruction hooks of the OpenAI Agents SDK
(``lightmem_instructions``) and of Pydantic AI (``LightmemMemory.instructions``) against ``memory.build_context``, both
sides awaited on one event loop. The overhead is the difference of the medians (P50).

    python tools/adapter_overhead.py                       # hashing encoder, 500 calls per operation
    python tools/adapter_overhead.py --n 2000 --encoder tuned

Writes OUT/results.json and prints a table (OUT: --out, default outputs/adapter_overhead).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from functools import partial
from importlib.metadata import version
from pathlib import Path

import numpy as np

from lightmem import Memory
from lightmem.integrations.langgraph import LightmemStore, _key_string

NS = ("memories", "alice")
THINGS = ["cello lessons", "a pottery class", "the marathon", "a chess club", "the bakery", "a jazz concert",
          "the climbing gym", "a book fair", "the observatory", "a cooking course"]


def _value(i: int) -> dict:
    return {"content": f"alice went to {THINGS[i % len(THINGS)]} on day {i}", "day": i}


def _metadata(key: str, value: dict) -> dict:
    """What the adapter writes for a document (so the direct call does the same work)."""
    return {"lg_ns": {str(i): label for i, label in enumerate(NS)}, "lg_depth": len(NS), "lg_key": key, "lg_value": value}


def _ms(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def measure(memory: Memory, n: int) -> dict[str, dict[str, float]]:
    store = LightmemStore(memory)
    runs: dict[str, tuple[list[float], list[float]]] = {}

    def pair(name: str, adapter, direct, i: int) -> None:
        a, d = runs.setdefault(name, ([], []))
        if i % 2:  # alternate which goes first
            d.append(_ms(direct))
            a.append(_ms(adapter))
        else:
            a.append(_ms(adapter))
            d.append(_ms(direct))

    def direct_put(key: str, value: dict) -> None:
        memory.put(_key_string(NS, key), value["content"], "alice", metadata=_metadata(key, value))

    for i in range(n):  # new keys: the adapter's and the direct call's each write a key never written before
        pair("put (new key)", partial(store.put, NS, f"a{i}", _value(i)), partial(direct_put, f"d{i}", _value(i)), i)
    for i in range(n):  # the same keys again: a replacement
        pair("put (replace)", partial(store.put, NS, f"a{i}", _value(i + n)),
             partial(direct_put, f"d{i}", _value(i + n)), i)
    for i in range(n):
        pair("get", partial(store.get, NS, f"a{i}"), partial(memory.get_by_key, _key_string(NS, f"d{i}"), "alice"), i)
    filters = {"metadata": {"lg_depth": {"$gte": 2}, "lg_ns.0": {"$eq": "memories"}}}
    for i in range(n):
        q = f"When did alice go to {THINGS[i % len(THINGS)]}?"
        pair("search (query, k=10)", partial(store.search, NS, query=q, limit=10),
             partial(memory.search, q, "alice", k=10, filters=filters), i)

    import asyncio
    from types import SimpleNamespace

    from lightmem.integrations.openai_agents import lightmem_instructions
    from lightmem.integrations.pydantic_ai import LightmemMemory

    loop = asyncio.new_event_loop()
    agents_hook = lightmem_instructions(memory, "alice", base="", budget=600)
    pydantic_hook = LightmemMemory(memory, "alice", budget=600)

    async def direct_context(q: str) -> str:
        return memory.build_context(q, "alice", budget=600).prompt

    for i in range(n):
        q = f"When did alice go to {THINGS[i % len(THINGS)]}?"
        agents_ctx = SimpleNamespace(turn_input=[{"role": "user", "content": q}])
        pair("OpenAI Agents instructions", lambda c=agents_ctx: loop.run_until_complete(agents_hook(c, None)),
             lambda q=q: loop.run_until_complete(direct_context(q)), i)
        pydantic_ctx = SimpleNamespace(prompt=q, messages=[], deps=None)
        pair("Pydantic AI instructions", lambda c=pydantic_ctx: loop.run_until_complete(pydantic_hook.instructions(c)),
             lambda q=q: loop.run_until_complete(direct_context(q)), i)
    loop.close()

    out = {}
    for name, (a, d) in runs.items():
        a_ms, d_ms = np.array(a), np.array(d)
        out[name] = {"calls": len(a), "adapter_p50_ms": float(np.median(a_ms)), "direct_p50_ms": float(np.median(d_ms)),
                     "overhead_p50_ms": float(np.median(a_ms) - np.median(d_ms)),
                     "adapter_p90_ms": float(np.percentile(a_ms, 90)), "direct_p90_ms": float(np.percentile(d_ms, 90))}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=500, help="calls per operation and side (default 500)")
    p.add_argument("--encoder", default="hashing", help="Memory.open's encoder (default hashing: no model)")
    p.add_argument("--out", type=Path, default=Path("outputs/adapter_overhead"))
    p.add_argument("--warmup", type=int, default=20, help="untimed calls first (default 20)")
    args = p.parse_args(argv)

    folder = Path(tempfile.mkdtemp(prefix="adapter_overhead_"))
    try:
        with Memory.open(folder / "s", encoder=args.encoder, background_index=False) as memory:
            warm = LightmemStore(memory)
            for i in range(args.warmup):
                warm.put(("memories", "warmup"), f"w{i}", _value(i))
                warm.get(("memories", "warmup"), f"w{i}")
                warm.search(("memories", "warmup"), query="alice went")
            results = measure(memory, args.n)
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    report = {"results": results, "n": args.n, "encoder": args.encoder, "store": "embedded (SQLite)",
              "python": sys.version.split()[0], "platform": platform.platform(), "cpus": os.cpu_count(),
              "versions": {pkg: version(pkg) for pkg in ("langgraph", "langchain-core", "openai-agents", "pydantic-ai-slim")},
              "command": "python tools/adapter_overhead.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"{'operation':<28}{'adapter P50':>13}{'direct P50':>12}{'overhead P50':>14}{'adapter P90':>13}{'direct P90':>12}")
    for name, r in results.items():
        print(f"{name:<28}{r['adapter_p50_ms']:>10.3f} ms{r['direct_p50_ms']:>9.3f} ms{r['overhead_p50_ms']:>11.3f} ms"
              f"{r['adapter_p90_ms']:>10.3f} ms{r['direct_p90_ms']:>9.3f} ms")
    print(f"wrote {args.out / 'results.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
