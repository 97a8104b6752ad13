"""lightmem: long-term memory for LLM agents driven by small language models."""
from lightmem.async_memory import AsyncMemory
from lightmem.errors import (
    InvalidInputError,
    ItemNotFoundError,
    LightMemError,
    ModelPackageMissingError,
    NotAStoreError,
    StoreCorruptError,
    StoreError,
    StoreFullError,
    StoreReadOnlyError,
)
from lightmem.memory import Memory
from lightmem.types import ComposedContext, Filters, Hit, ItemKind, MemoryItem, RetrievalPlan, Turn

__version__ = "0.1.0"
__all__ = [
    "Memory",
    "AsyncMemory",
    "MemoryItem",
    "Hit",
    "Turn",
    "Filters",
    "ItemKind",
    "RetrievalPlan",
    "ComposedContext",
    "LightMemError",
    "InvalidInputError",
    "ItemNotFoundError",
    "ModelPackageMissingError",
    "StoreError",
    "StoreFullError",
    "StoreReadOnlyError",
    "StoreCorruptError",
    "NotAStoreError",
]
