"""Load benchmark of `lightmem serve` (writes numbers, asserts nothing; exits 1 if a turn was lost or leaked).

Starts the server on 127.0.0.1 with each worker count in turn, drives it with concurrent HTTP clients
mixing adds and searches over many users (each user with its own API key) for a bounded time, then
checks that every acknowledged turn is in the store and that no search returned another user's item.

    python eval/serve_load.py                                  # 20 s per worker count, 1 then 2 workers, hashing embedder
    python eval/serve_load.py --duration 60 --clients 32 --users 200 --search-ratio 0.8
    python eval/serve_load.py --encoder tuned --selector trained   # the default read path (mpnet + the trained adapter, ranker)
    python eval/serve_load.py --store postgresql://user:pw@host/db  # PostgreSQL + pgvector instead of SQLite + FAISS
    python eval/serve_load.py --clients 1 --search-ratio 1 --big-turn 100000 --workers 1   # searches while a longest turn is added
    python eval/serve_load.py --clients 1 --search-ratio 1 --bulk 2000 --workers 1 --encoder tuned --store postgresql://...
                                                               # another user's searches while requests of 2,000 turns are added

Writes OUT/results.json and OUT/results.md (OUT: --out, default outputs/serve_load). The load generator
runs on the same machine as the server, so the numbers include its CPU use.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PLACES = ["Lisbon", "Kyoto", "Oslo", "Lima", "Cairo", "Quito", "Perth", "Riga", "Turin", "Hanoi"]
THINGS = ["cello lessons", "a pottery class", "the marathon", "a chess club", "the bakery", "a jazz concert",
          "the climbing gym", "a book fair", "the observatory", "a cooking course"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(args: argparse.Namespace, store: str, keys: Path, workers: int, log: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    cmd = [sys.executable, "-m", "lightmem.cli", "serve", "--store", store, "--keys", str(keys), "--port", str(port),
           "--workers", str(workers), "--selector", args.selector]
    if args.encoder != "tuned":
        cmd += ["--encoder", args.encoder]
    if args.max_turn_chars:
        cmd += ["--max-turn-chars", str(args.max_turn_chars)]
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=ROOT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + args.startup_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}; see {log}")
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return proc, base
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise RuntimeError(f"the server did not answer /healthz within {args.startup_timeout} s; see {log}")


def _rss_mb(pid: int) -> float:
    """Resident memory of a process and its children (the workers), MiB, from /proc (0 where there is none)."""
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            total += int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) / 1024
            todo += [int(c) for t in Path(f"/proc/{p}/task").iterdir()
                     for c in (t / "children").read_text().split()]
        except (OSError, StopIteration, ValueError):
            continue
    return total


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)  # graceful: in-flight requests finish, each worker closes its Memory
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _turn(user: str, rng: random.Random) -> str:
    return f"{user} went to {rng.choice(THINGS)} in {rng.choice(PLACES)} with friend {rng.randrange(1000)}."


def _big_turn(chars: int, rng: random.Random) -> str:
    """``chars`` characters of words never seen before (the costliest text to analyse: no cached stems)."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    out, n = [], 0
    while n < chars:
        w = "".join(rng.choice(letters) for _ in range(rng.randint(4, 10)))
        out.append(w)
        n += len(w) + 1
    return " ".join(out)[:chars]


