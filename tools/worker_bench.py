"""Index workers draining one PostgreSQL queue: throughput, the split between workers, exactly-once, and a kill.

Fills a fresh store with a backlog of N turns written without vectors (as `lightmem serve --no-index-here`
replicas leave them), then starts W `lightmem worker --drain` processes and times them until the queue is empty.
Each worker prints how many memories it embedded: their sum against N counts double work (a row embedded twice).
With --kill SHARE, the first worker is SIGKILLed while it holds a batch, once SHARE of the backlog is embedded; the
others take its batch when its lease runs out, and the report says how long that batch waited and that none was lost.

    python tools/worker_bench.py --store postgresql://... --turns 100000 --workers 1 2 --encoder hashing
    python tools/worker_bench.py --store postgresql://... --turns 2000 --workers 1 2 --encoder tuned
    python tools/worker_bench.py --store postgresql://... --turns 20000 --workers 2 --kill 0.3 --lease 10

The database named in --store is used as a server: each run creates (and drops) a database of its own there.
Writes OUT/workers.json and OUT/workers.md (OUT: --out, default outputs/worker_bench).
"""
from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]


def _db(admin: str, name: str) -> str:
    """The URI of database ``name`` on the server of ``admin``."""
    base, _, query = admin.partition("?")
    base = base.rsplit("/", 1)[0] + "/" + name
    return base + ("?" + query if query else "")


def fill(uri: str, turns: int, encoder: str, users: int = 50) -> float:
    from lightmem.memory import Memory
    from lightmem.retrieval.stage2 import Stage1Selector

    t0 = time.perf_counter()
    with Memory.open(uri, encoder=encoder, selector=Stage1Selector(), background_index=True, index_here=False) as m:
        per = turns // users
        for u in range(users):
            for start in range(0, per, 1000):
                m.add([f"user {u} turn {i}: I walked to the harbour with my friend number {i % 97} and we talked "
                       f"about boat {i % 31}" for i in range(start, min(per, start + 1000))], user_id=f"u{u:03d}")
    return time.perf_counter() - t0


def unembedded(uri: str) -> int:
    with psycopg.connect(uri) as c:
        (n,), = c.execute("SELECT COUNT(*) FROM items WHERE embedding IS NULL").fetchall()
    return int(n)


def _held_by(uri: str, pid: int) -> list[int]:
    with psycopg.connect(uri) as c:
        return [r[0] for r in c.execute("SELECT rid FROM embed_jobs WHERE holder LIKE %s", (f"%:{pid}:%",)).fetchall()]


def _waiting(uri: str, rids: list[int]) -> bool:
    with psycopg.connect(uri) as c:
        return c.execute("SELECT 1 FROM embed_jobs WHERE rid = ANY(%s) LIMIT 1", (rids,)).fetchone() is not None


def run(admin: str, turns: int, workers: int, encoder: str, batch: int, lease: float, kill: float | None) -> dict[str, Any]:
    name = "wb_" + uuid.uuid4().hex[:10]
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}")
    uri = _db(admin, name)
    try:
        fill_s = fill(uri, turns, encoder)
        n = unembedded(uri)
        cmd = [sys.executable, "-m", "lightmem.cli", "worker", "--store", uri, "--drain", "--batch-size", str(batch),
               "--lease", str(lease)]
        t0 = time.perf_counter()
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(workers)]
        killed_left, held, rescued_s = None, [], None
        if kill is not None:  # once this share is embedded: freeze the first worker holding a batch, then kill it
            while unembedded(uri) > n * (1 - kill) and procs[0].poll() is None:
                time.sleep(0.02)
            while procs[0].poll() is None:
                procs[0].send_signal(signal.SIGSTOP)
                held = _held_by(uri, procs[0].pid)
                if held:
                    break
                procs[0].send_signal(signal.SIGCONT)
                time.sleep(0.01)
            procs[0].send_signal(signal.SIGKILL)
            killed_at = time.perf_counter()
            killed_left = unembedded(uri)
            while held and _waiting(uri, held):  # the dead worker's batch: waits for its lease, then another takes it
                time.sleep(0.05)
            rescued_s = time.perf_counter() - killed_at
        outs = [p.communicate(timeout=24 * 3600)[0] for p in procs]
        seconds = time.perf_counter() - t0
        counts, rates = [], []
        for p, out in zip(procs, outs):
            found = re.search(r"embedded ([\d,]+) memories", out)
            counts.append(int(found.group(1).replace(",", "")) if found else None)
            rate = re.search(r"([\d.]+)/s while busy", out)
            rates.append(float(rate.group(1)) if rate else None)
            if p.returncode not in (0, -signal.SIGKILL):
                raise RuntimeError(f"a worker failed ({p.returncode}): {out[-2000:]}")
        left = unembedded(uri)
        row = {"turns": n, "workers": workers, "encoder": encoder, "batch": batch, "lease_s": lease,
               "fill_s": round(fill_s, 1), "drain_s": round(seconds, 2), "turns_per_s": round(n / seconds, 1),
               "per_worker": counts, "per_worker_busy_rate": rates, "left_unembedded": left}
        if kill is None:
            row["embedded_total"] = sum(c or 0 for c in counts)
            row["double_work"] = row["embedded_total"] - n
        else:
            row.update(killed_at_share=kill, unembedded_at_kill=killed_left, held_by_the_killed=len(held),
                       survivors_embedded=sum(c or 0 for c in counts[1:]),
                       its_batch_embedded_s_after_kill=round(rescued_s, 2) if rescued_s is not None else None)
        return row
    finally:
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(f"DROP DATABASE {name} WITH (FORCE)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--store", required=True, help="postgresql:// URI of a database on the server (runs make their own)")
    p.add_argument("--turns", type=int, default=100_000)
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--encoder", default="hashing", choices=["hashing", "minilm", "mpnet", "tuned"])
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lease", type=float, default=30.0)
    p.add_argument("--kill", type=float, default=None, metavar="SHARE",
                   help="SIGKILL the first worker (while it holds a batch) once this share of the backlog is embedded")
    p.add_argument("--out", type=Path, default=ROOT / "outputs/worker_bench")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for w in args.workers:
        row = run(args.store, args.turns, w, args.encoder, args.batch_size, args.lease, args.kill)
        rows.append(row)
        print(json.dumps(row), flush=True)
    (args.out / "workers.json").write_text(json.dumps(rows, indent=1))
    lines = ["| workers | turns | encoder | drain s | turns/s | per worker | double work | left |", "|---:|---:|---|---:|---:|---|---:|---:|"]
    lines += [f"| {r['workers']} | {r['turns']:,} | {r['encoder']} | {r['drain_s']} | {r['turns_per_s']} | "
              f"{', '.join(f'{c:,}' if c is not None else 'killed' for c in r['per_worker'])} | {r.get('double_work', '-')} | "
              f"{r['left_unembedded']} |" for r in rows]
    (args.out / "workers.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
