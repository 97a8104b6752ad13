"""Turns per second written through `POST /v1/batch` against one `POST /v1/memories` per turn (writes numbers,
asserts nothing; exits 1 if a turn is missing afterwards).

Starts `lightmem serve` on 127.0.0.1 over a fresh store, then writes the same turns twice, for two users: one request
per turn, then batches of `--ops` add operations (one turn each; each committing on its own, then atomic: one commit
per batch), all through `lightmem.client.MemoryClient`. The
server's background indexer embeds after each request returns, as shipped.

    python tools/batch_throughput.py                          # 1,000 turns, the default encoder
    python tools/batch_throughput.py --encoder hashing --turns 5000 --ops 500

Writes OUT/results.json and OUT/results.md (OUT: --out, default outputs/batch_throughput).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from lightmem.client import MemoryClient
from lightmem.server import launch

ROOT = Path(__file__).resolve().parents[1]
KEY = "batch-throughput-admin-key"


def _serve(out: Path, encoder: str) -> tuple[subprocess.Popen, str]:
    (out / "keys.json").write_text(json.dumps({KEY: ["*"]}))
    options = ["--workers", "1"] + ([] if encoder == "tuned" else ["--encoder", encoder])
    return launch.start(out / "store", out / "keys.json", out / "server.log", options, timeout=300, cwd=ROOT)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=1000, help="turns written each way (default 1,000)")
    p.add_argument("--ops", type=int, default=100, help="add operations per batch request (default 100, at most 1,000)")
    p.add_argument("--encoder", choices=["tuned", "minilm", "hashing"], default="tuned")
    p.add_argument("--out", default="outputs/batch_throughput")
    args = p.parse_args(argv)
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    texts = [f"On day {i} I went to the market in town number {i % 37} and bought {i % 11} apples" for i in range(args.turns)]
    load = os.getloadavg()[0]
    proc, base = _serve(out, args.encoder)
    try:
        with MemoryClient(base, KEY, timeout=300) as client:
            t0 = time.perf_counter()
            for i, text in enumerate(texts):
                client.add({"speaker": "ana", "text": text, "id": f"single-{i}"}, user_id="single")
            single = time.perf_counter() - t0
            timed = {}
            for user, atomic in (("batched", False), ("atomic", True)):
                t0 = time.perf_counter()
                for start in range(0, len(texts), args.ops):
                    ops = [{"op": "add", "user_id": user, "messages": [{"speaker": "ana", "text": t, "id": f"{user}-{start + j}"}]}
                           for j, t in enumerate(texts[start:start + args.ops])]
                    results = client.batch(ops, atomic=atomic)
                    assert all(r["status"] == "ok" for r in results)
                timed[user] = time.perf_counter() - t0
            batched, atomic_s = timed["batched"], timed["atomic"]
            stored = {u: len(client.get_all(u)) for u in ("single", "batched", "atomic")}
    finally:
        launch.stop(proc, timeout=60)
    results = {"turns": args.turns, "ops_per_batch": args.ops, "encoder": args.encoder, "load_average_before": round(load, 2),
               "single": {"seconds": round(single, 2), "turns_per_s": round(args.turns / single, 1)},
               "batch": {"seconds": round(batched, 2), "turns_per_s": round(args.turns / batched, 1)},
               "batch_atomic": {"seconds": round(atomic_s, 2), "turns_per_s": round(args.turns / atomic_s, 1)}, "stored": stored}
    (out / "results.json").write_text(json.dumps(results, indent=2))
    md = "\n".join([
        f"`lightmem serve` (1 worker, encoder {args.encoder}, embedding in the background): {args.turns:,} turns written "
        f"one request each, then in batches of {args.ops}; {os.cpu_count()} CPU cores shared with the client, load "
        f"average {load:.1f} before", "", "| route | requests | seconds | turns/s |", "| --- | ---: | ---: | ---: |",
        f"| POST /v1/memories, one turn each | {args.turns:,} | {single:.2f} | {args.turns / single:.1f} |",
        f"| POST /v1/batch, {args.ops} adds each (a commit each) | {-(-args.turns // args.ops):,} | {batched:.2f} | "
        f"{args.turns / batched:.1f} |",
        f"| POST /v1/batch, {args.ops} adds each, atomic (one commit) | {-(-args.turns // args.ops):,} | {atomic_s:.2f} | "
        f"{args.turns / atomic_s:.1f} |"])
    (out / "results.md").write_text(md + "\n")
    print(md)
    return 0 if stored == {"single": args.turns, "batched": args.turns, "atomic": args.turns} else 1


if __name__ == "__main__":
    sys.exit(main())
