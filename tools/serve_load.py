"""Load benchmark of `lightmem serve` (writes numbers, asserts nothing; exits 1 if a turn was lost or leaked, or a deleted memory read).

Starts the server on 127.0.0.1 with each worker count in turn, drives it with concurrent HTTP clients
mixing adds and searches over many users (each user with its own API key) for a bounded time, then
checks that every acknowledged turn is in the store and that no search returned another user's item.

    python tools/serve_load.py                                  # 20 s per worker count, 1 then 2 workers, hashing embedder
    python tools/serve_load.py --duration 60 --clients 32 --users 200 --search-ratio 0.8
    python tools/serve_load.py --encoder tuned --selector trained   # the default read path (mpnet + the trained adapter, ranker)
    python tools/serve_load.py --store postgresql://user:pw@host/db  # PostgreSQL + pgvector instead of SQLite + FAISS
    python tools/serve_load.py --clients 1 --search-ratio 1 --big-turn 100000 --workers 1   # searches while a longest turn is added
    python tools/serve_load.py --clients 1 --search-ratio 1 --bulk 2000 --workers 1 --encoder tuned --store postgresql://...
                                                               # another user's searches while requests of 2,000 turns are added
    python tools/serve_load.py --clients 1 --search-ratio 1 --bulk 1000 --bulk-via batch --workers 1
                                                               # the same with batches of 1,000 adds (POST /v1/batch)
    python tools/serve_load.py --workers 2 --encoder tuned --selector trained --rss-every 1   # each worker's RSS over time
    python tools/serve_load.py --plot OUT1 OUT2 --labels before after --figure rss.png        # one RSS figure of earlier runs
    python tools/serve_load.py --store postgresql://... --replicas 1,2,4 --workers 1          # R servers on one PostgreSQL
    python tools/serve_load.py --store postgresql://... --replicas 2 --index-workers 1        # + `lightmem worker`, replicas --no-index-here

Writes OUT/results.json and OUT/results.md (OUT: --out, default outputs/serve_load), with --rss-every OUT/rss.png too. The load generator
runs on the same machine as the server, so the numbers include its CPU use.

Replicas (--replicas R, one run per value): R `lightmem serve` processes, each on its own port with --workers W, share one
PostgreSQL store, and each request goes to the next replica in turn (round-robin, as a load balancer would). With
--index-workers M the replicas run --no-index-here and M `lightmem worker` processes embed the store's queue for the run
(SIGTERM at its end). Besides lost turns and cross-user hits it counts stale reads across replicas: a share of the
operations (--delete-ratio, default 0.05 with --replicas) adds a memory holding a word of its own through replica A,
searches for it through replica B (whose view then holds it), deletes it through A and searches and lists it through B;
any read sent after a delete was acknowledged that returns the deleted memory is stale (expected: 0). Several hosts are
simulated here as processes on one machine: on a machine of few cores the replicas share its CPUs with each other, the
index workers, PostgreSQL and the load generator, so the figure is their correctness and the rates per process
(requests per replica, requests per CPU-second of the replicas), not how throughput grows with hosts.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np

from lightmem.server import launch

ROOT = Path(__file__).resolve().parents[1]
PLACES = ["Lisbon", "Kyoto", "Oslo", "Lima", "Cairo", "Quito", "Perth", "Riga", "Turin", "Hanoi"]
THINGS = ["cello lessons", "a pottery class", "the marathon", "a chess club", "the bakery", "a jazz concert",
          "the climbing gym", "a book fair", "the observatory", "a cooking course"]


def _start(args: argparse.Namespace, store: str, keys: Path, workers: int, log: Path,
           extra: list[str] | tuple[str, ...] = ()) -> tuple[subprocess.Popen, str]:
    options = ["--workers", str(workers), "--selector", args.selector, *extra]
    if args.encoder != "tuned":
        options += ["--encoder", args.encoder]
    if args.max_turn_chars:
        options += ["--max-turn-chars", str(args.max_turn_chars)]
    if args.cache_mb is not None:
        options += ["--cache-mb", f"{args.cache_mb:g}"]
    return launch.start(store, keys, log, options, timeout=args.startup_timeout, cwd=ROOT)


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


def _status(pid: int) -> dict[str, int]:
    """VmRSS, RssAnon, RssFile (KiB) and Threads of a process from /proc/<pid>/status (empty when it is gone)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "Threads"):
            out[key] = int(value.split()[0])
    return out


HEAP_MAX = 64 << 20  # glibc's thread arenas live in heaps of this size (x86-64, aarch64), aligned to it


def _arenas(pid: int) -> tuple[int, float]:
    """glibc's thread arenas of a process: (heaps, resident MiB), from /proc/<pid>/smaps. A heap is an anonymous
    map aligned to 64 MiB whose read-write part and the reserved (---p) part after it span 64 MiB; the main
    arena (brk) and other allocators' maps (pymalloc, ONNX Runtime's big blocks) are not counted. (0, 0) when
    the process is gone."""
    maps: list[list] = []
    try:
        text = Path(f"/proc/{pid}/smaps").read_text()
    except OSError:
        return 0, 0.0
    for line in text.splitlines():
        if line.startswith("Rss:") and maps:
            maps[-1][4] = int(line.split()[1])
        elif line[:1] in "0123456789abcdef" and "-" in line.split(" ", 1)[0]:
            f = line.split(None, 5)
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            maps.append([lo, hi, f[1], f[5].strip() if len(f) > 5 else "", 0])
    heaps, kib = 0, 0
    for i, (lo, hi, perm, name, rss) in enumerate(maps):
        if name or lo % HEAP_MAX or not perm.startswith("rw"):
            continue
        nxt = maps[i + 1] if i + 1 < len(maps) else None
        end = nxt[1] if nxt and nxt[0] == hi and nxt[2].startswith("---") and not nxt[3] else hi
        if end - lo == HEAP_MAX:
            heaps, kib = heaps + 1, kib + rss
    return heaps, kib / 1024


