"""The online SLM roles: Controller (SLM-1), Selector (SLM-2), Writer (SLM-3).

Each role is a Protocol with a no-generation default; the generative and trained
implementations plug in behind the same interfaces.
"""
from lightmem.roles.controller import Controller, FastController, GenerativeController, PassthroughController
from lightmem.roles.maintenance import Maintainer
from lightmem.roles.selector import (
    CrossEncoderSelector,
    GenerativeSelector,
    LearnedRanker,
    Selector,
    SLMSelector,
    Stage1Selector,
    ThresholdSelector,
)
from lightmem.roles.writer import DraftItem, ExtractiveWriter, GenerativeWriter, TurnWriter, Writer

__all__ = [
    "Controller", "PassthroughController", "FastController", "GenerativeController",
    "Selector", "Stage1Selector", "LearnedRanker", "SLMSelector", "ThresholdSelector", "CrossEncoderSelector",
    "GenerativeSelector",
    "Writer", "TurnWriter", "ExtractiveWriter", "GenerativeWriter", "DraftItem", "Maintainer",
]
