"""Writer (SLM-3): turns an interaction into MTM entries with provenance."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from lightmem.types import ItemKind, Turn


@dataclass
class DraftItem:
    """An entry the Writer proposes; the store gives it an id, vector and token count."""

    text: str
    provenance: list[str]
    event_time: float
    topic: str | None = None
    entities: list[str] = field(default_factory=list)
    kind: ItemKind = ItemKind.EPISODIC
    metadata: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Writer(Protocol):
    """Writes entries for new turns, given the recent context (STM) as plain strings."""

    def write(self, turns: Sequence[Turn], context: Sequence[str] = ()) -> list[DraftItem]: ...


class TurnWriter:
    """One entry per turn: ``speaker: text`` (with the image caption), provenance = the turn."""

    def write(self, turns: Sequence[Turn], context: Sequence[str] = ()) -> list[DraftItem]:
        return [
            DraftItem(
                text=t.render(),
                provenance=[t.turn_id],
                event_time=t.timestamp,
                metadata={"speaker": t.speaker, **({"session_id": t.session_id} if t.session_id else {})},
            )
            for t in turns
        ]
