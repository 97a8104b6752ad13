"""Run the HTTP API under uvicorn, with one or more worker processes."""
from __future__ import annotations

import os

from fastapi import FastAPI

from lightmem.server.app import create_app
from lightmem.server.auth import KeyRing
from lightmem.server.settings import ENV, ServeSettings, open_memory


def app_from_env() -> FastAPI:
    """The app of one worker, from the settings ``serve`` left in the environment (uvicorn's factory)."""
    s = ServeSettings.from_env()
    return create_app(lambda: open_memory(s.store, s.encoder, s.selector, s.cache_mb, s.max_turn_chars), KeyRing.load(s.keys), s.max_body_bytes)


def serve(settings: ServeSettings) -> None:
    """Serve until interrupted. The keys file is checked here, before any worker starts.

    Raises:
        KeyFileError: the keys file is missing or malformed.
    """
    import uvicorn

    KeyRing.load(settings.keys)
    os.environ[ENV] = settings.to_env()  # workers inherit the environment
    uvicorn.run("lightmem.server.serve:app_from_env", factory=True, host=settings.host, port=settings.port,
                workers=settings.workers, log_level="info")