def _children(pid: int) -> list[int]:
    try:
        return sorted(int(c) for t in Path(f"/proc/{pid}/task").iterdir() for c in (t / "children").read_text().split())
    except (OSError, ValueError):
        return []


def _worker_pids(pid: int) -> list[int]:
    """The processes that serve: the server's children (uvicorn's workers) when it has any, else the server itself.
    multiprocessing's resource tracker, when there is one, is no worker."""
    kids = [c for c in _children(pid) if b"resource_tracker" not in _cmdline(c)]
    return kids or [pid]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


class RssSampler(threading.Thread):
    """Samples the RSS of each worker (and of uvicorn's supervisor, when there are workers under it) every
    ``every`` seconds from /proc, until stopped. Times are monotonic; ``series`` makes them relative to the
    start of the timed load (the seeding before it has negative times)."""

    def __init__(self, pid: int, workers: int, every: float) -> None:
        super().__init__(daemon=True, name="rss-sampler")
        self.pid, self.workers, self.every = pid, workers, every
        self.pids: list[int] = []
        self.rows: list[tuple[float, list[dict[str, int]], dict[str, int]]] = []  # (time, per worker, supervisor)
        self.arena_rows: list[tuple[float, list[tuple[int, float]]]] = []  # (time, (heaps, MiB) per worker), every ~5 s
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            t = time.monotonic()
            found = _worker_pids(self.pid) if self.workers > 1 else [self.pid]
            if len(found) >= len(self.pids):  # all the workers up (a worker that died and came back: its new pid)
                self.pids = found[: max(self.workers, 1)]
            self.rows.append((t, [_status(p) for p in self.pids], _status(self.pid) if self.workers > 1 else {}))
            if len(self.rows) % max(1, round(5 / self.every)) == 1:  # smaps costs ~40 ms a read: every ~5 s
                self.arena_rows.append((t, [_arenas(p) for p in self.pids]))
            self._stop_event.wait(max(0.0, self.every - (time.monotonic() - t)))

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)

    def series(self, t_load: float, t_end: float) -> dict:
        """``samples``: [t_s, RSS MB of worker 1, worker 2, ...]; ``anon``: the same of RssAnon (the heap and
        anonymous maps: what the allocators hold); ``threads``: threads per worker; ``supervisor``: [t_s, RSS MB]
        of uvicorn's supervisor (several workers only); ``arenas``: [t_s, [heaps, MB] of worker 1, ...], glibc's
        thread arenas (every ~5 s). ``workers``: start (the first sample of the timed load),
        end (its last), peak (over the timed load) and peak over the whole run, MB, per worker."""
        n = max((len(w) for _, w, _ in self.rows), default=0)

        def col(key: str, scale: float = 1024) -> list[list[float]]:
            return [[round(t - t_load, 2)] + [round(w[i].get(key, 0) / scale, 1) if i < len(w) else 0.0 for i in range(n)]
                    for t, w, _ in self.rows]

        samples = col("VmRSS")
        load = [r for r, (t, _, _) in zip(samples, self.rows) if t_load <= t <= t_end] or samples
        per_worker = [{"start_mb": load[0][i + 1], "end_mb": load[-1][i + 1], "peak_mb": max(r[i + 1] for r in load),
                       "peak_mb_whole_run": max(r[i + 1] for r in samples),
                       "threads_end": self.rows[-1][1][i].get("Threads") if i < len(self.rows[-1][1]) else None}
                      for i in range(n)] if samples else []
        return {"every_s": self.every, "pids": self.pids, "load_seconds": round(t_end - t_load, 1), "samples": samples,
                "anon": col("RssAnon"), "threads": col("Threads", 1),
                "supervisor": [[round(t - t_load, 2), round(s.get("VmRSS", 0) / 1024, 1)] for t, _, s in self.rows] if self.workers > 1 else [],
                "arenas": [[round(t - t_load, 2)] + [[h, round(mb, 1)] for h, mb in w] for t, w in self.arena_rows],
                "workers": per_worker}


def _views_of_workers(base: str, workers: int, first: dict, tries: int = 30) -> list[dict]:
    """The /healthz of as many workers as answer ``tries`` fresh connections (each connection goes to whichever
    worker accepts it; after the load the workers' view counters are still, so distinct counters are distinct
    workers): each one's views, with its indexer's status (``index``: the backlog not yet embedded), largest
    views first."""
    seen = {json.dumps(first.get("views"), sort_keys=True): first}
    for _ in range(tries):
        if len(seen) >= workers:
            break
        try:
            h = httpx.get(f"{base}/healthz", timeout=10).json()
        except httpx.HTTPError:
            break
        seen.setdefault(json.dumps(h.get("views"), sort_keys=True), h)
    return sorted(({**(h.get("views") or {}), "index": h.get("index")} for h in seen.values()), key=lambda v: -v.get("mb", 0))