class Load:
    """What the clients saw: latencies per endpoint, errors, acknowledged turns, returned hits."""

    def __init__(self) -> None:
        self.ms: dict[str, list[float]] = defaultdict(list)
        self.errors: dict[str, int] = defaultdict(int)
        self.acked: dict[str, set[str]] = defaultdict(set)  # user -> turn ids the server acknowledged
        self.hits: list[tuple[str, list[str]]] = []  # (user, hit ids) per answered search

    async def add(self, http: httpx.AsyncClient, user: str, key: str, turn_ids: list[str], rng: random.Random) -> None:
        body = {"user_id": user, "messages": [{"speaker": user, "text": _turn(user, rng), "id": t} for t in turn_ids]}
        await self._call(http, "add", "/v1/memories", key, body, lambda r: self.acked[user].update(turn_ids))

    async def add_big(self, http: httpx.AsyncClient, user: str, key: str, turn_id: str, chars: int, rng: random.Random) -> None:
        body = {"user_id": user, "messages": [{"speaker": user, "text": _big_turn(chars, rng), "id": turn_id}]}
        await self._call(http, "add_big", "/v1/memories", key, body, lambda r: self.acked[user].add(turn_id))

    async def add_bulk(self, http: httpx.AsyncClient, user: str, key: str, turn_ids: list[str], rng: random.Random) -> None:
        body = {"user_id": user, "messages": [{"speaker": user, "text": _turn(user, rng), "id": t} for t in turn_ids]}
        await self._call(http, "add_bulk", "/v1/memories", key, body, lambda r: self.acked[user].update(turn_ids))

    async def search(self, http: httpx.AsyncClient, user: str, key: str, rng: random.Random) -> None:
        body = {"user_id": user, "query": f"When did {user} go to {rng.choice(THINGS)}?", "k": 5}
        await self._call(http, "search", "/v1/search", key, body,
                         lambda r: self.hits.append((user, [h["id"] for h in r.json()["hits"]])))

    async def _call(self, http, endpoint: str, path: str, key: str, body: dict, on_ok) -> None:
        t0 = time.perf_counter()
        try:
            r = await http.post(path, json=body, headers={"Authorization": f"Bearer {key}"})
        except httpx.HTTPError as exc:
            self.errors[f"{endpoint}: {type(exc).__name__}"] += 1
            return
        self.ms[endpoint].append((time.perf_counter() - t0) * 1000)
        if r.status_code >= 300:
            self.errors[f"{endpoint}: HTTP {r.status_code}"] += 1
        else:
            on_ok(r)


async def _drive(base: str, keys: dict[str, str], args: argparse.Namespace, load: Load, seed: int) -> float:
    users = sorted(keys)
    limits = httpx.Limits(max_connections=args.clients, max_keepalive_connections=args.clients)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=args.request_timeout) as http:
        # Seed every user (not timed), so searches have something to rank.
        seed_rng = random.Random(seed)
        sem = asyncio.Semaphore(args.clients)

        async def seed_user(u: str) -> None:
            async with sem:
                await load.add(http, u, keys[u], [f"{u}-seed-{seed}-{j}" for j in range(args.seed_turns)], seed_rng)

        await asyncio.gather(*(seed_user(u) for u in users))
        load.ms.clear()
        deadline = time.monotonic() + args.duration

        async def client(c: int) -> None:
            rng, n = random.Random(seed * 1000 + c), 0
            while time.monotonic() < deadline:
                u = rng.choice(users)
                if rng.random() < args.search_ratio:
                    await load.search(http, u, keys[u], rng)
                else:
                    await load.add(http, u, keys[u], [f"{u}-s{seed}-c{c}-{n}-{j}" for j in range(rng.randint(1, 3))], rng)
                    n += 1

        async def big_client() -> None:  # one more client: the longest turns the server takes, back to back
            rng, n, u = random.Random(seed), 0, users[0]
            # its own connection: sharing the others' pool, it would wait for a free one, not for the server
            async with httpx.AsyncClient(base_url=base, timeout=args.request_timeout) as own:
                while time.monotonic() < deadline:
                    await load.add_big(own, u, keys[u], f"{u}-big-{seed}-{n}", args.big_turn, rng)
                    n += 1

        async def bulk_client() -> None:  # one more client: requests of --bulk turns, back to back, for the last user
            rng, n, u = random.Random(seed), 0, users[-1]
            async with httpx.AsyncClient(base_url=base, timeout=args.request_timeout) as own:
                while time.monotonic() < deadline:
                    await load.add_bulk(own, u, keys[u], [f"{u}-bulk-{seed}-{n}-{j}" for j in range(args.bulk)], rng)
                    n += 1

        t0 = time.monotonic()
        extra = ([big_client()] if args.big_turn else []) + ([bulk_client()] if args.bulk else [])
        await asyncio.gather(*(client(c) for c in range(args.clients)), *extra)
        return time.monotonic() - t0


