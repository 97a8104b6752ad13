"""The roles that may run a small language model: Controller (SLM-1), Selector (SLM-2), Writer (SLM-3), and the
Maintainer.

Each role is a Protocol whose default generates nothing (rules, features, the learned ranker); the generative and
trained implementations plug in behind the same interfaces. Stage 2's protocol and its selectors that generate
nothing live in ``lightmem.retrieval.stage2`` and are exported here too.
"""
from lightmem.retrieval.stage2 import LearnedRanker, Selector, Stage1Selector, ThresholdSelector
from lightmem.roles.controller import Controller, FastController, GenerativeController, PassthroughController
from lightmem.roles.maintenance import Maintainer
from lightmem.roles.selector import CrossEncoderSelector, GenerativeSelector, SLMSelector
from lightmem.roles.writer import DraftItem, ExtractiveWriter, GenerativeWriter, TurnWriter, Writer

__all__ = [
    "Controller", "PassthroughController", "FastController", "GenerativeController",
    "Selector", "Stage1Selector", "LearnedRanker", "SLMSelector", "ThresholdSelector", "CrossEncoderSelector",
    "GenerativeSelector",
    "Writer", "TurnWriter", "ExtractiveWriter", "GenerativeWriter", "DraftItem", "Maintainer",
]
