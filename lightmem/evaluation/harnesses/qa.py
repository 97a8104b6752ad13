"""Question answering from retrieved memory, for every benchmark: the generator prompt, per-question
scores, LLM judges, and ``answer_questions`` / ``qa_summary``, the one QA pass and the one aggregate
that LoCoMo and LongMemEval share (each passes its own scores, judge prompt and verdict parser).

The generator is any ``LLM`` of the runtime (local SmolLM2 by default, an OpenAI-compatible
endpoint when configured). The judges are the LightMem / mem0 LoCoMo judge and LongMemEval's
per-type answer checks; they run only when a judge LLM is configured.
"""
from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from lightmem.llm.base import LLM, GenerationError
from lightmem.metrics.answers import bleu1, locomo_f1, rouge_l


@dataclass
class QAOptions:
    """The generator (and optional judge) that answer each question from its packed memories."""

    llm: LLM
    judge: LLM | None = None
    batch_size: int = 8
    max_new_tokens: int = 32
    controls: bool = False  # also answer from the control contexts (gold evidence, random)
    instruction: str = "decline"  # the reader's instruction, a name in READER_INSTRUCTIONS


# The reader's instructions (``qa.instruction`` names one), put before the prompt ``build_context`` returns (memories,
# then the question). ``decline`` lets the reader refuse when it finds no answer; ``guess`` asks for its best guess and
# does not assume a conversation between two people (LongMemEval's are a user's chats with an assistant).
READER_INSTRUCTIONS = {
    "decline": """You answer a question about a long conversation between two people, using only the memories below.
Each memory starts with the date it was said. Answer with a short phrase, using words from the memories when you can.
For a question about time, give the date. If the memories do not hold the answer, reply: Not mentioned.""",
    "guess": """You answer a question from the memories below, taken from earlier conversations.
Each memory starts with the date it was said. Answer with a short phrase, using words from the memories when you can.
For a question about time, give the date. If the memories do not settle the question, give your best guess from them.""",
}

# LightMem / mem0's LoCoMo judge (mem0 evaluation/metrics/llm_judge.py ACCURACY_PROMPT).
LOCOMO_JUDGE_PROMPT = """Your task is to label an answer to a question as 'CORRECT' or 'WRONG'. You will be given the following data:
    (1) a question (posed by one user to another user),
    (2) a 'gold' (ground truth) answer,
    (3) a generated answer
which you will score as CORRECT/WRONG.

The point of the question is to ask about something one user should know about the other user based on their prior conversations.
The gold answer will usually be a concise and short answer that includes the referenced topic, for example:
Question: Do you remember what I got the last time I went to Hawaii?
Gold answer: A shell necklace
The generated answer might be much longer, but you should be generous with your grading - as long as it touches on the same topic as the gold answer, it should be counted as CORRECT.

For time related questions, the gold answer will be a specific date, month, year, etc. The generated answer might be much longer or use relative time references (like "last Tuesday" or "next month"), but you should be generous with your grading - as long as it refers to the same date or time period as the gold answer, it should be counted as CORRECT. Even if the format differs (e.g., "May 7th" vs "7 May"), consider it CORRECT if it's the same date.

Now it's time for the real question:
Question: {question}
Gold answer: {gold}
Generated answer: {prediction}

First, provide a short (one sentence) explanation of your reasoning, then finish with CORRECT or WRONG.
Do NOT include both CORRECT and WRONG in your response, or it will break the evaluation script.

Just return the label CORRECT or WRONG in a json format with the key as "label"."""

# LongMemEval's answer checks (src/evaluation/evaluate_qa.py, get_anscheck_prompt), by question type.
_LME_BASE = ("I will give you a question, a correct answer, and a response from a model. Please answer yes if the response "
             "contains the correct answer. Otherwise, answer no. If the response is equivalent to the correct answer or "
             "contains all the intermediate steps to get the correct answer, you should also answer yes. If the response "
             "only contains a subset of the information required by the answer, answer no. ")
