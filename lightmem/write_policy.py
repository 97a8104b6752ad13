"""Write policies: which turns of an ``add`` become memories.

``Memory.add(..., policy=...)`` names one. Every turn is stored either way, as the conversation's record (adding it
again is a no-op): a turn a memory cites is erased with that memory, and ``delete_user`` erases them all; a turn no
memory cites (a question, a "thanks") stays in the record until then. The policy decides which turns the Writer
turns into memories that a search can return.

- ``"all"`` (``Memory.add``'s default, and the HTTP API's): every turn becomes memories. For dialogues replayed into
  memory, where each line was said by a person.
- ``"agent"`` (the default of every framework adapter): for an agent that stores its own exchanges. A user turn is
  remembered unless it only asks (every sentence a question, or talk about the conversation itself: "I wanted to
  follow up on our last chat. Which app did you recommend?") or only exchanges pleasantries. An assistant turn is
  remembered only when it states something new: not a pleasantry, a question back or a decline ("I'm not sure."),
  not a short answer to the user's question (an answer comes from memory or from the model, and either way is not
  the user's fact; a wrong one, stored, would come back as a memory), and most of its content words must be absent
  from the turns before it and from ``context``. A turn that restates a memory the user already has (its content words all in that
  memory, or nearly the same words) is not written again: the stored memory cites the new turn too, so its
  ``provenance`` counts how often it was said.

A policy is any object with ``name``, ``dedupe`` and ``judge(turns, context)``; ``AgentPolicy``'s thresholds are
its fields. ``lightmem/language/exchange.py`` holds the text rules; the agent-loop benchmark (``eval/agent_loop.py``)
measures them.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from lightmem.errors import InvalidInputError
from lightmem.language.exchange import content_words, is_assistant, is_decline, is_pleasantry, is_question_only, novelty
from lightmem.types import Turn

POLICIES = ("all", "agent")


@dataclass(frozen=True)
class Verdict:
    """What a policy decided for one turn: ``keep`` (becomes memories) or not, and why (``kept``, ``question``,
    ``pleasantry``, ``declines``, ``answer``, ``restates``)."""

    keep: bool
    reason: str = "kept"


@runtime_checkable
class WritePolicy(Protocol):
    name: str
    dedupe: bool  # whether a kept turn that restates a stored memory is linked to it instead of written again

    def judge(self, turns: Sequence[Turn], context: Sequence[str] = ()) -> list[Verdict]: ...


@dataclass(frozen=True)
class KeepAll:
    """Every turn becomes memories (the ``"all"`` policy)."""

    name: str = "all"
    dedupe: bool = False

    def judge(self, turns: Sequence[Turn], context: Sequence[str] = ()) -> list[Verdict]:
        return [Verdict(True) for _ in turns]


@dataclass(frozen=True)
class AgentPolicy:
    """The ``"agent"`` policy (module docstring).

    Args:
        min_answer_words: An assistant turn after a user's question is an answer, kept only with at least this many
            content words (a recommendation, a plan, a worked result) and new content; "Vegan." and "It was in May"
            are not kept. An assistant turn that opens a call (no user turn before it) counts as an answer.
        min_novelty: The least share of an assistant turn's content words that the turns before it in the call and
            ``context`` must lack.
        dedupe: Link a kept turn that restates a stored memory to it instead of writing it again.
    """

    min_answer_words: int = 12
    min_novelty: float = 0.5
    dedupe: bool = True
    name: str = "agent"

    def judge(self, turns: Sequence[Turn], context: Sequence[str] = ()) -> list[Verdict]:
        out: list[Verdict] = []
        asked = True  # an assistant turn with no user turn before it in this call is taken for an answer
        earlier: list[str] = list(context)
        for t in turns:
            text = t.text
            if is_pleasantry(text):
                out.append(Verdict(False, "pleasantry"))
            elif is_question_only(text):
                out.append(Verdict(False, "question"))
                if not is_assistant(t.speaker):
                    asked = True
            elif not is_assistant(t.speaker):
                out.append(Verdict(True))
                asked = False
            elif is_decline(text):
                out.append(Verdict(False, "declines"))
            elif asked and len(content_words(text)) < self.min_answer_words:
                out.append(Verdict(False, "answer"))
            elif novelty(text, earlier) < self.min_novelty:
                out.append(Verdict(False, "restates"))
            else:
                out.append(Verdict(True))
            earlier.append(text)
        return out


def check(policy: object) -> str | WritePolicy | None:
    """``policy`` unchanged when ``resolve`` accepts it (an adapter checks its ``policy=`` when it is built, not at
    its first save); ``InvalidInputError`` otherwise."""
    resolve(policy)  # type: ignore[arg-type]
    return policy  # type: ignore[return-value]


def resolve(policy: str | WritePolicy | None) -> WritePolicy | None:
    """The policy ``policy`` names: None for ``None`` or ``"all"`` (every turn is written, nothing is judged),
    ``AgentPolicy()`` for ``"agent"``, or the policy object itself.

    Raises:
        InvalidInputError: an unknown name, or an object that is not a policy.
    """
    if policy is None or policy == "all":
        return None
    if policy == "agent":
        return AgentPolicy()
    if isinstance(policy, str):
        raise InvalidInputError(f"policy must be one of {list(POLICIES)}, got {policy!r}")
    if isinstance(policy, WritePolicy):
        return policy
    raise InvalidInputError(f"policy must be one of {list(POLICIES)} or a WritePolicy, got {type(policy).__name__}")
