"""What every framework adapter does with the memory it is given: call a method of a ``Memory``, ``AsyncMemory``,
``MemoryClient`` or ``AsyncMemoryClient`` alike."""
from __future__ import annotations

import inspect
from typing import Any


async def call_memory(memory: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """Call ``memory.<name>``, awaiting the result when it is awaitable (``AsyncMemory``, an async client). A
    ``Memory`` or a ``MemoryClient`` runs on the calling thread: the event loop waits for the call's length."""
    result = getattr(memory, name)(*args, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result
