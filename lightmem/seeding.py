"""One seed for every random number generator a run draws from (evaluation and training alike)."""
from __future__ import annotations


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (every device).

    Call it before building a model: fresh heads and LoRA matrices are drawn at construction, so
    an unseeded build makes a run irreproducible; the evaluation's error injectors draw from it too.
    """
    from accelerate.utils import set_seed  # imported here: accelerate pulls in torch

    set_seed(seed)
