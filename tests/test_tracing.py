"""OpenTelemetry spans (lightmem/tracing.py), recorded by the SDK's InMemorySpanExporter: names, attributes, no user data."""
from __future__ import annotations

import time

import pytest

from lightmem import tracing
from lightmem.errors import InvalidInputError
from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector

sdk = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

USER, SECRET = "alice-7f3a", "my locker code is 918273"


@pytest.fixture
def spans():
    """Spans on, into a provider of the test's own (the global one is left alone); off again afterwards."""
    exporter = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(provider)
    try:
        yield exporter
    finally:
        tracing.disable()


def carries_no_user_data(span) -> bool:
    values = [str(v) for v in span.attributes.values()] + [span.name, str(span.status.description or "")]
    return not any(USER in v or "918273" in v or "locker" in v for v in values)


def test_add_search_and_build_context_are_spans_with_counts_and_no_user_data(tmp_path, spans):
    with Memory.open(tmp_path / "m", embedder=HashingEmbedder(64), selector=Stage1Selector()) as memory:
        memory.add([{"speaker": "Alice", "text": SECRET}, {"speaker": "Alice", "text": "I live in Oslo"}], user_id=USER)
        memory.search("locker code", USER, k=3)
        ctx = memory.build_context("What is my locker code?", USER, budget=200)
    by_name = {s.name: s for s in spans.get_finished_spans()}
    assert {"lightmem.add", "lightmem.search", "lightmem.build_context"} <= by_name.keys()
    add, search, context = by_name["lightmem.add"], by_name["lightmem.search"], by_name["lightmem.build_context"]
    assert dict(add.attributes) == {"db.system.name": "lightmem", "db.operation.name": "add", "lightmem.n_messages": 2,
                                    "lightmem.n_items": 2}
    assert dict(search.attributes) == {"db.system.name": "lightmem", "db.operation.name": "search", "lightmem.k": 3,
                                       "lightmem.n_hits": 2}
    assert context.attributes["lightmem.budget"] == 200 and context.attributes["lightmem.n_tokens"] == ctx.n_tokens
    assert context.attributes["lightmem.n_memories"] == len(ctx.memories) >= 1
    assert all(carries_no_user_data(s) for s in spans.get_finished_spans())


def test_a_refused_call_is_an_error_span_naming_the_exception_class_only(tmp_path, spans):
    with Memory.open(tmp_path / "m", embedder=HashingEmbedder(64), selector=Stage1Selector()) as memory:
        with pytest.raises(InvalidInputError):
            memory.search(SECRET, USER, k=-1)
    (span,) = [s for s in spans.get_finished_spans() if s.name == "lightmem.search"]
    assert span.status.status_code is StatusCode.ERROR and span.status.description is None
    assert span.attributes["error.type"] == "InvalidInputError" and span.events == ()  # no exception event: no message
    assert carries_no_user_data(span)


def test_the_embed_span_counts_a_batch(spans):
    @tracing.embed_span
    def embed_and_store(store, embedder, word_scorer, batch):  # the indexers' step, as the hook decorates it
        return len(batch) - 1

    assert embed_and_store(None, None, None, [("u", "i1", SECRET), ("u", "i2", "x")]) == 1
    (span,) = spans.get_finished_spans()
    assert span.name == "lightmem.embed"
    assert dict(span.attributes) == {"gen_ai.operation.name": "embeddings", "lightmem.n_items": 2, "lightmem.n_stored": 1}


def test_a_served_request_is_a_server_span_of_the_callers_trace_with_the_memory_span_inside(tmp_path, spans):
    from fastapi.testclient import TestClient

    from lightmem.server import KeyRing, create_app

    key = "alice-key-000000000001"
    app = create_app(lambda: Memory.open(tmp_path / "m", embedder=HashingEmbedder(64), selector=Stage1Selector()),
                     KeyRing({key: [USER]}))
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    with TestClient(app) as client:
        r = client.post("/v1/search", json={"user_id": USER, "query": SECRET},
                        headers={"Authorization": f"Bearer {key}", "traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"})
        assert r.status_code == 200
        assert client.get(f"/v1/memories?user_id={USER}", headers={"Authorization": f"Bearer {key}"}).status_code == 200
    finished = spans.get_finished_spans()
    server = next(s for s in finished if s.name == "POST /v1/search")
    inner = next(s for s in finished if s.name == "lightmem.search")
    assert format(server.context.trace_id, "032x") == trace_id and server.parent.span_id == 0x00F067AA0BA902B7
    assert inner.parent.span_id == server.context.span_id
    assert dict(server.attributes) == {"http.request.method": "POST", "http.route": "/v1/search",
                                       "http.response.status_code": 200}
    assert any(s.name == "GET /v1/memories" for s in finished)  # the template: no query string, no user id
    assert all(carries_no_user_data(s) for s in finished)


def test_memory_open_turns_spans_on(tmp_path):
    try:
        Memory.open(tmp_path / "m", embedder=HashingEmbedder(64), selector=Stage1Selector(), tracing=True).close()
        assert tracing.enabled()
    finally:
        tracing.disable()


def test_off_a_traced_method_is_the_plain_call():
    assert not tracing.enabled()
    with tracing.span("x", k=1) as s:
        assert s is None
    assert Memory.search.__wrapped__.__name__ == "search"


@pytest.mark.multiprocess
def test_serve_with_otel_exports_its_spans_by_otlp(tmp_path, monkeypatch):
    """``lightmem serve --otel`` with the OTLP variables set: a collector (here a tiny HTTP one) receives the spans."""
    import http.server
    import json
    import threading

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from lightmem.server import launch

    received: list[tuple[str, dict]] = []

    class Collector(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            request = ExportTraceServiceRequest.FromString(self.rfile.read(int(self.headers["Content-Length"])))
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    for s in scope.spans:
                        attrs = {a.key: a.value.string_value or a.value.int_value for a in s.attributes}
                        received.append((s.name, attrs))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    collector = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{collector.server_port}")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")  # milliseconds: export at once
    key = "alice-key-000000000001"
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({key: [USER]}))
    proc, base = launch.start(tmp_path / "store", keys, tmp_path / "server.log",
                              ["--encoder", "hashing", "--selector", "none", "--otel"])
    try:
        import httpx

        headers = {"Authorization": f"Bearer {key}"}
        assert httpx.post(f"{base}/v1/memories", headers=headers, timeout=60,
                          json={"user_id": USER, "messages": [{"speaker": "A", "text": SECRET}]}).status_code == 201
        assert httpx.post(f"{base}/v1/search", headers=headers, json={"user_id": USER, "query": "locker"},
                          timeout=60).status_code == 200
        deadline = time.monotonic() + 20
        while not {"lightmem.add", "lightmem.search"} <= {n for n, _ in received} and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        launch.stop(proc)
        collector.shutdown()
    names = {n for n, _ in received}
    assert {"lightmem.add", "lightmem.search", "POST /v1/memories", "POST /v1/search"} <= names
    assert not any(USER in str(a) or "918273" in str(a) for _, a in received)
