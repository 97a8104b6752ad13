"""The agent-loop benchmark: memory that an agent writes while it is being used, not a dialogue replayed into it.

Each conversation is run three times ("arms") on fresh stores:

- ``none``: every session is ingested as a dialogue (``add_turns``, every turn a memory) and the questions are asked
  without anything being saved: the reference.
- ``all`` / ``naive`` / ``agent``: what an agent built on an adapter does, under that write policy. Every ``tell_every``-th
  session (LoCoMo) or every session (LongMemEval, whose sessions are a user's chats with an assistant) is *told* to
  the agent: each turn is saved with the agent's reply after it, as the adapters save an exchange. Then the questions
  are asked in order; after each, the exchange is saved: the question, a canned reply, and every ``thanks_every``-th
  time "Thanks!" / "You're welcome!". LongMemEval has one question per haystack: it is asked, saved, and asked again
  (the scored ask), the case where a stored question ranks first.

The reply model is fixed (``reply_to``, chosen by the question's index, no randomness): in ten replies, three give the
gold answer, one gives it inside a long sentence of 12+ content words, three give a wrong answer from a fixed pool
(``WRONG``: never the data's own answers), two decline and one hedges a wrong guess; a told turn gets "Got it.",
"Noted: <its first words>" or "That sounds great!" in turn. The ``naive`` arm is the simplest rule (every assistant
turn and every turn ending in "?" left out), to show what the ``agent`` policy's rules earn. Nothing here calls a
language model.

Per arm and category: strict recall of the prompt (``build_context`` within ``budget``, whole memories only), answer
coverage, the share of packed lines that are echoes (a memory all of whose source turns the loop wrote: questions,
replies, thanks), and the strict recall of the questions whose evidence lies in the told sessions ("told"; in ``none``
the same questions, their sessions ingested as dialogue), which a policy that stores nothing would lose.
"""
from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from lightmem.datasets.formats import Conversation, QAItem
from lightmem.evaluation.harnesses.locomo import CATEGORY_NAMES, sample_questions
from lightmem.evaluation.harnesses.packed import memory_text, packed_recall
from lightmem.language.exchange import is_assistant
from lightmem.metrics.answers import answer_coverage
from lightmem.metrics.evidence import normalize_evidence
from lightmem.metrics.stats import paired_bootstrap, spread
from lightmem.types import Turn
from lightmem.write_policy import Verdict

ARMS = ("none", "all", "naive", "agent")
LOOP = "loop-"  # the id prefix of every turn the loop writes (a told turn keeps its own id: it is evidence)
DONT_KNOW = "I'm not sure, I don't have that noted."
# Wrong answers come from this fixed pool, never from the conversation's own answers (a later question's gold answer,
# saved as a wrong reply, would credit the arm that stores replies).
WRONG = ("Paris", "Last Tuesday", "A red bicycle", "Her cousin Mark", "In 2015", "Painting", "Twice a week",
         "The blue one", "At the library", "Three years ago")
VERBOSE = ("From what you told me before, the answer is {answer}; I remember it came up when we talked about your "
           "plans and the news from your family and friends.")
UNSURE = (DONT_KNOW, "I don't think you've told me that yet.", "Hmm, I can't say for certain, but maybe {wrong}.")
TOLD_REPLIES = ("Got it.", "Noted: {head}", "That sounds great!")
THANKS = ("Thanks!", "You're welcome!")


def reply_kind(i: int) -> str:
    """Which canned reply question ``i`` gets: ``right`` (i % 10 < 3), ``verbose`` (3: right, in a long sentence),
    ``wrong`` (4-6) or ``unsure`` (7-9: two declines and a hedged wrong guess)."""
    r = i % 10
    return "right" if r < 3 else "verbose" if r == 3 else "wrong" if r < 7 else "unsure"


def reply_to(i: int, qa: QAItem) -> str:
    """The canned reply to question ``i`` (``reply_kind``); a wrong one comes from ``WRONG``, never from the data."""
    kind, wrong = reply_kind(i), WRONG[(i * 7) % len(WRONG)]
    if kind == "right":
        return f"{qa.answer}."
    if kind == "verbose":
        return VERBOSE.format(answer=qa.answer)
    if kind == "wrong":
        return f"{wrong}."
    return UNSURE[i % len(UNSURE)].format(wrong=wrong)