_LME_TAIL = "\n\nQuestion: {question}\n\nCorrect Answer: {gold}\n\nModel Response: {prediction}\n\nIs the model response correct? Answer yes or no only."
LONGMEMEVAL_JUDGE_PROMPTS = {
    "default": _LME_BASE + _LME_TAIL,
    "temporal-reasoning": _LME_BASE + (
        "In addition, do not penalize off-by-one errors for the number of days. If the question asks for the number of "
        "days/weeks/months, etc., and the model makes off-by-one errors (e.g., predicting 19 days when the answer is 18), "
        "the model's response is still correct.") + _LME_TAIL,
    "knowledge-update": _LME_BASE + (
        "If the response contains some previous information along with an updated answer, the response should be "
        "considered as correct as long as the updated answer is the required answer.") + _LME_TAIL,
    "single-session-preference": (
        "I will give you a question, a rubric for desired personalized response, and a response from a model. Please "
        "answer yes if the response satisfies the desired response. Otherwise, answer no. The model does not need to "
        "reflect all the points in the rubric. The response is correct as long as it recalls and utilizes the user's "
        "personal information correctly.\n\nQuestion: {question}\n\nRubric: {gold}\n\nModel Response: {prediction}\n\n"
        "Is the model response correct? Answer yes or no only."),
    "abstention": (
        "I will give you an unanswerable question, an explanation, and a response from a model. Please answer yes if "
        "the model correctly identifies the question as unanswerable. The model could say that the information is "
        "incomplete, or some other information is given but the asked information is not.\n\nQuestion: {question}\n\n"
        "Explanation: {gold}\n\nModel Response: {prediction}\n\nDoes the model correctly identify the question as "
        "unanswerable? Answer yes or no only."),
}


def longmemeval_judge_prompt(question_type: str, question_id: str = "") -> str:
    """The answer-check template of a LongMemEval question (``*_abs`` ids are abstention questions)."""
    if question_id.endswith("_abs"):
        return LONGMEMEVAL_JUDGE_PROMPTS["abstention"]
    return LONGMEMEVAL_JUDGE_PROMPTS.get(question_type, LONGMEMEVAL_JUDGE_PROMPTS["default"])


def answer_prompt(context: str, instruction: str = "decline") -> str:
    """The reader's input: its instruction (a name in ``READER_INSTRUCTIONS``), the context prompt as composed (it ends
    with the question), the cue.

    Raises:
        ValueError: an instruction of another name.
    """
    if instruction not in READER_INSTRUCTIONS:
        raise ValueError(f"qa.instruction={instruction!r}: choose one of {sorted(READER_INSTRUCTIONS)}")
    return f"{READER_INSTRUCTIONS[instruction]}\n\n{context.strip()}\nAnswer:"


def clean_answer(text: str) -> str:
    """The first line of a generation, without an echoed ``Answer:`` label or wrapping quotes."""
    line = next((ln.strip() for ln in str(text).strip().splitlines() if ln.strip()), "")
    line = re.sub(r"^(answer|a)\s*:\s*", "", line, flags=re.I)
    return line.strip().strip('"').strip()


def parse_locomo_label(text: str) -> float | None:
    """1.0 for CORRECT, 0.0 for WRONG; the JSON ``label`` first, else the last label word; None if neither."""
    for m in re.finditer(r"\{[^{}]*\}", text):
        try:
            label = str(json.loads(m.group(0)).get("label", "")).strip().upper()
        except (json.JSONDecodeError, AttributeError):
            continue
        if label in ("CORRECT", "WRONG"):
            return float(label == "CORRECT")
    words = re.findall(r"\b(CORRECT|WRONG)\b", text.upper())
    return float(words[-1] == "CORRECT") if words else None


def parse_yes_no(text: str) -> float | None:
    """1.0 for yes, 0.0 for no (the first of the two words); None if neither appears."""
    m = re.search(r"\b(yes|no)\b", text.lower())
    return None if m is None else float(m.group(1) == "yes")


def locomo_scores(prediction: str, answer: str, category: int) -> dict[str, float]:
    """LoCoMo's F1 for the category, plus BLEU-1 and ROUGE-L against the gold answer."""
    scores = {"f1": locomo_f1(prediction, answer, category)}
    if category == 5:  # adversarial: the answer is "not in the conversation"; overlap is not meaningful
        scores.update(bleu1=scores["f1"], rouge_l=scores["f1"])
    else:
        scores.update(bleu1=bleu1(prediction, answer), rouge_l=rouge_l(prediction, answer))
    return scores


@dataclass
class Generation:
    text: str
    ms: float  # generation time of this question (its batch's time, shared equally)


