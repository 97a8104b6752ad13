"""Synthetic (Query, Subgraph, Path) data: per-user knowledge graphs rendered into dialogues."""
from lightmem.synth.generate import SynthSpec, data_card, generate, write

__all__ = ["SynthSpec", "data_card", "generate", "write"]
