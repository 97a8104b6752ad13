"""A web console at ``/ui`` on ``lightmem serve``: a user's memories, the context inspector, the store's status."""
from __future__ import annotations

from lightmem.server.console.routes import console_router

__all__ = ["console_router"]
