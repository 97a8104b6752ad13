"""Queries through one encoder, memories through a cheaper one trained into the same vector space.

A question is embedded once per search, a memory once per write; on 2 CPU cores the write side's encoder is what
bounds how many turns a second the background indexer can embed. ``SplitEmbedder`` keeps the served query encoder
(all-mpnet-base-v2 + adapter) and embeds memories with a document encoder distilled into its space
(``train/doc_encoder.py``: all-MiniLM-L6-v2 + LoRA + a 384->768 projection, ~8x less arithmetic per text).
Its name joins both names, so a store written with it reopens with the same pair and never with either alone.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from lightmem.models.tokens import TokenCounter
from lightmem.models.vector_cache import VectorCache

SEPARATOR = " <docs> "  # "<query encoder name> <docs> <document encoder name>"


def split_name(name: str) -> tuple[str, str] | None:
    """(query encoder name, document encoder name) of a ``SplitEmbedder`` name, or None for any other name."""
    query, sep, documents = name.partition(SEPARATOR)
    return (query, documents) if sep and query and documents else None


class SplitEmbedder:
    """An embedder whose queries and documents go through two encoders of one vector space.

    Args:
        query: Encodes questions (``encode(..., is_query=True)``); its tokenizer counts tokens.
        documents: Encodes everything else (memories); must return vectors of the query encoder's dimension.
        vector_cache: A SQLite file of document vectors by content (``lightmem.models.vector_cache``), keyed by the
            document encoder's name.
        query_cache_size: When set, the query encoder's cache of recent question vectors holds this many (0: none,
            as the latency benchmark runs).
    """

    def __init__(self, query: Any, documents: Any, vector_cache: str | None = None,
                 query_cache_size: int | None = None) -> None:
        if query_cache_size is not None and hasattr(query, "set_query_cache_size"):
            query.set_query_cache_size(query_cache_size)
        if query.dim != documents.dim:
            raise ValueError(f"the document encoder {documents.name!r} makes {documents.dim}-d vectors and the query "
                             f"encoder {query.name!r} {query.dim}-d ones: a split embedder needs one vector space")
        self.query, self.documents, self.dim = query, documents, query.dim
        self.name = f"{query.name}{SEPARATOR}{documents.name}"
        self._vectors = VectorCache(vector_cache, documents.name, self.dim) if vector_cache else None

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        if is_query:
            return self.query.encode(texts, is_query=True)
        if self._vectors is not None and len(texts):
            return self._vectors.encode(list(texts), lambda missing: self.documents.encode(missing))
        return self.documents.encode(texts)

    def token_counter(self) -> TokenCounter:
        """The query encoder's counter: stored token counts stay those of the encoder served before the split."""
        return self.query.token_counter()

    def __getattr__(self, name: str) -> Any:  # tokenizer, device...: the query encoder's
        if name in ("query", "documents"):
            raise AttributeError(name)
        return getattr(self.query, name)
