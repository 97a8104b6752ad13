"""Serving lightmem to many agents: an HTTP API (``lightmem serve``) and an MCP server (``lightmem mcp``).

Both only talk to ``Memory``; FastAPI, uvicorn and the ``mcp`` SDK are imported here, not by the library.
"""
from lightmem.server.app import create_app
from lightmem.server.auth import KeyFileError, KeyRing, Principal
from lightmem.server.settings import ServeSettings, open_memory

__all__ = ["create_app", "KeyRing", "KeyFileError", "Principal", "ServeSettings", "open_memory"]