def _stop(proc: subprocess.Popen, timeout: float = 600) -> float:
    """Stop the server and wait for every worker to exit (a worker's close drains its indexer's backlog, which
    can outlast uvicorn's supervisor: a worker left running would share the CPUs with the next run). Returns
    the seconds it took."""
    t0, workers = time.monotonic(), _children(proc.pid)
    proc.send_signal(signal.SIGINT)  # graceful: in-flight requests finish, each worker closes its Memory
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for w in workers:
        while Path(f"/proc/{w}").exists() and time.monotonic() - t0 < timeout and b"spawn" in _cmdline(w):
            time.sleep(0.2)
        if Path(f"/proc/{w}").exists() and b"spawn" in _cmdline(w):
            os.kill(w, signal.SIGKILL)
    return time.monotonic() - t0


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
    """What the clients saw: latencies per endpoint, errors, acknowledged turns, returned hits, deletes."""

    def __init__(self) -> None:
        self.ms: dict[str, list[float]] = defaultdict(list)
        self.errors: dict[str, int] = defaultdict(int)
        self.acked: dict[str, set[str]] = defaultdict(set)  # user -> turn ids the server acknowledged
        # (user, ids, monotonic time before the request was sent) per answered search or listing
        self.hits: list[tuple[str, list[str], float]] = []
        self.deleted: dict[str, tuple[str, float]] = {}  # item id -> (user, monotonic time its delete was acknowledged)
        self.probes = self.visible_before_delete = self.reads_after_delete = 0
        self.t_load = self.t_end = 0.0  # monotonic start and end of the timed load
        self.requests_per_replica: list[int] = []  # during the timed load
        self.cpu: dict[str, dict] = {}  # "start", "end": CPU seconds of the processes (replicas only)

    async def add(self, http: httpx.AsyncClient, user: str, key: str, turn_ids: list[str], rng: random.Random) -> None:
        body = {"user_id": user, "messages": [{"speaker": user, "text": _turn(user, rng), "id": t} for t in turn_ids]}
        await self._call(http, "add", "/v1/memories", key, body, lambda r: self.acked[user].update(turn_ids))

    async def add_big(self, http: httpx.AsyncClient, user: str, key: str, turn_id: str, chars: int, rng: random.Random) -> None:
        body = {"user_id": user, "messages": [{"speaker": user, "text": _big_turn(chars, rng), "id": turn_id}]}
        await self._call(http, "add_big", "/v1/memories", key, body, lambda r: self.acked[user].add(turn_id))

    async def add_bulk(self, http: httpx.AsyncClient, user: str, key: str, turn_ids: list[str], rng: random.Random) -> None:
        body = {"user_id": user, "messages": [{"speaker": user, "text": _turn(user, rng), "id": t} for t in turn_ids]}
        await self._call(http, "add_bulk", "/v1/memories", key, body, lambda r: self.acked[user].update(turn_ids))

    async def add_batch(self, http: httpx.AsyncClient, user: str, key: str, turn_ids: list[str], rng: random.Random) -> None:
        body = {"ops": [{"op": "add", "user_id": user, "messages": [{"speaker": user, "text": _turn(user, rng), "id": t}]}
                        for t in turn_ids]}
        await self._call(http, "add_batch", "/v1/batch", key, body, lambda r: self.acked[user].update(
            t for t, res in zip(turn_ids, r.json()["results"]) if res["status"] == "ok"))

    async def search(self, http: httpx.AsyncClient, user: str, key: str, rng: random.Random | None,
                     query: str | None = None) -> list[str] | None:
        """One search (``query``, or a question about one of the user's outings); the hit ids, None on an error."""
        body = {"user_id": user, "query": query or f"When did {user} go to {rng.choice(THINGS)}?", "k": 5}
        sent = time.monotonic()
        r = await self._call(http, "search", "/v1/search", key, body)
        if r is None:
            return None
        self.hits.append((user, ids := [h["id"] for h in r.json()["hits"]], sent))
        return ids

    async def list_probe(self, http: httpx.AsyncClient, user: str, key: str, word: str) -> list[str] | None:
        """The user's memories whose metadata names ``word`` (GET /v1/memories); their ids, None on an error."""
        sent = time.monotonic()
        params = {"user_id": user, "metadata": json.dumps({"probe": word})}
        r = await self._call(http, "list", "/v1/memories", key, None, method="GET", params=params)
        if r is None:
            return None
        self.hits.append((user, ids := [it["id"] for it in r.json()["items"]], sent))
        return ids

    async def probe_delete(self, a: httpx.AsyncClient, b: httpx.AsyncClient, user: str, key: str, turn_id: str,
                           word: str) -> None:
        """The stale-read probe across replicas: a memory that alone holds ``word``, added through replica ``a``,
        searched through ``b`` (whose view then holds it), deleted through ``a``, then searched and listed through
        ``b``. A read sent after the delete was acknowledged that returns it is stale (``_verify`` counts them, over
        every search of the run). Its turn is not an acknowledged one of the lost-turn check: deleting the memory
        erases it."""
        msg = {"speaker": user, "text": f"{user} wrote the code word {word} on a note.", "id": turn_id,
               "metadata": {"probe": word}}
        r = await self._call(a, "add", "/v1/memories", key, {"user_id": user, "messages": [msg]})
        if r is None:
            return
        ids = [it["id"] for it in r.json()["items"]]
        query = f"the code word {word}"
        found = await self.search(b, user, key, None, query)
        self.probes += 1
        self.visible_before_delete += bool(found and set(ids) & set(found))
        for item in ids:
            if await self._call(a, "delete", f"/v1/memories/{item}", key, None, method="DELETE",
                                params={"user_id": user}) is None:
                return
            self.deleted[item] = (user, time.monotonic())
        searched = await self.search(b, user, key, None, query)
        listed = await self.list_probe(b, user, key, word)
        self.reads_after_delete += (searched is not None) + (listed is not None)  # after the awaits: no lost update

    async def _call(self, http, endpoint: str, path: str, key: str, body: dict | None, on_ok=None,
                    method: str = "POST", params: dict | None = None) -> httpx.Response | None:
        """One request, timed under ``endpoint``; the response when it succeeded (after ``on_ok``), else None."""
        t0 = time.perf_counter()
        try:
            r = await http.request(method, path, json=body, params=params, headers={"Authorization": f"Bearer {key}"})
        except httpx.HTTPError as exc:
            self.errors[f"{endpoint}: {type(exc).__name__}"] += 1
            return None
        self.ms[endpoint].append((time.perf_counter() - t0) * 1000)
        if r.status_code >= 300:
            self.errors[f"{endpoint}: HTTP {r.status_code}"] += 1
            return None
        if on_ok:
            on_ok(r)
        return r


