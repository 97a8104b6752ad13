"""``lightmem serve --metrics-port``: Prometheus' text from real servers, parsed by prometheus-client; nothing without it."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import httpx
import pytest

from lightmem.server import launch

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

ADMIN, ALICE = "admin-key-0000000000001", "alice-key-0000000000002"
KEYS = {ADMIN: ["*"], ALICE: ["alice"]}
SECRET = "my locker code is 918273"
FAST = ["--encoder", "hashing", "--selector", "none"]


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def scrape(port: int) -> tuple[str, dict[str, list]]:
    """The metrics text and its samples by family name, as Prometheus would read them."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return text, {f.name: f.samples for f in text_string_to_metric_families(text)}


def value(samples: list, name: str, **labels: str) -> float:
    """The sum of the samples called ``name`` whose labels include ``labels``."""
    return sum(s.value for s in samples if s.name == name and labels.items() <= s.labels.items())


def eventually(port: int, ready, timeout: float = 20.0) -> tuple[str, dict[str, list]]:
    """Scrape until ``ready(families)`` (the workers refresh their backlog and views every few seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        text, families = scrape(port)
        if ready(families) or time.monotonic() > deadline:
            return text, families
        time.sleep(0.5)


@pytest.fixture
def server(tmp_path, request, monkeypatch) -> Iterator[tuple[str, int, subprocess.Popen]]:
    """``lightmem serve`` with metrics on and background indexing (as users get it); ``request.param``: (store, extra
    options)."""
    store, options = request.param
    monkeypatch.setenv("LIGHTMEM_BACKGROUND_INDEX", "1")  # tests/conftest.py turns it off for the test processes
    location = request.getfixturevalue("pg_uri") if store == "postgres" else str(tmp_path / "store")
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps(KEYS))
    port = launch.free_port()
    proc, base = launch.start(location, keys, tmp_path / "server.log", [*FAST, "--metrics-port", str(port), *options])
    try:
        yield base, port, proc
    finally:
        launch.stop(proc)
    log = (tmp_path / "server.log").read_text()
    assert SECRET not in log and ALICE not in log


@pytest.mark.multiprocess
@pytest.mark.parametrize("server", [("sqlite", ["--workers", "2"])], indirect=True)
def test_two_workers_metrics_add_up_per_route_template_without_user_data(server):
    base, port, _ = server
    added = httpx.post(f"{base}/v1/memories", headers=auth(ALICE), timeout=60,
                       json={"user_id": "alice", "messages": [{"speaker": "Alice", "text": SECRET}]}).json()["items"]
    item = added[0]["id"]
    for _ in range(20):  # spread over both workers by the kernel
        r = httpx.post(f"{base}/v1/search", headers=auth(ALICE), json={"user_id": "alice", "query": "locker"}, timeout=60)
        assert r.status_code == 200
    assert httpx.get(f"{base}/v1/memories/{item}", params={"user_id": "alice"}, headers=auth(ALICE)).status_code == 200
    assert httpx.get(f"{base}/v1/memories/{item}", params={"user_id": "alice"}).status_code == 401
    assert httpx.get(f"{base}/no/such/{item}").status_code == 404
    assert httpx.get(f"{base}/metrics", headers=auth(ADMIN)).status_code == 404  # metrics are on their own port only

    text, families = eventually(port, lambda f: value(f.get("lightmem_index_embedded_items", []),
                                                      "lightmem_index_embedded_items_total") >= 1)
    requests = families["lightmem_http_request_duration_seconds"]
    count = "lightmem_http_request_duration_seconds_count"
    assert value(requests, count, route="/v1/search", method="POST", status_class="2xx") == 20  # both workers' summed
    assert value(requests, count, route="/v1/memories", method="POST", status_class="2xx") == 1
    assert value(requests, count, route="/v1/memories/{item_id}", status_class="2xx") == 1
    assert value(requests, count, route="/v1/memories/{item_id}", status_class="4xx") == 1
    assert value(requests, count, route="unmatched", status_class="4xx") == 2  # /no/such/<id> and /metrics
    assert {s.labels["route"] for s in requests} == {"/healthz", "/v1/search", "/v1/memories", "/v1/memories/{item_id}",
                                                     "unmatched"}
    assert item not in text and "alice" not in text and "918273" not in text  # no ids nor text in any label
    assert value(families["lightmem_http_requests_in_flight"], "lightmem_http_requests_in_flight") == 0
    assert value(families["lightmem_index_embedded_items"], "lightmem_index_embedded_items_total") == 1
    assert value(families["lightmem_index_backlog"], "lightmem_index_backlog") == 0

    # The view cache, per worker: what a worker served is its own (a pid label per worker).
    _, families = eventually(port, lambda f: value(f["lightmem_view_cache_hits"], "lightmem_view_cache_hits_total")
                             + value(f["lightmem_view_cache_misses"], "lightmem_view_cache_misses_total") >= 21)
    lookups = (value(families["lightmem_view_cache_hits"], "lightmem_view_cache_hits_total")
               + value(families["lightmem_view_cache_misses"], "lightmem_view_cache_misses_total"))
    assert lookups >= 21  # the search, the add and the get read the user's view
    workers = {s.labels["pid"] for s in families["lightmem_view_cache_views"]}
    assert len(workers) == 2 and all(p.isdigit() for p in workers)

    # A worker killed outright leaves the live gauges at the next scrape; what it counted stays in the totals.
    dead = int(sorted(workers)[0])
    os.kill(dead, signal.SIGKILL)
    time.sleep(0.5)
    _, families = scrape(port)
    assert str(dead) not in {s.labels["pid"] for s in families["lightmem_view_cache_views"]}
    assert value(families["lightmem_http_request_duration_seconds"], count, route="/v1/search") == 20


@pytest.mark.multiprocess
@pytest.mark.postgres
@pytest.mark.parametrize("server", [("postgres", [])], indirect=True)
def test_a_postgresql_worker_reports_its_connections_and_the_queue(server):
    base, port, _ = server
    texts = [f"note {i} about the garden" for i in range(5)]
    r = httpx.post(f"{base}/v1/memories", headers=auth(ADMIN), timeout=60,
                   json={"user_id": "bob", "messages": [{"speaker": "Bob", "text": t} for t in texts]})
    assert r.status_code == 201
    _, families = eventually(port, lambda f: value(f.get("lightmem_index_embedded_items", []),
                                                   "lightmem_index_embedded_items_total") >= 5)
    assert value(families["lightmem_index_embedded_items"], "lightmem_index_embedded_items_total") == 5
    assert value(families["lightmem_index_backlog"], "lightmem_index_backlog") == 0
    assert value(families["lightmem_index_oldest_wait_seconds"], "lightmem_index_oldest_wait_seconds") == 0
    connections = families["lightmem_db_connections"]
    assert value(connections, "lightmem_db_connections", state="max") == 4  # the store's default pool_size
    assert 1 <= value(connections, "lightmem_db_connections", state="in_use") \
        + value(connections, "lightmem_db_connections", state="idle") <= 4


def test_without_metrics_or_otel_no_metrics_module_is_loaded_and_there_is_no_metrics_route(tmp_path):
    """The default worker (``app_from_env``, as ``serve`` starts it): /metrics is 404, prometheus-client was never
    imported, the app has no metrics middleware and spans are off. The library alone imports no OpenTelemetry
    (FastAPI itself imports its API, so the server's check is on lightmem's switch and the SDK)."""
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps(KEYS))
    script = textwrap.dedent(f"""
        import json, os, sys
        from lightmem.memory import Memory
        from lightmem.models.embedder import HashingEmbedder
        with Memory.open({str(tmp_path / "lib")!r}, embedder=HashingEmbedder(64)) as m:
            m.add("I adopted a dog named Rex", user_id="alice")
            m.search("dog", user_id="alice")
            m.build_context("dog", user_id="alice", budget=100)
        library = sorted(n for n in sys.modules if n.split(".")[0] in ("opentelemetry", "prometheus_client"))
        from lightmem.server.settings import ENV, ServeSettings
        os.environ[ENV] = ServeSettings(store={str(tmp_path / "srv")!r}, keys={str(keys)!r}, encoder="hashing",
                                        selector="none").to_env()
        from fastapi.testclient import TestClient
        from lightmem import tracing
        from lightmem.server.serve import app_from_env
        app = app_from_env()
        with TestClient(app) as c:
            h = {{"Authorization": "Bearer {ADMIN}"}}
            assert c.post("/v1/search", headers=h, json={{"user_id": "a", "query": "x"}}).status_code == 200
            status = c.get("/metrics", headers=h).status_code
        print(json.dumps({{"library": library, "status": status, "tracing": tracing.enabled(),
                          "middleware": [m.cls.__name__ for m in app.user_middleware],
                          "server": sorted(n for n in sys.modules if n.startswith(("prometheus_client",
                                                                                  "opentelemetry.sdk")))}}))
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("LIGHTMEM_OTEL", "PROMETHEUS_MULTIPROC_DIR")}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen == {"library": [], "status": 404, "tracing": False, "middleware": ["BodyLimit"], "server": []}


def test_the_otel_environment_variable_turns_spans_on_at_import():
    env = {**os.environ, "LIGHTMEM_OTEL": "1"}
    out = subprocess.run([sys.executable, "-c", "from lightmem import tracing; print(tracing.enabled())"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.stdout.strip() == "True", out.stderr[-2000:]
