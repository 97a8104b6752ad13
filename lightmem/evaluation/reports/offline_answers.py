"""Scoring answers produced away from the run: a LoCoMo or LongMemEval run recorded with ``llm=record`` holds an id
where each prediction would be (``questions.jsonl``); ``tools/answer_prompts.py`` answered the recorded prompts elsewhere. These
pure functions join the two and score each question as the harness scores a prediction (``clean_answer``, then
LoCoMo's per-category F1 or LongMemEval's token F1, and BLEU-1)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lightmem.datasets.formats import read_json
from lightmem.evaluation.harnesses.locomo import CATEGORY_NAMES
from lightmem.evaluation.harnesses.qa import clean_answer
from lightmem.metrics.answers import bleu1, locomo_f1, token_f1
from lightmem.metrics.stats import paired_bootstrap

CATEGORIES = {c: name for c, name in CATEGORY_NAMES.items() if c != 5}  # F1 is over 1-4; adversarial apart


def answers_by_id(paths: Sequence[str | Path]) -> dict[str, str]:
    """``{id: answer}`` of answer files (``tools/answer_prompts.py``'s output).

    Raises:
        ValueError: an id is answered twice with different answers.
    """
    out: dict[str, str] = {}
    for p in paths:
        for row in read_json(p):
            if row["id"] in out and out[row["id"]] != row["answer"]:
                raise ValueError(f"{p}: id {row['id']!r} was answered twice, differently")
            out[row["id"]] = row["answer"]
    return out


def _recorded_answer(q: Mapping[str, Any], answers: Mapping[str, str], control: str | None) -> str | None:
    """The cleaned answer to a question's recorded prompt (``control``: to that control's prompt), or None when no
    prompt was recorded for it.

    Raises:
        KeyError: the recorded id has no answer (the answers belong to another recording).
    """
    qa = q.get("qa") or {}
    if control is not None:
        qa = ((q.get("controls") or {}).get(control) or {}).get("qa") or {}
    pid = qa.get("prediction")
    if not pid:
        return None
    if pid not in answers:
        raise KeyError(f"no answer for the recorded prompt {pid!r} of {q.get('conv_id') or q.get('question_id')}: "
                       f"{q['question']!r}")
    return clean_answer(answers[pid])


def score_locomo_run(questions: Sequence[Mapping[str, Any]], answers: Mapping[str, str],
                     control: str | None = None) -> dict[tuple[str, str], dict[str, Any]]:
    """Per question (``(conv_id, question)``): the F1 and BLEU-1 of the answer to its recorded prompt, its category
    and whether it counts in the mean (categories 1-4); ``control`` scores a control context's prompt instead
    (``gold`` or ``random``, from ``qa.controls``).

    Raises:
        KeyError: a recorded id has no answer (the answers belong to another recording).
    """
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for q in questions:
        pred = _recorded_answer(q, answers, control)
        if pred is None:
            continue
        c = int(q["category"])
        out[(q["conv_id"], q["question"])] = {"f1": locomo_f1(pred, q["answer"], c), "bleu1": bleu1(pred, str(q["answer"])),
                                              "category": f"{c}-{CATEGORY_NAMES.get(c, c)}",
                                              "counted": c in CATEGORIES}
    return out


def score_longmemeval_run(questions: Sequence[Mapping[str, Any]], answers: Mapping[str, str],
                          control: str | None = None) -> dict[str, dict[str, Any]]:
    """Per question (``question_id``): the token F1 of the answer to its recorded prompt, as ``eval/longmemeval.py``
    scores a prediction, BLEU-1 and the question type; every type counts. ``control`` as in ``score_locomo_run``.

    Raises:
        KeyError: a recorded id has no answer.
    """
    out: dict[str, dict[str, Any]] = {}
    for q in questions:
        pred = _recorded_answer(q, answers, control)
        if pred is not None:
            out[str(q["question_id"])] = {"f1": token_f1(pred, str(q["answer"])), "bleu1": bleu1(pred, str(q["answer"])),
                                          "category": str(q["question_type"]), "counted": True}
    return out


def score_run(questions: Sequence[Mapping[str, Any]], answers: Mapping[str, str],
              control: str | None = None) -> dict[Any, dict[str, Any]]:
    """``score_longmemeval_run`` for a LongMemEval run's questions (they carry ``question_id``), else
    ``score_locomo_run``."""
    if questions and "question_id" in questions[0]:
        return score_longmemeval_run(questions, answers, control)
    return score_locomo_run(questions, answers, control)


def summarize(scored: Mapping[Any, Mapping[str, Any]]) -> dict[str, Any]:
    """Mean F1 and BLEU-1 over the questions that count (LoCoMo: categories 1-4), and F1 per category."""
    rows = [r for r in scored.values() if r["counted"]]
    by_cat = {c: float(np.mean([r["f1"] for r in rows if r["category"] == c])) for c in sorted({r["category"] for r in rows})}
    return {"n": len(rows), "f1": float(np.mean([r["f1"] for r in rows])) if rows else float("nan"),
            "bleu1": float(np.mean([r["bleu1"] for r in rows])) if rows else float("nan"), "f1_by_category": by_cat}


def compare(a: Mapping[Any, Mapping[str, float]], b: Mapping[Any, Mapping[str, float]], resamples: int = 2000) -> dict[str, float]:
    """Paired bootstrap of F1, ``a - b``, over the questions both scored (categories 1-4).

    Raises:
        ValueError: the two share no question.
    """
    keys = [k for k in a if k in b and a[k]["counted"]]
    if not keys:
        raise ValueError("the two runs share no scored question")
    r = paired_bootstrap([a[k]["f1"] for k in keys], [b[k]["f1"] for k in keys], resamples)
    return {"diff": r.diff, "ci_low": r.ci_low, "ci_high": r.ci_high, "p_value": r.p_value, "n": r.n}
