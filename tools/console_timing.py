"""Server time of each page of the web console (/ui) for a user with 10,000 memories (writes numbers, asserts nothing).

Writes a store with one user of N memories (sessions of 20 turns over a year) and a second user, starts
`lightmem serve` on 127.0.0.1 with it, requests every page R times with a bearer key and reads the server's
own time from each answer's ``Server-Timing`` header (the client's round trip is reported too).

    python tools/console_timing.py                                  # 10,000 memories, the default embedder and ranker
    python tools/console_timing.py --encoder hashing --memories 1000 --repeats 10   # seconds to write, not 18 minutes
    python tools/console_timing.py --results docs/results/console.md  # the table of docs/results/console.md

Writes OUT/results.json and OUT/results.md (OUT: --out, default outputs/console_timing); --results also writes the
Markdown to that file.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import statistics
import sys
import time
from pathlib import Path

import httpx
from tqdm import tqdm

from lightmem.memory import Memory
from lightmem.server import launch
from lightmem.types import Turn

KEY = "console-timing-admin-key-0001"
TOPICS = ["dog", "cello", "Lisbon", "hospital", "Porto", "sardines", "garden", "marathon", "novel", "chess", "bakery",
          "violin", "camping", "museum", "sister", "train", "painting", "kayak", "recipe", "concert"]
VERBS = ["talked about", "planned", "remembered", "asked about", "enjoyed", "worried about", "booked", "described"]


def write_store(store: Path, n: int, encoder: str, seed: int = 0) -> float:
    """``n`` memories of user ``alice`` (and 20 of ``bob``); returns the seconds it took."""
    rng = random.Random(seed)
    t0 = time.perf_counter()
    start = 1_672_531_200.0  # 2023-01-01
    with Memory.open(store, encoder=encoder, background_index=False) as memory:
        for user, count in (("alice", n), ("bob", 20)):
            turns = []
            for i in range(count):
                session = i // 20
                topic, other = rng.sample(TOPICS, 2)
                text = (f"On day {session} I {rng.choice(VERBS)} the {topic} and the {other} "
                        f"({rng.randint(1, 999)} notes), which {rng.choice(VERBS)} my {rng.choice(TOPICS)}.")
                turns.append(Turn(f"{user}-t{i}", user.title(), text, start + session * 86_400 * 365 / (count / 20 + 1),
                                  session_id=f"s{session}"))
            for k in tqdm(range(0, len(turns), 500), desc=f"writing {user}", unit="batch"):
                memory.add_turns(user, turns[k:k + 500])
    return time.perf_counter() - t0


def pages(base: str, client: httpx.Client, n: int) -> dict[str, str]:
    """The console's pages to time, by label."""
    items = client.get(f"{base}/v1/memories", params={"user_id": "alice", "limit": 1}).json()["items"]
    some = items[0]["id"]
    last = max((n + 49) // 50 - 1, 0)
    return {
        "users (admin)": "/ui/users",
        "memories, page 1": "/ui/memories?user=alice",
        f"memories, page {last + 1} (last)": f"/ui/memories?user=alice&page={last}",
        "memories, text search": "/ui/memories?user=alice&q=cello+and+the+kayak",
        "memories, session filter": "/ui/memories?user=alice&session=s7",
        "memories, date range": "/ui/memories?user=alice&from=2023-03-01&to=2023-03-31",
        "memories, archived too": "/ui/memories?user=alice&archived=1",
        "a memory": f"/ui/memory?user=alice&id={some}",
        # a new question each time ({i}): a repeated one would find its vector in the embedder's cache
        "context inspector": "/ui/context?user=alice&q=When+did+I+book+the+kayak+trip+number+{i}%3F",
        "status": "/ui/status",
    }


def stage_times(html: str) -> dict[str, float]:
    """The inspector's milliseconds per stage, from its page's table (``#times``)."""
    table = html[html.index('id="times"'):]
    table = table[:table.index("</table>")]
    names = re.findall(r'<th class="n">(\w+)</th>', table)
    return dict(zip(names, (float(ms) for ms in re.findall(r'<td class="n">([0-9.]+) ms</td>', table))))


def measure(base: str, n: int, repeats: int) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Per page: server and client milliseconds; and the inspector's median milliseconds per stage."""
    out, stages = {}, []
    with httpx.Client(headers={"Authorization": f"Bearer {KEY}"}, timeout=120) as client:
        for label, path in pages(base, client, n).items():
            client.get(base + path.replace("{i}", "0"))  # warm: the first request of a page builds the user's views
            server, wall = [], []
            for i in range(repeats):
                t0 = time.perf_counter()
                r = client.get(base + path.replace("{i}", str(i + 1)))
                wall.append((time.perf_counter() - t0) * 1000)
                r.raise_for_status()
                server.append(float(re.fullmatch(r"app;dur=([0-9.]+)", r.headers["server-timing"]).group(1)))
                if path.startswith("/ui/context"):
                    stages.append(stage_times(r.text))
            out[label] = {"path": path, "server_median_ms": statistics.median(server), "server_max_ms": max(server),
                          "client_median_ms": statistics.median(wall), "bytes": len(r.content)}
    return out, {name: statistics.median(s[name] for s in stages) for name in (stages[0] if stages else {})}


def markdown(results: dict, args: argparse.Namespace) -> str:
    rows = "\n".join(f"| {label} | `{r['path']}` | {r['server_median_ms']:.1f} | {r['server_max_ms']:.1f} | "
                     f"{r['client_median_ms']:.1f} | {r['bytes'] / 1024:.0f} |" for label, r in results["pages"].items())
    stages = ", ".join(f"{name} {ms:.0f}" for name, ms in results["inspector_stages_ms"].items())
    written = ("The store was an earlier run's." if results["write_s"] is None
               else f"Writing the store took {results['write_s']:.0f} s.")
    return f"""# Console page times

Server time of each page of the [web console](../console.md) (`/ui`) for a user with {args.memories:,} memories,
as the server's `Server-Timing` header reports it (from the request's arrival at the console's route to its
rendered HTML), median and maximum of {args.repeats} requests after one warm-up; the client's round trip on the
same machine beside it. One worker, the {args.encoder} embedder, the trained ranker, SQLite store; the inspector
is asked a new question each time. The script is
`tools/console_timing.py`:

    python tools/console_timing.py --encoder {args.encoder} --memories {args.memories} --repeats {args.repeats} --results docs/results/console.md

| page | address | server median (ms) | server max (ms) | client median (ms) | KiB |
|---|---|---:|---:|---:|---:|
{rows}

The inspector's page holds a whole `Memory.explain_context` (`build_context` and its workings); its stages took,
at the median, {stages} ms; the rest of its time is the console's table and HTML.

Target: at most 200 ms of server time per page. {written}
Machine: {results['machine']}.
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--encoder", default="tuned", help="the store's embedder (hashing: 90 times faster to write)")
    parser.add_argument("--out", default="outputs/console_timing")
    parser.add_argument("--results", help="also write the Markdown table to this file")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    store = out / f"store-{args.memories}-{args.encoder}"
    if store.exists():  # an earlier run's store: its writing time, if that run recorded it
        earlier = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
        write_s = earlier.get("write_s")
    else:
        write_s = write_store(store, args.memories, args.encoder)
    keys = out / "keys.json"
    keys.write_text(json.dumps({KEY: ["*"]}))
    proc, base = launch.start(store, keys, out / "server.log", ["--workers", "1", "--selector", "trained"])
    try:
        timed, stages = measure(base, args.memories, args.repeats)
        results = {"pages": timed, "inspector_stages_ms": stages, "write_s": write_s,
                   "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.1f} "
                              f"at the end of the run, Python {sys.version.split()[0]}"}
    finally:
        launch.stop(proc)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    text = markdown(results, args)
    (out / "results.md").write_text(text)
    if args.results:
        Path(args.results).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
