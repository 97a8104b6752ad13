"""What ``lightmem serve`` and ``lightmem mcp`` open, and how a server's workers receive it."""
from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass

from lightmem.errors import LightMemError
from lightmem.memory import Memory
from lightmem.validation import MAX_TURN_CHARS

log = logging.getLogger(__name__)
ENV = "LIGHTMEM_SERVE"  # a worker process reads its ServeSettings from here (uvicorn starts workers by import string)
SELECTORS = ("trained", "none")


@dataclass(frozen=True)
class ServeSettings:
    """Options of ``lightmem serve``.

    Attributes:
        store: Store folder (created when missing) or ``postgresql://`` URI.
        keys: JSON file mapping each API key to the user ids it may act for (``"*"``: all).
        host: Interface to listen on.
        port: TCP port.
        workers: Worker processes; each opens the store and loads the models once.
        encoder: Embedder of a new store: None (the trained memory adapter on its base model, all-mpnet-base-v2), or one of ``build.ENCODER_CHOICES``.
        selector: Stage 2: ``trained`` (the learned ranker) or ``none`` (the Stage-1 order).
        max_body_bytes: Larger request bodies get 413.
        cache_mb: Ceiling (MiB) of each worker's per-user in-memory views (None: the store's default).
        max_turn_chars: Longer turns are refused (422).
        metrics_port: Answer Prometheus on this port (``host``'s interface) with every worker's metrics; None: no
            metrics at all (``lightmem.server.metrics``).
        otel: OpenTelemetry spans on in every worker, exported by OTLP (``lightmem.tracing``).
        index_here: Each worker embeds what the store's queue holds (True), or leaves it to ``lightmem worker``
            processes (False; a PostgreSQL store).
    """

    store: str
    keys: str
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1
    encoder: str | None = None
    selector: str = "trained"
    max_body_bytes: int = 1 << 20
    cache_mb: float | None = None
    max_turn_chars: int = MAX_TURN_CHARS
    metrics_port: int | None = None
    otel: bool = False
    index_here: bool = True

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls) -> "ServeSettings":
        raw = os.environ.get(ENV)
        if not raw:
            raise LightMemError(f"{ENV} is not set: start the server with `lightmem serve`")
        return cls(**json.loads(raw))


def open_memory(store: str, encoder: str | None = None, selector: str = "trained", cache_mb: float | None = None,
                max_turn_chars: int = MAX_TURN_CHARS, index_here: bool = True) -> Memory:
    """Open a store (a folder or a ``postgresql://`` URI) for serving: an existing store with the embedder that wrote it, a new one with ``encoder``.

    Raises:
        LightMemError: an unknown ``encoder`` or ``selector``, or an ``encoder`` that is not the one that
            wrote the existing store.
    """
    from lightmem.build import resolve_embedder
    from lightmem.retrieval.stage2 import Stage1Selector, default_selector

    if selector not in SELECTORS:
        raise LightMemError(f"unknown selector {selector!r}; choose one of {list(SELECTORS)}")
    embedder = resolve_embedder(store, encoder)  # the CLI's resolution: a mismatched --encoder is refused
    options = {} if cache_mb is None else {"cache_mb": cache_mb}
    return Memory.open(store, embedder=embedder, selector=default_selector() if selector == "trained" else Stage1Selector(),
                       max_turn_chars=max_turn_chars, index_here=index_here,
                       background_index=None if index_here else True, **options)
