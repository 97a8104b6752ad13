"""Test doubles of the LLM runtime: scripted outputs, with the real usage meter."""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence

from lightmem.llm.base import GenerationError, UsageMeter


class ScriptedLLM:
    """Returns outputs from a script (cycled); an Exception instance in the script is raised.

    ``respond`` may instead compute an output from the prompt.
    """

    name = "scripted"

    def __init__(self, script: Iterable[object] = ('{"memories": []}',), respond: Callable[[str], str] | None = None,
                 yes: Callable[[str], float] | None = None, **backend_options: object) -> None:
        # backend_options: a config's llm node may carry a real backend's keys (model, device...)
        self._script = itertools.cycle(list(script))
        self._respond, self._yes = respond, yes
        self.meter = UsageMeter()
        self.prompts: list[str] = []

    def generate(self, prompts: Sequence[str], *, role: str = "default", max_new_tokens: int | None = None) -> list[str]:
        outs = []
        for p in prompts:
            self.prompts.append(p)
            out = self._respond(p) if self._respond else next(self._script)
            if isinstance(out, BaseException):
                self.meter.failure(role)
                raise GenerationError(str(out))
            self.meter.record(role, len(p.split()), len(str(out).split()), 1.0)
            outs.append(str(out))
        return outs


class YesNoLLM(ScriptedLLM):
    """Exposes yes_probability like the local transformers runtime."""

    def yes_probability(self, prompts: Sequence[str], *, role: str = "default") -> list[float]:
        self.meter.record(role, sum(len(p.split()) for p in prompts), 0, 1.0)
        return [self._yes(p) for p in prompts]


class NotAnOptimizer:
    """Takes anything, is no torch optimizer: what a mistyped ``optim.optimizer._target_`` may build."""

    def __init__(self, *args, **kwargs) -> None:
        self.args, self.kwargs = args, kwargs