class Replicas:
    """One HTTP client per server (replica), handed out round-robin per request as a load balancer would; counts
    the requests each replica was sent."""

    def __init__(self, bases: list[str], clients: int, timeout: float) -> None:
        limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
        self.requests = [0] * len(bases)
        self.http = [httpx.AsyncClient(base_url=b, limits=limits, timeout=timeout, event_hooks={"request": [self._counter(i)]})
                     for i, b in enumerate(bases)]
        self._next = 0

    def _counter(self, i: int):
        async def count(request: httpx.Request) -> None:
            self.requests[i] += 1
        return count

    def pick(self) -> int:
        """The index of the next replica in turn."""
        i, self._next = self._next, (self._next + 1) % len(self.http)
        return i

    def next(self) -> httpx.AsyncClient:
        return self.http[self.pick()]

    async def aclose(self) -> None:
        for h in self.http:
            await h.aclose()


async def _drive(bases: list[str], keys: dict[str, str], args: argparse.Namespace, load: Load, seed: int,
                 cpu: Callable[[], dict] | None = None) -> float:
    """Seed every user, then run the clients for ``args.duration`` seconds, each request to the next of the
    servers ``bases`` in turn; ``cpu``: a snapshot of the processes' CPU seconds, taken as the timed load starts
    and ends. Returns the timed load's seconds."""
    users = sorted(keys)
    replicas = Replicas(bases, args.clients, args.request_timeout)
    try:
        # Seed every user (not timed), so searches have something to rank.
        seed_rng = random.Random(seed)
        sem = asyncio.Semaphore(args.clients)

        async def seed_user(u: str) -> None:
            async with sem:
                await load.add(replicas.next(), u, keys[u], [f"{u}-seed-{seed}-{j}" for j in range(args.seed_turns)], seed_rng)

        await asyncio.gather(*(seed_user(u) for u in users))
        load.ms.clear()
        sent_before = list(replicas.requests)
        load.cpu["start"] = cpu() if cpu else {}
        load.t_load = time.monotonic()
        deadline = load.t_load + args.duration

        async def client(c: int) -> None:
            rng, n = random.Random(seed * 1000 + c), 0
            while time.monotonic() < deadline:
                u = rng.choice(users)
                x = rng.random()
                if x < args.delete_ratio:  # through replica A, then read through the next one, B
                    a = replicas.pick()
                    word = "".join(rng.choice("bcdfghjklmnpqrstvwxz") for _ in range(12))
                    await load.probe_delete(replicas.http[a], replicas.http[(a + 1) % len(bases)], u, keys[u],
                                            f"{u}-probe-{seed}-c{c}-{n}", word)
                    n += 1
                elif x < args.delete_ratio + args.search_ratio:
                    await load.search(replicas.next(), u, keys[u], rng)
                else:
                    await load.add(replicas.next(), u, keys[u], [f"{u}-s{seed}-c{c}-{n}-{j}" for j in range(rng.randint(1, 3))], rng)
                    n += 1

        async def big_client() -> None:  # one more client: the longest turns the server takes, back to back
            rng, n, u = random.Random(seed), 0, users[0]
            # its own connection: sharing the others' pool, it would wait for a free one, not for the server
            async with httpx.AsyncClient(base_url=bases[0], timeout=args.request_timeout) as own:
                while time.monotonic() < deadline:
                    await load.add_big(own, u, keys[u], f"{u}-big-{seed}-{n}", args.big_turn, rng)
                    n += 1

        async def bulk_client() -> None:  # one more client: requests of --bulk turns, back to back, for the last user
            rng, n, u = random.Random(seed), 0, users[-1]
            async with httpx.AsyncClient(base_url=bases[0], timeout=args.request_timeout) as own:
                while time.monotonic() < deadline:
                    send = load.add_batch if args.bulk_via == "batch" else load.add_bulk
                    await send(own, u, keys[u], [f"{u}-bulk-{seed}-{n}-{j}" for j in range(args.bulk)], rng)
                    n += 1

        t0 = time.monotonic()
        extra = ([big_client()] if args.big_turn else []) + ([bulk_client()] if args.bulk else [])
        await asyncio.gather(*(client(c) for c in range(args.clients)), *extra)
        load.t_end = time.monotonic()
        load.cpu["end"] = cpu() if cpu else {}
        load.requests_per_replica = [n - b for n, b in zip(replicas.requests, sent_before)]
        return load.t_end - t0
    finally:
        await replicas.aclose()


