"""Adapters that plug lightmem into agent frameworks (each an extra: ``pip install 'lightmem-slm[langgraph]'``)."""
