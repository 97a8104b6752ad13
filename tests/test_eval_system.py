"""The evaluation's System protocol: a Memory and the full-context baseline run through the same harnesses."""
from __future__ import annotations

import inspect

from lightmem.evaluation.harnesses.baselines import FullContext
from lightmem.evaluation.harnesses.system import System
from lightmem.types import Turn

METHODS = sorted(n for n, v in vars(System).items() if callable(v) and not n.startswith("_"))


def test_memory_and_the_full_context_baseline_are_systems(memory, embedder):
    turns = [Turn(f"t{i}", "A", f"word{i} filler text about the garden", 1000.0 + i) for i in range(6)]
    for system in (memory, FullContext(window=4096)):
        assert isinstance(system, System)
        for name in METHODS:  # same parameters, in the same order, as the protocol's
            want = list(inspect.signature(getattr(System, name)).parameters)[1:]
            assert list(inspect.signature(getattr(system, name)).parameters)[: len(want)] == want, (type(system).__name__, name)
        system.add_turns("u", turns)
        system.flush("u")
        ctx = system.build_context("garden", "u", budget=60)
        # no system passes more than the budget, counted on the whole prompt by the prompt's tokenizer
        assert ctx.memories and ctx.n_tokens <= 60
        assert ctx.n_tokens == system.composer.counter.count([ctx.prompt])[0]


def test_a_partial_system_is_not_a_system():
    class RetrieveOnly:
        ltm = None

        def retrieve(self, query, user_id, k=None, filters=None, stm=(), now=None, budget=None): ...

    assert not isinstance(RetrieveOnly(), System)
