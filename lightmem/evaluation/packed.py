"""Scoring a prompt as the reader receives it: strict and credited evidence recall, answer coverage
of the memory text, the packed lines, and the two controls every context is compared with.

Strict recall credits an evidence turn only where a memory citing it is packed whole; a cut or squeezed
excerpt keeps its memory's provenance but not its credit (that looser figure is ``@budget_credited``,
reported beside). Answer coverage reads the memories' text without their date prefixes, which hold
many temporal answers' words whatever was retrieved. The controls are a context of exactly the gold
evidence turns and a random context of the same conversation, both composed by the system's own
composer within the same budget.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from lightmem.evaluation.baselines import turn_item
from lightmem.evaluation.metrics import answer_coverage, evidence_precision, evidence_recall
from lightmem.evaluation.system import is_whole
from lightmem.retrieval.composer import ContextComposer, format_memory
from lightmem.types import ComposedContext, Turn

CONTROLS = ("gold", "random")


def packed_recall(ctx: ComposedContext, evidence: Sequence[str]) -> dict[str, dict[str, float]]:
    """``@budget`` (strict: whole memories only) and ``@budget_credited`` (excerpts too) recall and precision."""
    out = {}
    for cut, mems in (("@budget", [m for m in ctx.memories if is_whole(m)]), ("@budget_credited", list(ctx.memories))):
        provs = [m.provenance for m in mems]
        out[cut] = {**asdict(evidence_recall(provs, evidence)), "precision": evidence_precision(provs, evidence)}
    return out


def memory_text(ctx: ComposedContext) -> str:
    """The packed memories' text, without the date prefixes the prompt renders them with."""
    return "\n".join(m.text for m in ctx.memories)


def packed_lines(ctx: ComposedContext) -> list[dict[str, Any]]:
    """Each packed line as the prompt shows it, whole or excerpt, with the turns it cites."""
    return [{"line": format_memory(m), "whole": is_whole(m), "provenance": list(m.provenance)} for m in ctx.memories]


def control_contexts(composer: ContextComposer, user_id: str, turns: Mapping[str, Turn], question: str,
                     evidence: Sequence[str], budget: int, rng: np.random.Generator) -> dict[str, ComposedContext]:
    """The gold-evidence context (evidence turns in time order) and a random one (turns of the conversation
    in a random order, packed until the budget is full), each a prompt of at most ``budget`` tokens."""
    gold = sorted((turns[e] for e in evidence if e in turns), key=lambda t: (t.timestamp, t.turn_id))
    ids = list(turns)
    shuffled = [turns[ids[i]] for i in rng.permutation(len(ids))]
    return {name: composer.compose(question, (), [turn_item(user_id, t) for t in chosen], budget)
            for name, chosen in (("gold", gold), ("random", shuffled))}


def control_scores(ctx: ComposedContext, evidence: Sequence[str], answer: object) -> dict[str, Any]:
    """Recall, coverage and tokens of a control context; its prompt rides along for the reader."""
    rec = evidence_recall([m.provenance for m in ctx.memories], evidence)
    return {"recall_all": rec.all, "coverage": answer_coverage(answer, memory_text(ctx)), "tokens": ctx.n_tokens,
            "prompt": ctx.prompt}