@dataclass(frozen=True)
class NaivePolicy:
    """The ``naive`` arm: the simplest rule a developer would write, to show what the ``agent`` policy's rules earn:
    every assistant turn and every turn ending in "?" left out, nothing else judged."""

    name: str = "naive"
    dedupe: bool = False

    def judge(self, turns: Sequence[Turn], context: Sequence[str] = ()) -> list[Verdict]:
        return [Verdict(not (is_assistant(t.speaker) or t.text.rstrip().endswith("?")), "naive") for t in turns]


def _policy(arm: str) -> Any:
    return NaivePolicy() if arm == "naive" else arm


def told_reply(j: int, text: str) -> str:
    head = " ".join(text.split()[:12])
    return TOLD_REPLIES[j % len(TOLD_REPLIES)].format(head=head)


def _loop_turn(tid: str, speaker: str, text: str, at: float, session: str | None) -> Turn:
    return Turn(f"{LOOP}{tid}", speaker, text, at, session_id=session, metadata={"source": "agent_loop"})


def is_echo(provenance: Sequence[str]) -> bool:
    """A memory all of whose source turns the loop wrote (a question, a reply, thanks)."""
    return bool(provenance) and all(p.startswith(LOOP) for p in provenance)


def _tell(memory: Any, user: str, turns: Sequence[Turn], policy: Any, first: int) -> int:
    """Save each turn of a told session with the agent's reply after it, one exchange per ``add``; returns the
    number of replies written (their index continues from ``first``)."""
    n = first
    for t in turns:
        if t.speaker.strip().lower() == "assistant":  # a chat's own assistant turn is already the reply
            memory.add_turns(user, [t], policy=policy)
            continue
        reply = _loop_turn(f"r{n}", "assistant", told_reply(n, t.text), t.timestamp + 1, t.session_id)
        memory.add_turns(user, [t, reply], policy=policy)
        n += 1
    return n


def _save_exchange(memory: Any, user: str, i: int, question: str, reply: str, at: float, policy: Any,
                   thanks: bool) -> None:
    turns = [_loop_turn(f"q{i}", "user", question, at, "loop"), _loop_turn(f"a{i}", "assistant", reply, at + 1, "loop")]
    if thanks:
        turns += [_loop_turn(f"t{i}", "user", THANKS[0], at + 2, "loop"), _loop_turn(f"w{i}", "assistant", THANKS[1], at + 3, "loop")]
    memory.add_turns(user, turns, policy=policy)


def _score(ctx: Any, evidence: Sequence[str], answer: object) -> dict[str, Any]:
    packed = list(ctx.memories)
    return {"recall_all": packed_recall(ctx, evidence)["@budget"]["all"],
            "coverage": answer_coverage(answer, memory_text(ctx)),
            "lines": len(packed), "echo_lines": sum(is_echo(m.provenance) for m in packed), "tokens": ctx.n_tokens}


def run_locomo_arm(memory: Any, conv: Conversation, arm: str, budget: int, categories: Sequence[int],
                   tell_every: int, thanks_every: int, max_questions: int | None) -> list[dict[str, Any]]:
    """One LoCoMo conversation under one arm; a record per question."""
    user = conv.conv_id
    told_ids: set[str] = set()
    replies = 0
    for s, session in enumerate(conv.sessions):
        turns = [t for t in session.turns if t.text.strip()]
        told = tell_every > 0 and s % tell_every == tell_every - 1
        if told:  # marked in every arm: ``none`` ingests these sessions as dialogue, the reference for their questions
            told_ids |= {t.turn_id for t in turns}
        if told and arm != "none":
            replies = _tell(memory, user, turns, _policy(arm), replies)
        else:
            memory.add_turns(user, turns)
    memory.flush(user)
    memory.flush_index()
    asked_at = max((s.timestamp for s in conv.sessions), default=time.time()) + 3600
    questions = sample_questions(conv, categories, max_questions)
    records = []
    for i, qa in enumerate(questions):
        evidence = normalize_evidence(qa.evidence)
        at = asked_at + 60 * i
        ctx = memory.build_context(qa.question, user, budget=budget, now=at)
        rec = {"conv_id": conv.conv_id, "category": CATEGORY_NAMES.get(int(qa.category), str(qa.category)),
               "question": qa.question, "reply": reply_kind(i), **_score(ctx, evidence, qa.answer),
               "told": bool(told_ids & set(evidence)), "answer": str(qa.answer), "locomo_category": int(qa.category),
               "prompt": ctx.prompt}
        records.append(rec)
        if arm != "none":
            _save_exchange(memory, user, i, qa.question, reply_to(i, qa), at, _policy(arm),
                           thanks_every > 0 and i % thanks_every == thanks_every - 1)
            memory.flush_index()
    return records