def _verify(store: str, load: Load, erase: bool) -> dict:
    """Read the store through the store interface (the server is stopped): lost turns and cross-user hits.
    ``erase``: then delete the run's users (a shared PostgreSQL database keeps nothing of the run)."""
    from lightmem.models.embedder import embedder_for
    from lightmem.stores import open_store, stored_embedder

    name = stored_embedder(store)
    db = open_store(store, dim=embedder_for(name).dim, embedder=name)
    try:
        lost = sum(len(ids - db.known_turns(u, sorted(ids))) for u, ids in load.acked.items())
        owned = {u: {it.id for it in db.list(u, include_archived=True)} for u in {u for u, _ in load.hits}}
        leaked = sum(h not in owned[u] for u, hits in load.hits for h in hits)
        if erase:
            for u in load.acked:
                db.delete_user(u)
    finally:
        db.close()
    return {"acknowledged_turns": sum(len(v) for v in load.acked.values()), "lost_turns": lost,
            "searches_checked": len(load.hits), "cross_user_hits": leaked}


def run_one(args: argparse.Namespace, workers: int, out: Path) -> dict:
    if args.store:  # a server database: this run's users are its own (and erased afterwards)
        store, run = args.store, f"w{workers}-{os.urandom(3).hex()}-"
    else:
        store, run = str(out / f"store-w{workers}"), ""
        if Path(store).exists():
            import shutil

            shutil.rmtree(store)
    users = [f"{run}user{i:03d}" for i in range(args.users)]
    keys = {u: f"key-{u}-{os.urandom(12).hex()}" for u in users}
    keys_file = out / f"keys-w{workers}.json"
    keys_file.write_text(json.dumps({k: [u] for u, k in keys.items()}))
    load = Load()
    proc, base = _start(args, store, keys_file, workers, out / f"server-w{workers}.log")
    rss_start = _rss_mb(proc.pid)
    try:
        elapsed = asyncio.run(_drive(base, keys, args, load, seed=workers))
        rss_end = _rss_mb(proc.pid)
        views = httpx.get(f"{base}/healthz", timeout=10).json().get("views")  # one worker's, when there are several
    finally:
        _stop(proc)
    n = sum(len(v) for v in load.ms.values())
    row = {"store": "postgres" if args.store else "sqlite", "workers": workers, "clients": args.clients, "users": args.users,
           "big_turn_chars": args.big_turn, "bulk_turns": args.bulk, "rss_mb_start": round(rss_start), "rss_mb_end": round(rss_end), "views": views,
           "seconds": round(elapsed, 1), "requests": n, "rps": round(n / elapsed, 1), "errors": dict(load.errors)}
    for ep, ms in sorted(load.ms.items()):
        row[ep] = {"n": len(ms), "p50_ms": round(float(np.percentile(ms, 50)), 1), "p95_ms": round(float(np.percentile(ms, 95)), 1),
                   "p99_ms": round(float(np.percentile(ms, 99)), 1), "max_ms": round(float(np.max(ms)), 1)}
    row.update(_verify(store, load, erase=bool(args.store)))
    return row


