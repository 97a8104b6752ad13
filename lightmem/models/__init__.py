"""Offline model registry, embedders and token counters."""
from lightmem.models.embedder import Embedder, HashingEmbedder, SentenceTransformerEmbedder
from lightmem.models.registry import ModelRegistry, pick_device
from lightmem.models.tokens import HFTokenCounter, TokenCounter, WhitespaceTokenCounter

__all__ = [
    "Embedder",
    "HashingEmbedder",
    "SentenceTransformerEmbedder",
    "ModelRegistry",
    "pick_device",
    "TokenCounter",
    "HFTokenCounter",
    "WhitespaceTokenCounter",
]