def run_longmemeval_arm(memory: Any, inst: Conversation, arm: str, budget: int) -> list[dict[str, Any]]:
    """One LongMemEval haystack under one arm: every session told (or ingested, ``none``), the question asked, the
    exchange saved, and the question asked again (the scored record)."""
    user = inst.conv_id
    for session in inst.sessions:
        turns = [t for t in session.turns if t.text.strip()]
        if arm == "none":
            memory.add_turns(user, turns)
        else:
            _tell_chat(memory, user, turns, _policy(arm))
    memory.flush(user)
    memory.flush_index()
    qa = inst.qa[0]
    evidence = normalize_evidence(qa.evidence)
    at = max((s.timestamp for s in inst.sessions), default=time.time()) + 3600
    first = memory.build_context(qa.question, user, budget=budget, now=at)
    if arm != "none":
        _save_exchange(memory, user, 0, qa.question, reply_to(7, qa), at, _policy(arm), thanks=True)  # "I'm not sure"
        memory.flush_index()
    ctx = memory.build_context(qa.question, user, budget=budget, now=at + 120)
    return [{"conv_id": inst.conv_id, "category": str(qa.category), "question": qa.question, "reply": "unsure",
             **_score(ctx, evidence, qa.answer), "first_recall_all": packed_recall(first, evidence)["@budget"]["all"],
             "told": True, "answer": str(qa.answer), "prompt": ctx.prompt}]