def _verify(store: str, load: Load, erase: bool) -> dict:
    """Read the store through the store interface (the servers are stopped): lost turns, cross-user hits, stale
    reads (a read sent after the delete of a memory it returned was acknowledged) and deleted memories still
    stored. ``erase``: then delete the run's users (a shared PostgreSQL database keeps nothing of the run)."""
    from lightmem.models.embedder import embedder_for
    from lightmem.stores import open_store, stored_embedder

    deleted_of: dict[str, set[str]] = defaultdict(set)  # user -> ids of the memories the clients deleted
    for item, (u, _) in load.deleted.items():
        deleted_of[u].add(item)
    name = stored_embedder(store)
    db = open_store(store, dim=embedder_for(name).dim, embedder=name)
    try:
        lost = sum(len(ids - db.known_turns(u, sorted(ids))) for u, ids in load.acked.items())
        owned = {u: {it.id for it in db.list(u, include_archived=True)} for u in {u for u, _, _ in load.hits} | set(deleted_of)}
        # a memory the user deleted was the user's own when a search returned it
        leaked = sum(h not in owned[u] and h not in deleted_of[u] for u, hits, _ in load.hits for h in hits)
        stale = sum(h in load.deleted and load.deleted[h][1] < sent for _, hits, sent in load.hits for h in hits)
        still = sum(len(ids & owned[u]) for u, ids in deleted_of.items())
        if erase:
            for u in load.acked:
                db.delete_user(u)
    finally:
        db.close()
    return {"acknowledged_turns": sum(len(v) for v in load.acked.values()), "lost_turns": lost,
            "searches_checked": len(load.hits), "cross_user_hits": leaked, "deletes": len(load.deleted),
            "stale_reads": stale, "deleted_still_stored": still}


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
    sampler = RssSampler(proc.pid, workers, args.rss_every) if args.rss_every else None
    if sampler:
        sampler.start()
        time.sleep(3 * args.rss_every)  # a few samples of the idle workers first
    try:
        elapsed = asyncio.run(_drive([base], keys, args, load, seed=workers))
        rss_end = _rss_mb(proc.pid)
        health = httpx.get(f"{base}/healthz", timeout=10).json()
        views = health.get("views")  # one worker's, when there are several
        seen = _views_of_workers(base, workers, health)
    finally:
        if sampler:
            sampler.stop()
        stop_s = _stop(proc)
    n = sum(len(v) for v in load.ms.values())
    row = {"store": "postgres" if args.store else "sqlite", "workers": workers, "clients": args.clients, "users": args.users,
           "big_turn_chars": args.big_turn, "bulk_turns": args.bulk, "rss_mb_start": round(rss_start), "rss_mb_end": round(rss_end), "views": views,
           "views_seen": seen, "stop_seconds": round(stop_s, 1),
           "seconds": round(elapsed, 1), "requests": n, "rps": round(n / elapsed, 1), "errors": dict(load.errors),
           **_latencies(load)}
    if sampler:
        row["rss"] = sampler.series(load.t_load, load.t_end)
    row.update(_verify(store, load, erase=bool(args.store)))
    return row


def _latencies(load: Load) -> dict[str, dict]:
    """Per endpoint (operation kind): requests and P50 / P95 / P99 / max latency, ms."""
    return {ep: {"n": len(ms), "p50_ms": round(float(np.percentile(ms, 50)), 1), "p95_ms": round(float(np.percentile(ms, 95)), 1),
                 "p99_ms": round(float(np.percentile(ms, 99)), 1), "max_ms": round(float(np.max(ms)), 1)}
            for ep, ms in sorted(load.ms.items())}


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process and its live descendants have used so far, seconds, from /proc."""
    tick, total, todo = os.sysconf("SC_CLK_TCK"), 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        todo += _children(p)
    return total


def _start_replicas(args: argparse.Namespace, keys: Path, workers: int, n: int, out: Path, tag: str,
                    extra: list[str]) -> list[tuple[subprocess.Popen, str]]:
    """``n`` servers on ``args.store``: the first alone (it creates the schema of a new database), the others
    together. Raises the first start's error once every started server is stopped."""
    logs = [out / f"server-{tag}-{i + 1}.log" for i in range(n)]
    started = [_start(args, args.store, keys, workers, logs[0], extra)]
    failed: RuntimeError | None = None
    with ThreadPoolExecutor(max(1, n - 1)) as pool:
        futures = [pool.submit(_start, args, args.store, keys, workers, log, extra) for log in logs[1:]]
        for f in futures:
            try:
                started.append(f.result())
            except RuntimeError as exc:
                failed = failed or exc
    if failed:
        for proc, _ in started:
            _stop(proc, timeout=60)
        raise failed
    return started


def _start_index_worker(store: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "lightmem.cli", "worker", "--store", store],
                            stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=ROOT)


def _last_words(log: Path) -> str:
    """The summary a `lightmem worker` prints as it stops (its log's last paragraph): what it embedded, how fast."""
    text = log.read_text(errors="replace").strip() if log.exists() else ""
    return " ".join(text.split("\n\n")[-1].split())[-400:]


def _stop_index_worker(proc: subprocess.Popen, timeout: float = 120) -> int | None:
    """SIGTERM (the worker stops after its batch), SIGKILL past ``timeout``. Returns the exit status it had
    already exited with before the stop (a worker that died during the run), else None."""
    early = proc.poll()
    if early is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return early


