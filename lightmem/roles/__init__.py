"""The online SLM roles: Controller (SLM-1), Selector (SLM-2), Writer (SLM-3).

Each role is a Protocol with a no-generation default; the generative and trained
implementations plug in behind the same interfaces.
"""
from lightmem.roles.controller import Controller, PassthroughController
from lightmem.roles.selector import Selector, Stage1Selector
from lightmem.roles.writer import DraftItem, TurnWriter, Writer

__all__ = ["Controller", "PassthroughController", "Selector", "Stage1Selector", "Writer", "TurnWriter", "DraftItem"]