def generate_answers(llm: LLM, contexts: Sequence[str], batch_size: int = 8, max_new_tokens: int = 32,
                     role: str = "generator", instruction: str = "decline") -> list[Generation]:
    """Answer from each context prompt (it holds its question) under the named reader instruction; a failed batch
    answers "" and is counted by the meter."""
    out: list[Generation] = []
    for i in range(0, len(contexts), max(1, batch_size)):
        prompts = [answer_prompt(c, instruction) for c in contexts[i : i + batch_size]]
        t = time.perf_counter()
        try:
            texts = llm.generate(prompts, role=role, max_new_tokens=max_new_tokens)
        except GenerationError:
            texts = [""] * len(prompts)
        ms = (time.perf_counter() - t) * 1000 / len(prompts)
        out.extend(Generation(clean_answer(x), ms) for x in texts)
    return out


def judge(llm: LLM, prompts: Sequence[str], parse, batch_size: int = 8, role: str = "judge") -> list[float | None]:
    """Run judge prompts and parse each verdict (None: unparseable or the backend failed)."""
    out: list[float | None] = []
    for i in range(0, len(prompts), max(1, batch_size)):
        batch = list(prompts[i : i + batch_size])
        try:
            texts = llm.generate(batch, role=role, max_new_tokens=64)
        except GenerationError:
            texts = [""] * len(batch)
        out.extend(parse(t) for t in texts)
    return out


class Answerable(Protocol):
    """A benchmark's question record as the QA pass sees it; ``qa`` is filled in place."""

    question: str
    search_ms: float
    qa: dict[str, Any]


R = TypeVar("R", bound=Answerable)


def answer_questions(records: Sequence[R], contexts: Sequence[str], opts: QAOptions,
                     scores: Callable[[R, str], dict[str, float]], judge_prompt: Callable[[R, str], str],
                     parse_verdict: Callable[[str], float | None]) -> None:
    """Generate each record's answer from its context, score it and (with a judge) judge it, in place.

    Args:
        records: The questions, each with the milliseconds its search took.
        contexts: One context prompt per record, as ``build_context`` composed it (it holds the question).
        opts: The generator and the optional judge.
        scores: The benchmark's overlap scores of a prediction (e.g. LoCoMo's F1, BLEU-1, ROUGE-L).
        judge_prompt: The benchmark's judge prompt for a record and its prediction.
        parse_verdict: Reads the judge's verdict (1.0, 0.0, or None when unparseable).

    Each record's ``qa`` becomes ``{"prediction", **scores, "judge", "generate_ms", "e2e_ms"}``. A generator that
    only records its prompts (``llm=record``: its ``records_prompts`` is true) answers with ids: those are not scored
    (each score None) and ``qa["recorded"]`` is set, for ``tools/score_answers.py`` to score once they are answered.
    """
    if len(records) != len(contexts):
        raise ValueError("one context per question")
    gens = generate_answers(opts.llm, contexts, opts.batch_size, opts.max_new_tokens, instruction=opts.instruction)
    verdicts: list[float | None] = [None] * len(records)
    if opts.judge is not None:
        prompts = [judge_prompt(r, g.text) for r, g in zip(records, gens)]
        verdicts = judge(opts.judge, prompts, parse_verdict, opts.batch_size)
    recorded = bool(getattr(opts.llm, "records_prompts", False))
    for r, g, v in zip(records, gens, verdicts):
        scored = scores(r, g.text)
        r.qa = {"prediction": g.text, **scored, "judge": v, "generate_ms": g.ms, "e2e_ms": r.search_ms + g.ms}
        if recorded:  # an id, not an answer: the same keys, none scored
            r.qa.update(dict.fromkeys(scored), recorded=True)


def qa_summary(answers: Sequence[dict[str, Any]], keys: Sequence[str]) -> dict[str, Any]:
    """Over answered questions' ``qa`` dicts: ``n``, the mean of each score in ``keys`` (None when no answer was
    scored: prompts recorded with ``llm=record``, counted in ``recorded``), ``judge_accuracy`` (over the judged ones;
    None when none was judged) and ``judged``."""
    out: dict[str, Any] = {"n": len(answers)}
    for key in keys:
        vals = [a[key] for a in answers if a.get(key) is not None]
        out[key] = float(np.mean(vals)) if vals else None
    n_recorded = sum(1 for a in answers if a.get("recorded"))
    if n_recorded:
        out["recorded"] = n_recorded
    judged = [a["judge"] for a in answers if a.get("judge") is not None]
    out["judge_accuracy"] = float(np.mean(judged)) if judged else None
    out["judged"] = len(judged)
    return out
