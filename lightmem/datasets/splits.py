"""Stable train/val/test splits of the dev benchmarks, by conversation (a LongMemEval question is its own haystack)."""
from __future__ import annotations

import hashlib


def split_of(key: str, fracs: tuple[float, float, float] = (0.8, 0.1, 0.1)) -> str:
    """A stable train/val/test split from a hash of ``key`` (a conversation or question id)."""
    u = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "train" if u < fracs[0] else "val" if u < fracs[0] + fracs[1] else "test"