def table(rows: list[dict], note: str) -> str:
    lines = [f"`lightmem serve` under load ({note})", "",
             "| store | workers | clients | users | req/s | add P50 / P95 ms | search P50 / P95 / max ms | errors | acked turns | lost | cross-user hits |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    if any(r.get("add_big") for r in rows):
        lines[0] += "; one more client adds turns of " + ", ".join(sorted({f"{r['big_turn_chars']:,}" for r in rows})) + \
            " characters back to back: " + "; ".join(f"{r['workers']} worker(s): add P50 / P95 {r['add_big']['p50_ms']} / "
                                                      f"{r['add_big']['p95_ms']} ms over {r['add_big']['n']}" for r in rows if r.get("add_big"))
    if any(r.get("add_bulk") for r in rows):
        lines[0] += "; one more client adds requests of " + ", ".join(sorted({f"{r['bulk_turns']:,}" for r in rows})) + \
            " turns back to back: " + "; ".join(f"{r['workers']} worker(s): P50 / max {r['add_bulk']['p50_ms']} / "
                                                f"{r['add_bulk']['max_ms']} ms over {r['add_bulk']['n']}, the others' search P99 "
                                                f"{r.get('search', {}).get('p99_ms')} ms" for r in rows if r.get("add_bulk"))
    for r in rows:
        a, s = r.get("add", {}), r.get("search", {})
        lines.append(f"| {r.get('store', 'sqlite')} | {r['workers']} | {r['clients']} | {r['users']} | {r['rps']} | {a.get('p50_ms')} / {a.get('p95_ms')} | "
                     f"{s.get('p50_ms')} / {s.get('p95_ms')} / {s.get('max_ms')} | {sum(r['errors'].values())} | {r['acknowledged_turns']} | "
                     f"{r['lost_turns']} | {r['cross_user_hits']} |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0]
    rows = [run_one(args, w, out) for w in args.workers]
    note = (f"{args.duration:g} s each, search ratio {args.search_ratio}, encoder {args.encoder}, selector {args.selector}, "
            f"{os.cpu_count()} CPU cores shared with the load generator; load average {load_before:.1f} before the run")
    from lightmem.stores import describe

    results = {"runs": rows, "note": note, "args": {**vars(args), "store": describe(args.store) if args.store else None}}
    (out / "results.json").write_text(json.dumps(results, indent=2))
    md = table(rows, note)
    (out / "results.md").write_text(md + "\n")
    print(md)
    print(f"\nwrote {out}/results.json, results.md")
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[5:9]))
    p.add_argument("--duration", type=float, default=20, help="seconds of load per worker count (default 20)")
    p.add_argument("--workers", type=lambda s: [int(w) for w in s.split(",")], default=[1, 2],
                   help="worker counts to run, comma-separated (default 1,2)")
    p.add_argument("--clients", type=int, default=16, help="concurrent clients (default 16)")
    p.add_argument("--users", type=int, default=50, help="users, each with its own API key (default 50)")
    p.add_argument("--search-ratio", type=float, default=0.5, help="share of requests that search; the rest add (default 0.5)")
    p.add_argument("--seed-turns", type=int, default=5, help="turns stored per user before the timed load (default 5)")
    p.add_argument("--encoder", choices=["hashing", "minilm", "tuned"], default="hashing",
                   help="embedder of the store: hashing (no model, default), minilm, tuned (the default: all-mpnet-base-v2 + the trained adapter)")
    p.add_argument("--selector", choices=["none", "trained"], default="none", help="Stage 2 (default none: the Stage-1 order)")
    p.add_argument("--big-turn", type=int, default=0, metavar="CHARS",
                   help="one more client adds turns of CHARS characters of unseen words, back to back (default 0: none)")
    p.add_argument("--bulk", type=int, default=0, metavar="TURNS",
                   help="one more client adds requests of TURNS short turns each, back to back (default 0: none)")
    p.add_argument("--max-turn-chars", type=int, help="the server's limit per turn (default: lightmem's)")
    p.add_argument("--request-timeout", type=float, default=60, help="seconds before a request counts as an error")
    p.add_argument("--startup-timeout", type=float, default=180, help="seconds to wait for /healthz")
    p.add_argument("--store", help="postgresql://user:pw@host/db to load (default: a fresh SQLite store folder per worker count)")
    p.add_argument("--out", default="outputs/serve_load")
    results = run(p.parse_args(argv))
    return 1 if any(r["lost_turns"] or r["cross_user_hits"] for r in results["runs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
