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

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from lightmem.evaluation.harnesses.baselines import turn_item
from lightmem.evaluation.harnesses.system import is_whole
from lightmem.metrics.answers import answer_coverage
from lightmem.metrics.evidence import evidence_precision, evidence_recall
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
    """Recall, coverage and tokens of a control context; its prompt rides along for the reader. A question
    without evidence turns (LongMemEval's abstentions) has no recall (None)."""
    recall = evidence_recall([m.provenance for m in ctx.memories], evidence).all if evidence else None
    return {"recall_all": recall, "coverage": answer_coverage(answer, memory_text(ctx)), "tokens": ctx.n_tokens,
            "prompt": ctx.prompt}


def answer_controls(records: Sequence[Any], run: Callable[[Sequence[Any], Sequence[str]], None]) -> None:
    """Answer every record's control prompts with ``run`` (the harness's answer-and-score pass over records and
    their prompts), each into ``record.controls[name]["qa"]``; the records' own answers are left as they are, and
    a record without controls (nothing was said to compose them from) is passed over."""
    for name in CONTROLS:
        having = [r for r in records if name in r.controls]
        copies = [dataclasses.replace(r, qa={}) for r in having]
        run(copies, [r.controls[name]["prompt"] for r in having])
        for r, c in zip(having, copies):
            r.controls[name]["qa"] = c.qa


def control_means(records: Sequence[Any]) -> dict[str, float]:
    """Over records with controls: each control's mean ``recall_all`` (questions that have evidence) and
    ``coverage`` (questions whose answer has words to cover): ``gold_recall_all``, ``random_coverage``, ..."""
    out: dict[str, float] = {}
    for name in CONTROLS:
        ctl = [r.controls[name] for r in records if name in r.controls]
        if not ctl:
            continue
        for key in ("recall_all", "coverage"):
            vals = [c[key] for c in ctl if c.get(key) is not None]
            out[f"{name}_{key}"] = float(np.mean(vals)) if vals else float("nan")
    return out


def control_f1(records: Sequence[Any]) -> dict[str, float]:
    """Mean reader F1 of each control context over the answered records whose control was answered too
    (``answer_controls``): ``gold_f1``, ``random_f1``."""
    out: dict[str, float] = {}
    for name in CONTROLS:
        answered = [r.controls[name].get("qa") or {} for r in records if r.qa and name in r.controls]
        ctl = [a["f1"] for a in answered if a.get("f1") is not None]
        if ctl:
            out[f"{name}_f1"] = float(np.mean(ctl))
    return out
