"""Error injection for the stress tests (LightMem-SLM §4.6–4.7), as wrappers around the roles.

* ``NoisyController``: a share of each plan's HQs are irrelevant queries (SLM-1 failures).
* ``NoisyWriter``: a share of the Writer's entries become word salad (SLM-3 failures, MTM pollution);
  provenance is kept, so a polluted entry still claims its turns but no longer says what they said.
* ``saturate``: a burst of irrelevant recent turns right before the questions (the update gap:
  recent noise that consolidation has not reached yet).

Every wrapper draws from its own seeded generator, so a seed reproduces the same injected errors.
"""
from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import replace

from lightmem.datasets.formats import Conversation
from lightmem.roles.writer import DraftItem, write_segments
from lightmem.types import Filters, HypotheticalQuery, RetrievalPlan, Turn


def _rate(rate: float) -> float:
    if not 0.0 <= float(rate) <= 1.0:
        raise ValueError(f"an injection rate is a share in [0, 1], got {rate!r}")
    return float(rate)


class NoisyController:
    """Adds irrelevant HQs so that ``rate`` of a plan's HQs are noise (0.5: one per real HQ).

    Args:
        inner: The controller whose plans are perturbed.
        pool: Irrelevant queries (e.g. other conversations' questions).
        rate: Share of HQs that are irrelevant, in [0, 1).
        seed: Seed of the draws.
    """

    def __init__(self, inner, pool: Sequence[str], rate: float = 0.5, seed: int = 0) -> None:
        self.inner, self.pool, self.rate = inner, [q for q in pool if q.strip()], _rate(rate)
        if self.rate >= 1.0:
            raise ValueError("rate must be < 1: a plan keeps at least its real HQs")
        if not self.pool and self.rate > 0:
            raise ValueError("HQ noise needs a non-empty pool of irrelevant queries")
        self.rng = random.Random(seed)
        self.injected = 0

    def plan(self, query: str, k: int, filters: Filters, stm: Sequence[str] = (), now: float | None = None) -> RetrievalPlan:
        plan = self.inner.plan(query, k, filters, stm, now)
        n = len(plan.hqs)
        n_noise = round(n * self.rate / (1 - self.rate))
        if n_noise == 0:
            return plan
        noise = tuple(HypotheticalQuery(self.rng.choice(self.pool), self.rng.choice(plan.hqs).route, 0) for _ in range(n_noise))
        self.injected += n_noise
        real = tuple(replace(h, quota=0) for h in plan.hqs)  # the budget is split over all HQs, noise included
        hqs = list(real + noise)
        self.rng.shuffle(hqs)
        return replace(plan, hqs=tuple(hqs))


def word_salad(rng: random.Random, vocab: Sequence[str], n_words: int) -> str:
    return " ".join(rng.choice(vocab) for _ in range(max(3, n_words)))


class NoisyWriter:
    """Replaces ``rate`` of the Writer's entries by word salad drawn from ``pool``'s vocabulary."""

    def __init__(self, inner, pool: Sequence[str], rate: float = 0.5, seed: int = 0) -> None:
        self.inner, self.rate = inner, _rate(rate)
        self.vocab = sorted({w for t in pool for w in re.findall(r"[A-Za-z']+", t)})
        if not self.vocab and self.rate > 0:
            raise ValueError("write noise needs a pool of text to draw words from")
        self.rng = random.Random(seed)
        self.injected = 0

    def _perturb(self, drafts: list[DraftItem]) -> list[DraftItem]:
        out = []
        for d in drafts:
            if self.rng.random() < self.rate:
                self.injected += 1
                d = replace(d, text=word_salad(self.rng, self.vocab, len(d.text.split())), entities=[],
                            metadata={**d.metadata, "injected_noise": True})
            out.append(d)
        return out

    def write(self, turns: Sequence[Turn], context: Sequence[str] = ()) -> list[DraftItem]:
        return self._perturb(self.inner.write(turns, context))

    def write_segments(self, segments, context: Sequence[str] = ()) -> list[DraftItem]:
        return self._perturb(write_segments(self.inner, segments, context))


def noise_turns(pool: Sequence[str], n: int, at: float, seed: int = 0, speakers: Sequence[str] = ("user", "assistant")) -> list[Turn]:
    """``n`` irrelevant turns (texts drawn from ``pool``) dated ``at``; their ids start with ``noise:``."""
    if n < 0:
        raise ValueError("n must be >= 0")
    texts = [t for t in pool if t.strip()]
    if n and not texts:
        raise ValueError("saturation needs a non-empty pool of irrelevant turns")
    rng = random.Random(seed)
    spk = list(speakers) or ["user"]
    return [Turn(f"noise:{i}", spk[i % len(spk)], rng.choice(texts), at, "noise") for i in range(n)]


def saturate(memory, user: str, conv: Conversation, pool: Sequence[str], ratio: float, seed: int = 0) -> int:
    """Write ``ratio × turns`` irrelevant turns dated at the conversation's last session; returns how many."""
    n_turns = sum(len(s.turns) for s in conv.sessions)
    n = int(round(float(ratio) * n_turns))
    if n <= 0:
        return 0
    at = max(s.timestamp for s in conv.sessions)
    memory.add_turns(user, noise_turns(pool, n, at, seed, conv.speakers or ("user", "assistant")))
    memory.flush(user)
    memory.flush_index()
    return n


def pools(conversations: Sequence[Conversation], exclude: str) -> tuple[list[str], list[str]]:
    """(questions, turn texts) of every conversation but ``exclude``: irrelevant by construction."""
    others = [c for c in conversations if c.conv_id != exclude]
    return [q.question for c in others for q in c.qa], [t.text for c in others for s in c.sessions for t in s.turns]
