"""OpenTelemetry spans around lightmem's operations: off unless asked for, and then without user data.

Off (the default) nothing here imports OpenTelemetry, and a traced call costs one test of a module variable. On
(``enable()``, ``Memory.open(..., tracing=True)``, ``lightmem serve --otel``, or ``LIGHTMEM_OTEL=1`` in the
environment when this module is first imported), each traced call is a span of the tracer provider the application
configured (``opentelemetry-api`` alone records nothing: an SDK with an exporter does; ``export_otlp`` installs one).
The switch is per process, as OpenTelemetry's provider is.

A span never carries a user id, a query or a memory's text: ``traced`` keeps only numbers and booleans of what its
``attrs``/``result`` functions return (k, budget, hits, tokens), and a failure is recorded as its exception's class
(``error.type``), never its message, which may quote the input.
"""
from __future__ import annotations

import functools
import inspect
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

log = logging.getLogger(__name__)
ENV = "LIGHTMEM_OTEL"  # "1": spans on from the start (``lightmem serve --otel`` sets it for its workers)
DB = {"db.system.name": "lightmem"}  # lightmem is the database its callers talk to (OpenTelemetry's DB conventions)
F = TypeVar("F", bound=Callable[..., Any])

_tracer: Any = None  # the tracer while spans are on; None: off (process-wide, as OpenTelemetry's provider is)


def enable(tracer_provider: Any = None) -> None:
    """Turn spans on in this process; ``tracer_provider``: one of your own (tests), else the global one."""
    global _tracer
    from opentelemetry import trace

    provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
    _tracer = provider.get_tracer("lightmem")


def disable() -> None:
    """Turn spans off (a traced call is a plain call again)."""
    global _tracer
    _tracer = None


def enabled() -> bool:
    return _tracer is not None


def _kept(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Numbers and booleans only: no value that could be a user's text or id reaches a span."""
    return {k: v for k, v in attrs.items() if isinstance(v, (bool, int, float))}


@contextmanager
def span(name: str, **attrs: Any) -> Iterator[Any]:
    """A span around the block (None when spans are off); ``attrs``: numbers and booleans, the rest is dropped."""
    if _tracer is None:
        yield None
        return
    with _tracer.start_as_current_span(name, attributes=_kept(attrs), record_exception=False,
                                       set_status_on_exception=False) as s:
        try:
            yield s
        except BaseException as exc:
            _failed(s, exc)
            raise


def _failed(s: Any, exc: BaseException) -> None:
    from opentelemetry.trace import Status, StatusCode

    s.set_attribute("error.type", type(exc).__name__)
    s.set_status(Status(StatusCode.ERROR))  # no description: an exception's message may quote the input


def traced(name: str, attrs: Callable[[dict[str, Any]], Mapping[str, Any]] | None = None,
           result: Callable[[Any], Mapping[str, Any]] | None = None, **static: str) -> Callable[[F], F]:
    """Decorate a function with a span named ``name`` while spans are on.

    Args:
        name: The span's name.
        attrs: From the call's arguments by name (``{"k": 5, ...}``) to attributes; numbers and booleans are kept.
        result: From the return value to attributes (counts), kept likewise.
        static: Fixed string attributes (``db.operation.name="search"``): the only strings a span gets.
    """

    def wrap(fn: F) -> F:
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            tracer = _tracer
            if tracer is None:
                return fn(*args, **kwargs)
            start = dict(static)
            if attrs is not None:
                start.update(_kept(attrs(signature.bind_partial(*args, **kwargs).arguments)))
            with tracer.start_as_current_span(name, attributes=start, record_exception=False,
                                              set_status_on_exception=False) as s:
                try:
                    out = fn(*args, **kwargs)
                except BaseException as exc:
                    _failed(s, exc)
                    raise
                if result is not None:
                    s.set_attributes(_kept(result(out)))
                return out

        return call  # type: ignore[return-value]

    return wrap


def operation(op: str, attrs: Callable[[dict[str, Any]], Mapping[str, Any]] | None = None,
              result: Callable[[Any], Mapping[str, Any]] | None = None) -> Callable[[F], F]:
    """``traced`` for one of ``Memory``'s operations: the span ``lightmem.<op>``, with OpenTelemetry's database
    attributes (``db.system.name`` lightmem, ``db.operation.name`` op)."""
    return traced(f"lightmem.{op}", attrs, result, **{"db.system.name": "lightmem", "db.operation.name": op})


def _k_budget(a: dict[str, Any]) -> dict[str, Any]:
    return {"lightmem.k": a.get("k"), "lightmem.budget": a.get("budget")}


def _n_messages(a: dict[str, Any]) -> dict[str, Any]:
    messages = a.get("messages")
    return {"lightmem.n_messages": 1 if isinstance(messages, (str, Mapping)) else len(messages or ())}


# The spans of Memory's methods (one decorator each in lightmem/memory.py) and of the indexers' embedding step,
# ``embed_and_store(store, embedder, word_scorer, batch)``: one span per encoder batch.
add_span = operation("add", _n_messages, lambda items: {"lightmem.n_items": len(items)})
search_span = operation("search", _k_budget, lambda hits: {"lightmem.n_hits": len(hits)})
context_span = operation("build_context", _k_budget,
                         lambda c: {"lightmem.n_tokens": c.n_tokens, "lightmem.n_memories": len(c.memories)})
embed_span = traced("lightmem.embed", lambda a: {"lightmem.n_items": len(a.get("batch") or ())},
                    lambda done: {"lightmem.n_stored": done}, **{"gen_ai.operation.name": "embeddings"})


def export_otlp(service_name: str = "lightmem") -> bool:
    """Install OpenTelemetry's SDK as the global tracer provider, exporting spans by OTLP as the standard
    ``OTEL_EXPORTER_OTLP_*`` variables say (endpoint, headers; ``OTEL_EXPORTER_OTLP_PROTOCOL=grpc`` for gRPC, else
    HTTP/protobuf), unless a provider is set already (``opentelemetry-instrument``). ``OTEL_SERVICE_NAME`` wins over
    ``service_name``. False, with a warning, when the SDK or the exporter is not installed (spans then go nowhere).
    """
    from opentelemetry import trace

    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return False  # the application configured one
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        log.warning("OpenTelemetry spans are on but go nowhere: %s (pip install opentelemetry-sdk "
                    "opentelemetry-exporter-otlp, or run under opentelemetry-instrument)", exc)
        return False
    named = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": service_name}
    provider = TracerProvider(resource=Resource.create(named))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return True


@contextmanager
def server_span(method: str, headers: list[tuple[bytes, bytes]]) -> Iterator[Any]:
    """An HTTP server span (a child of the caller's ``traceparent``), current while the request runs; the caller
    names it after its route template once routing is done (``update_name``), never after the path (which holds
    ids). None when spans are off."""
    if _tracer is None:
        yield None
        return
    from opentelemetry import propagate
    from opentelemetry.trace import SpanKind

    carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in headers}
    with _tracer.start_as_current_span(method, context=propagate.extract(carrier), kind=SpanKind.SERVER,
                                       attributes={"http.request.method": method}, record_exception=False,
                                       set_status_on_exception=False) as s:
        try:
            yield s
        except BaseException as exc:
            _failed(s, exc)
            raise


if os.environ.get(ENV, "") == "1":
    enable()