def _tell_chat(memory: Any, user: str, turns: Sequence[Turn], policy: Any) -> None:
    """A LongMemEval session as an agent saves it: each user turn with the assistant turns after it, one ``add`` per
    exchange (the chat's own assistant turns are the replies)."""
    i = 0
    while i < len(turns):
        j = i + 1
        while j < len(turns) and turns[j].speaker.strip().lower() == "assistant":
            j += 1
        memory.add_turns(user, list(turns[i:j]), policy=policy)
        i = j


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Means per category and overall: recall_all, coverage, echo share (pooled over packed lines), told recall."""
    def block(rs: Sequence[dict[str, Any]]) -> dict[str, Any]:
        cov = [r["coverage"] for r in rs if r["coverage"] is not None]
        lines = sum(r["lines"] for r in rs)
        told = [r["recall_all"] for r in rs if r["told"]]
        return {"questions": len(rs), "recall_all": float(np.mean([r["recall_all"] for r in rs])) if rs else float("nan"),
                "coverage": float(np.mean(cov)) if cov else float("nan"),
                "echo_share": (sum(r["echo_lines"] for r in rs) / lines) if lines else 0.0,
                "told_questions": len(told), "told_recall_all": float(np.mean(told)) if told else float("nan"),
                "tokens": float(np.mean([r["tokens"] for r in rs])) if rs else float("nan"),
                **({"f1": float(np.mean(f1))} if (f1 := [r["f1"] for r in rs if r.get("f1") is not None]) else {})}

    by_cat: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_cat[r["category"]].append(r)
    return {"overall": block(records), **{c: block(rs) for c, rs in sorted(by_cat.items())}}


def paired_delta(a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]], key: str = "recall_all",
                 resamples: int = 1000, seed: int = 0) -> dict[str, float]:
    """Mean of ``b - a`` over the same questions (in the same order) with its 95% interval and p-value
    (``metrics.stats.paired_bootstrap``, the suite's comparison)."""
    if not a:
        return {"delta": float("nan"), "low": float("nan"), "high": float("nan"), "p": float("nan")}
    r = paired_bootstrap([x[key] for x in b], [x[key] for x in a], resamples=resamples, seed=seed)
    return {"delta": r.diff, "low": r.ci_low, "high": r.ci_high, "p": r.p_value}


def run_agent_loop(make_memory: Callable[[str], Any], locomo: Sequence[Conversation], longmemeval: Sequence[Conversation],
                   arms: Sequence[str] = ARMS, budget: int = 600, categories: Sequence[int] = (1, 2, 3, 4),
                   tell_every: int = 3, thanks_every: int = 4, max_questions: int | None = None,
                   show_progress: bool = True) -> dict[str, Any]:
    """Every arm over every conversation and haystack; returns ``{"records": {dataset: {arm: [...]}}, "summary": ...,
    "paired": ...}`` (``paired``: each arm's recall_all against ``none`` on the same questions)."""
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise ValueError(f"arms must be among {list(ARMS)}, got {unknown}")
    records: dict[str, dict[str, list[dict[str, Any]]]] = {"locomo": {a: [] for a in arms}, "longmemeval": {a: [] for a in arms}}
    jobs = [("locomo", c) for c in locomo] + [("longmemeval", i) for i in longmemeval]
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, disable=not show_progress) as progress:
        task = progress.add_task("agent loop", total=len(jobs) * len(arms))
        for dataset, conv in jobs:
            for arm in arms:
                progress.update(task, description=f"{dataset} {conv.conv_id} {arm}")
                memory = make_memory(f"{conv.conv_id}-{arm}")
                try:
                    if dataset == "locomo":
                        recs = run_locomo_arm(memory, conv, arm, budget, categories, tell_every, thanks_every, max_questions)
                    else:
                        recs = run_longmemeval_arm(memory, conv, arm, budget)
                finally:
                    memory.close()
                records[dataset][arm].extend(recs)
                progress.advance(task)
    return {"records": records, **report(records)}


def report(records: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """``summary`` (``summarize`` per dataset and arm) and ``paired`` (each arm's change of strict recall, and of the
    reader's F1 when the records were answered, against ``none`` on the same questions)."""
    summary = {d: {a: summarize(rs) for a, rs in by_arm.items() if rs} for d, by_arm in records.items()}
    paired: dict[str, dict[str, Any]] = {}
    for d, by_arm in records.items():
        for a, rs in by_arm.items():
            if a == "none" or not rs or not by_arm.get("none"):
                continue
            paired.setdefault(d, {})[a] = paired_delta(by_arm["none"], rs)
            if all(r.get("f1") is not None for r in [*rs, *by_arm["none"]]):
                paired[d][f"{a}_f1"] = paired_delta(by_arm["none"], rs, key="f1")
    return {"summary": summary, "paired": paired}


def answer_records(records: dict[str, dict[str, list[dict[str, Any]]]], opts: Any) -> None:
    """The reader's answer to every record's prompt (``QAOptions``), scored with LoCoMo's F1 (its category's rule)
    or, for LongMemEval, token F1; ``prediction`` and ``f1`` are set in place."""
    from lightmem.evaluation.harnesses.qa import generate_answers, locomo_scores

    flat = [r for by_arm in records.values() for rs in by_arm.values() for r in rs]
    gens = generate_answers(opts.llm, [r["prompt"] for r in flat], opts.batch_size, opts.max_new_tokens,
                            instruction=opts.instruction)
    for r, g in zip(flat, gens):
        r["prediction"] = g.text
        r["f1"] = locomo_scores(g.text, r["answer"], int(r.get("locomo_category", 4)))["f1"]


def pick_instances(instances: Sequence[Conversation], n: int | None) -> list[Conversation]:
    """``n`` instances with evidence, spread evenly over the file (every question type keeps its share)."""
    usable = [i for i in instances if i.qa and normalize_evidence(i.qa[0].evidence)]
    return list(spread(usable, n))