def run_replicas(args: argparse.Namespace, replicas: int, workers: int, out: Path) -> dict:
    """One run of ``replicas`` `lightmem serve` processes of ``workers`` workers each over the PostgreSQL store
    ``args.store`` (with ``args.index_workers`` `lightmem worker` processes), driven as one load balancer would."""
    tag = f"r{replicas}w{workers}" + (f"i{args.index_workers}" if args.index_workers else "")
    users = [f"{tag}-{os.urandom(3).hex()}-user{i:03d}" for i in range(args.users)]
    keys = {u: f"key-{u}-{os.urandom(12).hex()}" for u in users}
    keys_file = out / f"keys-{tag}.json"
    keys_file.write_text(json.dumps({k: [u] for u, k in keys.items()}))
    load = Load()
    servers = _start_replicas(args, keys_file, workers, replicas, out, tag, ["--no-index-here"] if args.index_workers else [])
    indexers: list[subprocess.Popen] = []
    pids = [proc.pid for proc, _ in servers]
    bases = [base for _, base in servers]
    try:
        indexers = [_start_index_worker(args.store, out / f"index-worker-{tag}-{i + 1}.log") for i in range(args.index_workers)]

        def cpu() -> dict:
            return {"replicas": [_cpu_seconds(p) for p in pids], "index_workers": [_cpu_seconds(w.pid) for w in indexers],
                    "load_generator": time.process_time()}

        rss_start = [_rss_mb(p) for p in pids]
        elapsed = asyncio.run(_drive(bases, keys, args, load, seed=replicas * 100 + workers, cpu=cpu))
        rss_end = [_rss_mb(p) for p in pids]
        health = [httpx.get(f"{b}/healthz", timeout=10).json() for b in bases]
    finally:
        died = [_stop_index_worker(w) for w in indexers]
        with ThreadPoolExecutor(len(servers)) as pool:
            stop_s = list(pool.map(lambda s: _stop(s[0]), servers))
    n = sum(len(v) for v in load.ms.values())
    used = {k: [round(e - s, 1) for s, e in zip(load.cpu["start"][k], load.cpu["end"][k])] for k in ("replicas", "index_workers")}
    replica_cpu = sum(used["replicas"])
    row = {"mode": "replicas", "store": "postgres", "replicas": replicas, "workers": workers, "index_workers": args.index_workers,
           "clients": args.clients, "users": args.users, "delete_ratio": args.delete_ratio, "seconds": round(elapsed, 1),
           "requests": n, "rps": round(n / elapsed, 1),
           "rps_per_replica": [round(k / elapsed, 1) for k in load.requests_per_replica],
           "cpu_seconds": {**used, "load_generator": round(load.cpu["end"]["load_generator"] - load.cpu["start"]["load_generator"], 1)},
           "requests_per_replica_cpu_second": round(n / replica_cpu, 1) if replica_cpu else None,
           "errors": dict(load.errors), **_latencies(load),
           "probes": load.probes, "visible_before_delete": load.visible_before_delete,
           "reads_after_delete": load.reads_after_delete,
           "index_backlog_end": max((h.get("index") or {}).get("backlog") or 0 for h in health),
           "index_workers_died": [rc for rc in died if rc is not None],
           "index_workers_said": [_last_words(out / f"index-worker-{tag}-{i + 1}.log") for i in range(args.index_workers)],
           "rss_mb_start": [round(r) for r in rss_start], "rss_mb_end": [round(r) for r in rss_end],
           "views": [h.get("views") for h in health], "stop_seconds": [round(t, 1) for t in stop_s]}
    row.update(_verify(args.store, load, erase=True))
    return row


def _p(stats: dict | None) -> str:
    return f"{stats['p50_ms']} / {stats['p95_ms']} / {stats['p99_ms']}" if stats else "-"


def replicas_table(rows: list[dict], note: str) -> str:
    lines = [f"`lightmem serve` replicas on one PostgreSQL store, requests round-robin ({note})", "",
             "| replicas | workers each | index workers | clients | users | req/s | req/s per replica | req per replica CPU-s | "
             "add P50 / P95 / P99 ms | search P50 / P95 / P99 ms | delete P50 / P95 / P99 ms | list P50 / P95 / P99 ms | errors | "
             "acked turns | lost | cross-user hits | deletes | reads after delete | stale reads |",
             "| " + " | ".join(["---:"] * 19) + " |"]
    for r in rows:
        lines.append(f"| {r['replicas']} | {r['workers']} | {r['index_workers']} | {r['clients']} | {r['users']} | {r['rps']} | "
                     f"{', '.join(map(str, r['rps_per_replica']))} | {r['requests_per_replica_cpu_second']} | {_p(r.get('add'))} | "
                     f"{_p(r.get('search'))} | {_p(r.get('delete'))} | {_p(r.get('list'))} | {sum(r['errors'].values())} | "
                     f"{r['acknowledged_turns']} | {r['lost_turns']} | {r['cross_user_hits']} | {r['deletes']} | "
                     f"{r['reads_after_delete']} | {r['stale_reads']} |")
    return "\n".join(lines)


