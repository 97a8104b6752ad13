"""What metrics and spans cost a search: `lightmem serve` off, then with --metrics-port and --otel, on one tiny store.

    python tools/observability_cost.py                    # 3 rounds x 300 searches per setting, hashing embedder
    python tools/observability_cost.py --rounds 5 --searches 500 --encoder tuned --selector trained
    python tools/observability_cost.py --on=--metrics-port     # one of them alone (--on=--otel: the spans alone)

Each round starts a server per setting (in turn: off, on, off, on, ...), stores 50 turns for one user, waits for their
vectors, then sends searches one at a time and records each round trip. With --otel the spans go by OTLP/HTTP to a
collector in this process that decodes and counts them (a real export, not a dead endpoint); a scraper reads
/metrics every second meanwhile. Prints the median and P95 per setting and the difference of the medians (writes
numbers, asserts nothing). Server, client and collector share this machine's cores.
"""
from __future__ import annotations

import argparse
import http.server
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lightmem.server import launch  # noqa: E402

KEY = "bench-key-0000000000001"


class _Collector(http.server.BaseHTTPRequestHandler):
    """Takes OTLP/HTTP exports and decodes them, as a collector would."""

    spans = 0

    def do_POST(self):  # noqa: N802 - http.server's name
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        request = ExportTraceServiceRequest.FromString(self.rfile.read(int(self.headers["Content-Length"])))
        _Collector.spans += sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def one_round(tmp: Path, on: bool, searches: int, model: list[str], flags: list[str]) -> list[float]:
    store, keys = tmp / f"store-{on}-{time.monotonic_ns()}", tmp / "keys.json"
    keys.write_text(json.dumps({KEY: ["u"]}))
    options = [*model]
    if on:
        options += [f for f in flags if f == "--otel"]
        if "--metrics-port" in flags:
            options += ["--metrics-port", str(launch.free_port())]
    proc, base = launch.start(store, keys, tmp / "server.log", options)
    stop = threading.Event()
    try:
        headers = {"Authorization": f"Bearer {KEY}"}
        with httpx.Client(base_url=base, headers=headers, timeout=60) as c:
            turns = [{"speaker": "U", "text": f"note {i}: I went hiking near lake {i} with my dog"} for i in range(50)]
            c.post("/v1/memories", json={"user_id": "u", "messages": turns}).raise_for_status()
            while c.get("/healthz").json()["index"].get("backlog"):
                time.sleep(0.1)
            if "--metrics-port" in options:
                port = options[options.index("--metrics-port") + 1]
                threading.Thread(target=_scrape, args=(f"http://127.0.0.1:{port}/metrics", stop), daemon=True).start()
            for _ in range(20):  # warm-up
                c.post("/v1/search", json={"user_id": "u", "query": "where did I hike?", "k": 5})
            took = []
            for i in range(searches):
                t0 = time.perf_counter()
                c.post("/v1/search", json={"user_id": "u", "query": f"where did I hike with the dog {i % 7}?", "k": 5})
                took.append((time.perf_counter() - t0) * 1000)
            return took
    finally:
        stop.set()
        launch.stop(proc)


def _scrape(url: str, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        httpx.get(url, timeout=5)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--searches", type=int, default=300)
    p.add_argument("--encoder", default="hashing")
    p.add_argument("--selector", default="none")
    p.add_argument("--on", nargs="+", choices=["--metrics-port", "--otel"], default=["--metrics-port", "--otel"],
                   help="what the second setting turns on (default both)")
    args = p.parse_args()
    collector = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{collector.server_port}"
    os.environ["LIGHTMEM_BACKGROUND_INDEX"] = "1"
    model = ["--encoder", args.encoder, "--selector", args.selector]
    took: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for on in (False, True):
                took[on] += one_round(Path(tmp), on, args.searches, model, args.on)
    for on in (False, True):
        ms = sorted(took[on])
        print(f"{' '.join(args.on) if on else 'off':>25}: median {statistics.median(ms):.2f} ms, "
              f"P95 {ms[int(0.95 * len(ms))]:.2f} ms over {len(ms)} searches")
    print(f"difference of the medians: {statistics.median(took[True]) - statistics.median(took[False]):+.2f} ms; "
          f"spans received by the collector: {_Collector.spans}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
