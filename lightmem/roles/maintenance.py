"""Online MTM maintenance after a write (paper Algorithm 2, steps 4-5).

Near-duplicates (cosine ≥ τ) are merged: the new item takes over the old one's
provenance and the old one is marked superseded. Conflicts on the same slot ("X lives
in", "X works at", "X's favourite ...") are resolved by time: the older fact is
superseded (valid_to, superseded_by), never deleted. The capacity bound lives in the store.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np

from lightmem.stores.base import MemoryStore
from lightmem.types import Filters, MemoryItem

_REL = re.compile(r"\b(lives? in|moved to|works? (?:at|for)|is married to|is dating|favou?rite [a-z]+ is)\s+([A-Za-z][\w' ]{1,40})", re.I)
_SUBJECT = re.compile(r"([A-Z][a-z]+(?: [A-Z][a-z]+)?)\W*$")


def slot(text: str) -> tuple[str, str, str] | None:
    """(subject, relation, object) of a simple slot-filling fact ("Ava lives in Porto"), or None."""
    body = text.split(": ", 1)[1] if re.match(r"^[^:]{1,40}: ", text) else text
    m = _REL.search(body)
    if not m:
        return None
    subj = _SUBJECT.search(body[: m.start()].strip())
    if not subj:
        return None
    rel = m.group(1).lower().replace("moved to", "lives in")
    rel = re.sub(r"^(live|work)\b", r"\1s", rel)
    obj = re.split(r"[.,;!?]| (?:last|this|next|since|in|on|at)\b", m.group(2))[0].strip().lower()
    return subj.group(1).lower(), rel, obj


class Maintainer:
    """Merges near-duplicates and supersedes conflicting older facts.

    Args:
        dup_threshold: Cosine at or above which a new item merges an older one.
        conflict_threshold: Cosine above which two items sharing a slot are compared.
        neighbours: How many nearest older items each new item is compared with.
    """

    def __init__(self, dup_threshold: float = 0.95, conflict_threshold: float = 0.5, neighbours: int = 5) -> None:
        self.dup, self.conflict, self.neighbours = dup_threshold, conflict_threshold, neighbours

    def maintain(self, store: MemoryStore, clock: Callable[[], float], user_id: str, new_items: Sequence[MemoryItem],
                 vectors: np.ndarray) -> dict[str, int]:
        """Apply merges and supersessions for ``new_items`` (just written to ``store``) at ``clock()``; returns counts."""
        now = clock()
        new_ids = {i.id for i in new_items}
        counts = {"merged": 0, "superseded": 0}
        for item, vec in zip(new_items, vectors):
            rids, cos = store.search_dense(user_id, vec, self.neighbours + len(new_items), Filters())
            olds = store.fetch(user_id, [int(r) for r in rids])
            for rid, c in zip(rids.tolist(), cos.tolist()):
                old = olds.get(rid)
                if old is None or old.id in new_ids or not old.is_current or old.event_time > item.event_time:
                    continue
                if c >= self.dup:
                    prov = list(dict.fromkeys([*old.provenance, *item.provenance]))
                    store.update(user_id, item.id, now, vector=vec, provenance=prov)
                    item.provenance = prov
                    store.update(user_id, old.id, now, valid_to=item.event_time, superseded_by=item.id)
                    counts["merged"] += 1
                elif c >= self.conflict:
                    a, b = slot(old.text), slot(item.text)
                    if a and b and a[:2] == b[:2] and a[2] != b[2]:
                        store.update(user_id, old.id, now, valid_to=item.event_time, superseded_by=item.id)
                        counts["superseded"] += 1
        return counts