def table(rows: list[dict], note: str) -> str:
    lines = [f"`lightmem serve` under load ({note})", "",
             "| store | workers | clients | users | req/s | add P50 / P95 ms | search P50 / P95 / max ms | errors | acked turns | lost | cross-user hits |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    if any(r.get("add_big") for r in rows):
        lines[0] += "; one more client adds turns of " + ", ".join(sorted({f"{r['big_turn_chars']:,}" for r in rows})) + \
            " characters back to back: " + "; ".join(f"{r['workers']} worker(s): add P50 / P95 {r['add_big']['p50_ms']} / "
                                                      f"{r['add_big']['p95_ms']} ms over {r['add_big']['n']}" for r in rows if r.get("add_big"))
    for ep, what in (("add_bulk", "requests"), ("add_batch", "batches of one add per turn, of")):
        if any(r.get(ep) for r in rows):
            lines[0] += f"; one more client sends {what} " + ", ".join(sorted({f"{r['bulk_turns']:,}" for r in rows})) + \
                " turns back to back: " + "; ".join(f"{r['workers']} worker(s): P50 / max {r[ep]['p50_ms']} / "
                                                    f"{r[ep]['max_ms']} ms over {r[ep]['n']}, the others' search P99 "
                                                    f"{r.get('search', {}).get('p99_ms')} ms" for r in rows if r.get(ep))
    for r in rows:
        a, s = r.get("add", {}), r.get("search", {})
        lines.append(f"| {r.get('store', 'sqlite')} | {r['workers']} | {r['clients']} | {r['users']} | {r['rps']} | {a.get('p50_ms')} / {a.get('p95_ms')} | "
                     f"{s.get('p50_ms')} / {s.get('p95_ms')} / {s.get('max_ms')} | {sum(r['errors'].values())} | {r['acknowledged_turns']} | "
                     f"{r['lost_turns']} | {r['cross_user_hits']} |")
    return "\n".join(lines)


def rss_table(configs: list[tuple[str, dict]]) -> str:
    """Per configuration and worker: RSS at the start and end of the timed load, its peak, the views one worker
    reported at the end, and search P50 / P95."""
    lines = ["| configuration | workers | worker | RSS start → end MB | peak MB | RssAnon start → end MB | thread arenas start → end (heaps / MB) | threads | views (users / MB of each worker answering) | search P50 / P95 ms |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for label, results in configs:
        for r in results["runs"]:
            rss = r.get("rss")
            if not rss:
                continue
            views = "; ".join(f"{v.get('views')} / {v.get('mb')}" + (f" (backlog {v['index'].get('backlog')})" if v.get("index") else "")
                              for v in (r.get("views_seen") or [r.get("views")]) if v)
            s = r.get("search", {})
            anon = [row for row in rss["anon"] if 0 <= row[0] <= rss["load_seconds"]] or rss["anon"]
            ar = [row for row in rss.get("arenas", []) if 0 <= row[0] <= rss["load_seconds"] + 1] or rss.get("arenas") or [[0]]
            for i, w in enumerate(rss["workers"]):
                lines.append(f"| {label} | {r['workers']} | {i + 1} | {w['start_mb']:,.0f} → {w['end_mb']:,.0f} | {w['peak_mb']:,.0f} | "
                             f"{anon[0][i + 1]:,.0f} → {anon[-1][i + 1]:,.0f} | {_heaps(ar[0], i)} → {_heaps(ar[-1], i)} | {w['threads_end']} | {views} | "
                             f"{s.get('p50_ms')} / {s.get('p95_ms')} |")
    return "\n".join(lines)


def _heaps(row: list, i: int) -> str:
    return f"{row[i + 1][0]} / {row[i + 1][1]:,.0f}" if len(row) > i + 1 else "-"


def plot_rss(configs: list[tuple[str, dict]], path: str | Path) -> Path:
    """Each worker's RSS (left) and its growth over its first sample, taken idle before the users are seeded
    (right), against seconds since the timed load began (the seeding before it is negative): one row per
    encoder, one colour per configuration, one line style per worker (PNG)."""
    sys.path.insert(0, str(ROOT))
    from lightmem.evaluation.reports.report import pyplot, save_figure

    plt = pyplot()
    encoders = list(dict.fromkeys(results["args"].get("encoder", "?") for _, results in configs))
    fig, axes = plt.subplots(len(encoders), 2, figsize=(14, 4.6 * len(encoders)), squeeze=False)
    styles = ["-", "--", ":", "-."]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    c = 0
    for label, results in configs:
        row = axes[encoders.index(results["args"].get("encoder", "?"))]
        for r in results["runs"]:
            rss = r.get("rss")
            if not rss or not rss["samples"]:
                continue
            colour = colours[c % len(colours)]
            c += 1
            name = label if len({x["workers"] for x in results["runs"]}) == 1 else f"{label}, {r['workers']} worker(s)"
            t = [s[0] for s in rss["samples"]]
            for i in range(len(rss["samples"][0]) - 1):
                mb = [s[i + 1] for s in rss["samples"]]
                row[0].plot(t, mb, styles[i % len(styles)], color=colour, linewidth=1.4, label=f"{name}: worker {i + 1}")
                row[1].plot(t, [m - mb[0] for m in mb], styles[i % len(styles)], color=colour, linewidth=1.4)
    for enc, row in zip(encoders, axes):
        for ax, title in zip(row, ("RSS per worker (MB)", "growth over the idle worker (MB)")):
            ax.axvline(0, color="grey", linewidth=0.8)
            ax.set_xlabel("seconds since the timed load began (before 0: users seeded)")
            ax.set_title(f"encoder {enc}: {title}")
            ax.grid(alpha=0.3)
        row[0].legend(fontsize=7, loc="lower right")
    return save_figure(plt, fig, path)


def _label(args: argparse.Namespace) -> str:
    arenas = os.environ.get("MALLOC_ARENA_MAX")
    return args.label or f"encoder {args.encoder}" + (f", MALLOC_ARENA_MAX={arenas}" if arenas else "")


def run(args: argparse.Namespace) -> dict:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0]
    if args.replicas:
        rows = [run_replicas(args, r, w, out) for r in args.replicas for w in args.workers]
        note = (f"{args.duration:g} s each, search ratio {args.search_ratio}, delete probes {args.delete_ratio}, encoder "
                f"{args.encoder}, selector {args.selector}; the hosts simulated as processes on one machine of {os.cpu_count()} "
                f"CPU cores, shared with PostgreSQL and the load generator; load average {load_before:.1f} before the run")
    else:
        rows = [run_one(args, w, out) for w in args.workers]
        note = (f"{args.duration:g} s each, search ratio {args.search_ratio}, encoder {args.encoder}, selector {args.selector}, "
                f"{os.cpu_count()} CPU cores shared with the load generator; load average {load_before:.1f} before the run")
    from lightmem.stores import describe

    results = {"runs": rows, "note": note, "label": _label(args), "load_average_before": round(load_before, 2),
               "env": {k: v for k, v in os.environ.items() if k.startswith(("MALLOC_", "LIGHTMEM_MALLOC"))},
               "args": {**vars(args), "store": describe(args.store) if args.store else None}}
    (out / "results.json").write_text(json.dumps(results, indent=2))
    md = replicas_table(rows, note) if args.replicas else table(rows, note)
    if args.rss_every:
        md += "\n\nWorker memory under load (`--rss-every`; figure: rss.png)\n\n" + rss_table([(results["label"], results)])
        plot_rss([(results["label"], results)], out / "rss.png")
    (out / "results.md").write_text(md + "\n")
    print(md)
    print(f"\nwrote {out}/results.json, results.md")
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[5:9]))
    p.add_argument("--duration", type=float, default=20, help="seconds of load per run (worker count, or replicas and worker count; default 20)")
    p.add_argument("--workers", type=lambda s: [int(w) for w in s.split(",")],
                   help="worker counts to run, comma-separated (default 1,2; with --replicas: the workers of each replica, default 1)")
    p.add_argument("--replicas", type=lambda s: [int(r) for r in s.split(",")],
                   help="numbers of `lightmem serve` processes on the one --store (PostgreSQL) to run, comma-separated "
                        "(e.g. 1,2,4); requests go to them round-robin")
    p.add_argument("--index-workers", type=int, default=0, metavar="M",
                   help="with --replicas: run M `lightmem worker` processes and the replicas with --no-index-here "
                        "(default 0: each replica indexes)")
    p.add_argument("--delete-ratio", type=float,
                   help="share of operations that are stale-read probes: add through replica A, delete through A, search "
                        "and list through replica B (default 0.05 with --replicas, else 0)")
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
    p.add_argument("--bulk-via", choices=["memories", "batch"], default="memories",
                   help="send those turns as one POST /v1/memories (default) or as a POST /v1/batch of one add per turn "
                        "(at most 1,000), which other requests may go between")
    p.add_argument("--max-turn-chars", type=int, help="the server's limit per turn (default: lightmem's)")
    p.add_argument("--cache-mb", type=float, help="the server's ceiling of each worker's views (default: lightmem's)")
    p.add_argument("--request-timeout", type=float, default=60, help="seconds before a request counts as an error")
    p.add_argument("--startup-timeout", type=float, default=180, help="seconds to wait for /healthz")
    p.add_argument("--store", help="postgresql://user:pw@host/db to load (default: a fresh SQLite store folder per worker count)")
    p.add_argument("--rss-every", type=float, default=0, metavar="SECONDS",
                   help="sample each worker's RSS from /proc every SECONDS into results.json and OUT/rss.png (default 0: only start and end)")
    p.add_argument("--label", help="name of this configuration in the RSS table and figure (default: the encoder and MALLOC_ARENA_MAX)")
    p.add_argument("--plot", nargs="+", metavar="OUT",
                   help="run nothing: draw the RSS of earlier runs (their OUT folders, one configuration each) into --figure")
    p.add_argument("--labels", nargs="+", help="with --plot: a name per OUT (default: each run's own label)")
    p.add_argument("--figure", default="outputs/serve_load/rss.png", help="with --plot: the PNG to write")
    p.add_argument("--out", default="outputs/serve_load")
    args = p.parse_args(argv)
    if args.plot:
        loaded = [json.loads((Path(o) / "results.json").read_text()) for o in args.plot]
        labels = args.labels or [r.get("label", Path(o).name) for r, o in zip(loaded, args.plot)]
        configs = list(zip(labels, loaded))
        print(rss_table(configs))
        print(f"\nwrote {plot_rss(configs, args.figure)}")
        return 0
    if args.replicas and not (args.store or "").startswith(("postgresql://", "postgres://")):
        p.error("--replicas shares one store among server processes: give --store postgresql://...")
    if args.replicas and args.rss_every:
        p.error("--rss-every samples one server; leave it out with --replicas")
    if args.index_workers and not args.replicas:
        p.error("--index-workers needs --replicas (--replicas 1: one server beside the index workers)")
    if (args.replicas and min(args.replicas) < 1) or args.index_workers < 0:
        p.error("--replicas and --index-workers take counts of processes: 1 or more, 0 or more")
    args.workers = args.workers or ([1] if args.replicas else [1, 2])
    if args.delete_ratio is None:
        args.delete_ratio = 0.05 if args.replicas else 0.0
    if not 0 <= args.delete_ratio + args.search_ratio <= 1:
        p.error("--delete-ratio plus --search-ratio is a share of the operations: between 0 and 1")
    results = run(args)
    return 1 if any(r["lost_turns"] or r["cross_user_hits"] or r.get("stale_reads") or r.get("deleted_still_stored")
                    or r.get("index_workers_died") for r in results["runs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
