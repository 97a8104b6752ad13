"""How long another user's search waits while one atomic batch runs on the same `lightmem serve` worker.

Starts `lightmem serve --workers 1 --encoder hashing` over STORE, gives user `big` ITEMS memories (requests of 2,000
turns), then sends one atomic `POST /v1/batch` while a second client searches for user `other` back to back; prints
the batch's time, its answer's status and the worst and median search latency while it ran (writes nothing else).

    python tools/batch_stall.py --store /tmp/stall --kind add --turns 2000       # the largest atomic batch of adds
    python tools/batch_stall.py --store /tmp/stall --kind delete --ops 1000      # 1,000 erasing deletes of `big`'s
    python tools/batch_stall.py --store /tmp/stall --kind mix --turns 2000       # 1 add of 1,001 turns + 999 deletes
    python tools/batch_stall.py --store postgresql://user:pw@host/db --kind add --turns 2000
    python tools/batch_stall.py --store /tmp/stall --kind add --turns 25000 --max-body-bytes 1048576   # refused now

A store that already holds `big`'s memories is used as it is (the deletes take the oldest).
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx

from lightmem.server import launch

KEY = "batch-stall-admin-key-0001"
FILLER = "with a few more words of filler so that the turn is as long as a chat message usually is"


def _turns(start: int, n: int) -> list[dict]:
    return [{"speaker": "Big", "text": f"memory {i} about topic {i % 97} {FILLER}"} for i in range(start, start + n)]


def _seed(client: httpx.Client, items: int) -> None:
    have = len(client.get("/v1/memories", params={"user_id": "big", "limit": 1000}).json()["items"])
    if have:
        return
    for start in range(0, items, 2000):
        client.post("/v1/memories", json={"user_id": "big", "messages": _turns(start, min(2000, items - start))}
                    ).raise_for_status()
    client.post("/v1/memories", json={"user_id": "other", "messages": [
        {"speaker": "Other", "text": f"I went to {p} last year"} for p in ("Oslo", "Lima", "Kyoto")]}).raise_for_status()


def _ops(client: httpx.Client, args: argparse.Namespace) -> list[dict]:
    if args.kind in ("delete", "mix"):
        n = args.ops - (args.kind == "mix")
        ids = [i["id"] for i in client.get("/v1/memories", params={"user_id": "big", "limit": n}).json()["items"]]
        deletes = [{"op": "delete", "user_id": "big", "item_id": i} for i in ids]
        if args.kind == "delete":
            return deletes
        add = {"op": "add", "user_id": "big", "messages": [{"speaker": "B", "text": f"note {i}"}
                                                           for i in range(args.turns - len(deletes))]}
        return [add, *deletes]
    per, extra = divmod(args.turns, args.ops)
    ops, start = [], 10_000_000
    for n in range(args.ops):
        size = per + (n < extra)
        if size:
            # short turns, as many as the body limit lets through
            ops.append({"op": "add", "user_id": "big", "messages": [{"speaker": "B", "text": f"note {i}"}
                                                                    for i in range(start, start + size)]})
            start += size
    return ops


def _searches(base: str, stop: threading.Event, out: list[float]) -> None:
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {KEY}"}, timeout=600) as client:
        while not stop.is_set():
            t = time.perf_counter()
            client.post("/v1/search", json={"user_id": "other", "query": "Where did I go?", "k": 3}).raise_for_status()
            out.append(time.perf_counter() - t)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", required=True)
    p.add_argument("--items", type=int, default=25_000, help="memories of user big before the batch")
    p.add_argument("--kind", choices=["add", "delete", "mix"], default="add",
                   help="mix: one add of TURNS - (OPS - 1) turns, then OPS - 1 deletions")
    p.add_argument("--turns", type=int, default=2000, help="add: turns in the batch, spread over --ops operations")
    p.add_argument("--ops", type=int, default=1000)
    p.add_argument("--max-body-bytes", type=int, default=None)
    args = p.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="batch-stall-"))
    (tmp / "keys.json").write_text(json.dumps({KEY: ["*"]}))
    options = ["--workers", "1", "--encoder", "hashing", "--selector", "none"]
    if args.max_body_bytes:
        options += ["--max-body-bytes", str(args.max_body_bytes)]
    proc, base = launch.start(args.store, tmp / "keys.json", tmp / "server.log", options)
    try:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {KEY}"}, timeout=900) as client:
            _seed(client, args.items)
            body = json.dumps({"ops": _ops(client, args), "atomic": True}, separators=(",", ":"))
            stop, waits = threading.Event(), []
            searcher = threading.Thread(target=_searches, args=(base, stop, waits))
            searcher.start()
            time.sleep(1.0)
            before = len(waits)
            t = time.perf_counter()
            r = client.post("/v1/batch", content=body, headers={"Content-Type": "application/json"})
            took = time.perf_counter() - t
            time.sleep(0.5)  # the search that waited for the batch comes back
            stop.set()
            searcher.join()
        during = waits[before:] or [0.0]
        print(f"{args.kind}: {len(json.loads(body)['ops'])} ops, {len(body) / 1e3:.0f} KB, on {args.store}: "
              f"answer {r.status_code} in {took:.2f} s{'' if r.status_code < 300 else ' ' + r.text[:200]}")
        print(f"other user's searches while it ran: {len(during)}, worst {max(during) * 1000:.0f} ms, "
              f"median {statistics.median(during) * 1000:.1f} ms")
    finally:
        launch.stop(proc)


if __name__ == "__main__":
    main()
