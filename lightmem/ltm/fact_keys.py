"""Fact keys written offline: short facts about a user's memories that the memories are found by.

A consolidation cycle with ``ConsolidationSpec.fact_keys`` hands the batch's new memories to a ``FactKeyer``
(SLM-3 by default: ``SLMFactKeyer``), which returns facts, each citing the memories it comes from. Each cited
memory is keyed again: its ``keys`` become its earlier keys followed by the new facts, and its vector is computed
from its text and keys (``plan_rekey``). The prompt still shows the memory's own text. The store writes the facts
with the cycle (``stores.keys``), and deleting a memory deletes the facts that cite it.

``docs/results/locomo.md`` ("Fact keys") has what they are worth on LoCoMo: nothing measurable, even with facts
written by people. So the step is off by default.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
from pydantic import BaseModel, Field

from lightmem.llm import prompts
from lightmem.llm.base import LLM
from lightmem.llm.jsonio import call_json
from lightmem.stores.rows import merged_keys
from lightmem.timeutil import iso
from lightmem.types import ItemKind, MemoryItem, keyed_text

log = logging.getLogger(__name__)

Fact = tuple[str, list[str]]  # (the fact, ids of the memories it cites)


class FactKeyer(Protocol):
    """Writes facts about memories, each citing the ids of the memories it comes from."""

    def facts(self, items: Sequence[MemoryItem]) -> list[Fact]: ...


class _Fact(BaseModel):
    text: str = Field(min_length=3, max_length=300)
    sources: list[str] = Field(default_factory=list)


class FactKeysOutput(BaseModel):
    """The JSON the SLM must produce."""

    facts: list[_Fact] = Field(default_factory=list, max_length=32)


class SLMFactKeyer:
    """SLM-3 reads windows of memories, oldest first, and writes facts citing them (``prompts.FACT_KEYS``).

    A window whose output is unusable gets no facts; a fact citing no memory of its window is dropped.

    Args:
        llm: The LLM runtime.
        window: Memories per prompt.
        max_new_tokens: Length limit of the JSON answer.
    """

    def __init__(self, llm: LLM, window: int = 8, max_new_tokens: int = 256) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        self.llm, self.window, self.max_new_tokens = llm, window, max_new_tokens

    def facts(self, items: Sequence[MemoryItem]) -> list[Fact]:
        ordered = sorted(items, key=lambda it: it.event_time)
        windows = [ordered[i : i + self.window] for i in range(0, len(ordered), self.window)]
        asks = [prompts.FACT_KEYS.format(date=iso(w[0].event_time)[:10],
                                         memories="\n".join(f"m{j + 1}: {it.text}" for j, it in enumerate(w)))
                for w in windows]
        out: list[Fact] = []
        for w, parsed in zip(windows, call_json(self.llm, asks, FactKeysOutput, "fact_keys", prompts.retry,
                                                self.max_new_tokens)):
            if parsed is None:
                continue
            ids = {f"m{j + 1}": it.id for j, it in enumerate(w)}
            for f in parsed.facts:
                cited = list(dict.fromkeys(ids[s.strip()] for s in f.sources if s.strip() in ids))
                if cited and f.text.strip():
                    out.append((f.text.strip(), cited))
        return out


def keyable(item: MemoryItem) -> bool:
    """Which memories a cycle keys: current episodic entries (not abstracts, not superseded ones)."""
    return item.kind is ItemKind.EPISODIC and item.is_current


def plan_rekey(items: Sequence[MemoryItem], facts: Sequence[Fact],
               encode: Callable[[list[str]], np.ndarray]) -> dict[str, tuple[str, str, str, np.ndarray]]:
    """Item id → (its text, its keys now, its keys with the new facts, the vector of its text and new keys), for
    every memory of ``items`` that a fact cites (``OfflineChanges.rekey``)."""
    by_id = {it.id: it for it in items}
    new: dict[str, list[str]] = defaultdict(list)
    for text, cited in facts:
        for item_id in dict.fromkeys(cited):
            if item_id in by_id:
                new[item_id].append(text)
    if not new:
        return {}
    keys = {i: merged_keys([by_id[i].keys, *fs]) for i, fs in new.items()}
    vecs = np.asarray(encode([keyed_text(by_id[i].text, k) for i, k in keys.items()]), dtype=np.float32)
    return {i: (by_id[i].text, by_id[i].keys, k, v) for (i, k), v in zip(keys.items(), vecs)}
