"""The LongMemEval harness: one fresh system per question's haystack, ranked-retrieval metrics, QA.

Retrieval: the hits of one search at max K, flattened to their provenance turns in rank order;
sessions are ranked by their first turn. Turn level scores against the ``has_answer`` turns,
session level against ``answer_session_ids``: recall_any@k, recall_all@k and NDCG@k (binary).
QA: the generator answers from the memories packed within the budget; accuracy needs a judge
LLM (the benchmark's per-type answer checks), overlap F1 is reported always. Beside each prompt stand the
two controls LoCoMo's harness has (``evaluation.packed``): the ``has_answer`` turns alone and a random
context of the same haystack, composed within the same budget; ``qa.controls=true`` has the reader answer
them too. The QA pass and its
aggregate are ``lightmem.evaluation.harnesses.qa``'s, shared with LoCoMo; ``lightmem.evaluation.runs.longmemeval``
builds the systems from a config and writes the results.
"""
from __future__ import annotations

import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from lightmem.datasets.formats import Conversation
from lightmem.evaluation.harnesses.packed import (
    answer_controls,
    control_contexts,
    control_f1,
    control_means,
    control_scores,
    memory_text,
)
from lightmem.evaluation.harnesses.qa import QAOptions, answer_questions, longmemeval_judge_prompt, parse_yes_no, qa_summary
from lightmem.evaluation.harnesses.system import System, is_whole
from lightmem.metrics.answers import answer_coverage, token_f1
from lightmem.metrics.ranking import dedupe, ndcg_at_k, recall_at_k
from lightmem.metrics.stats import percentile
from lightmem.models import vector_cache
from lightmem.types import ComposedContext


def session_of(turn_id: str) -> str:
    """``"<session id>:<turn index>"`` -> the session id."""
    return turn_id.rsplit(":", 1)[0]


def ranked_metrics(ranked_turns: Sequence[str], gold_turns: Sequence[str], gold_sessions: Sequence[str],
                   ks: Sequence[int]) -> dict[str, float]:
    """Turn- and session-level recall_any/recall_all/NDCG at each k (NaN where there is no gold)."""
    sessions = dedupe(session_of(t) for t in ranked_turns)
    out: dict[str, float] = {}
    for level, ranked, gold in (("turn", list(ranked_turns), gold_turns), ("session", sessions, gold_sessions)):
        for k in ks:
            if gold:
                out[f"{level}_recall_any@{k}"], out[f"{level}_recall_all@{k}"] = recall_at_k(ranked, gold, k)
                out[f"{level}_ndcg@{k}"] = ndcg_at_k(ranked, gold, k)
            else:
                for m in ("recall_any", "recall_all", "ndcg"):
                    out[f"{level}_{m}@{k}"] = float("nan")
    return out


def budget_metrics(ctx: ComposedContext | None, gold_turns: Sequence[str], answer: str) -> dict[str, float]:
    """Turn-level recall of the memories the prompt holds (strict: packed whole; credited: excerpts too), the
    answer's coverage of their text (date prefixes left out) and the prompt's tokens."""
    out = {"turn_recall_any@budget": float("nan"), "turn_recall_all@budget": float("nan"),
           "turn_recall_all@budget_credited": float("nan")}
    mems = list(ctx.memories) if ctx is not None else []
    if gold_turns:
        for suffix, chosen in (("", [m for m in mems if is_whole(m)]), ("_credited", mems)):
            within = dedupe(p for m in chosen for p in m.provenance)
            anyr, allr = recall_at_k(within, gold_turns, max(len(within), 1))
            out[f"turn_recall_all@budget{suffix}"] = allr
            if not suffix:
                out["turn_recall_any@budget"] = anyr
    cov = answer_coverage(answer, memory_text(ctx)) if ctx is not None else answer_coverage(answer, "")
    out["answer_coverage@budget"] = float("nan") if cov is None else cov
    out["tokens@budget"] = float(ctx.n_tokens) if ctx is not None else 0.0
    return out


@dataclass
class LMERecord:
    question_id: str
    question_type: str
    question: str
    answer: str
    metrics: dict[str, float]
    ranked_turns: list[str]
    search_ms: float
    ingest_s: float
    turns: int
    qa: dict[str, Any] = field(default_factory=dict)
    # the controls (packed.CONTROLS) composed within the same budget: recall_all, coverage, tokens, prompt, qa
    controls: dict[str, dict[str, Any]] = field(default_factory=dict)


def evaluate_instance(memory: System, inst: Conversation, ks: Sequence[int], budget: int,
                      seed: int = 0) -> tuple[LMERecord, str]:
    """Ingest one haystack, search once at max K, compose the budgeted prompt and the control prompts; returns
    the record and the prompt. ``seed`` (with the question id) draws the random control context."""
    qa = inst.qa[0]
    t0 = time.perf_counter()
    for session in inst.sessions:
        if session.turns:
            memory.add_turns(inst.conv_id, session.turns)
    memory.flush(inst.conv_id)
    memory.flush_index()  # questions are asked of fully indexed memory
    if memory.ltm is not None:
        memory.wait_for_consolidation()
        memory.consolidate(inst.conv_id)
    ingest_s = time.perf_counter() - t0
    turns = sum(len(s.turns) for s in inst.sessions)
    asked = qa.extra.get("question_date") or max((s.timestamp for s in inst.sessions), default=None)
    t = time.perf_counter()
    hits = memory.retrieve(qa.question, inst.conv_id, k=max(ks), now=asked).hits if turns else []
    search_ms = (time.perf_counter() - t) * 1000
    ranked = dedupe(p for h in hits for p in h.item.provenance)
    gold_sessions = [str(s) for s in qa.extra.get("answer_session_ids") or []]
    metrics = ranked_metrics(ranked, qa.evidence, gold_sessions, ks)
    ctx = memory.build_context(qa.question, inst.conv_id, budget=budget, now=asked) if turns else None
    context = ctx.prompt if ctx is not None else f"### Question\n{qa.question}"
    metrics.update(budget_metrics(ctx, qa.evidence, qa.answer))
    rec = LMERecord(inst.conv_id, str(qa.category), qa.question, qa.answer, metrics, ranked, search_ms, ingest_s, turns)
    said = {t.turn_id: t for s in inst.sessions for t in s.turns if t.text.strip()}
    if said:
        rng = np.random.default_rng([seed, zlib.crc32(inst.conv_id.encode())])
        rec.controls = {name: control_scores(c, qa.evidence, qa.answer) for name, c in
                        control_contexts(memory.composer, inst.conv_id, said, qa.question, qa.evidence, budget, rng).items()}
    return rec, context


def answer(records: Sequence[LMERecord], contexts: Sequence[str], opts: QAOptions) -> None:
    """Answer, score (overlap F1) and (with a judge) judge every record in place; with ``opts.controls`` the
    control prompts are answered too (``record.controls[name]["qa"]``)."""
    def run(recs: Sequence[LMERecord], prompts: Sequence[str]) -> None:
        answer_questions(recs, prompts, opts, scores=lambda r, p: {"f1": token_f1(p, r.answer)},
                         judge_prompt=lambda r, p: longmemeval_judge_prompt(r.question_type, r.question_id).format(
                             question=r.question, gold=r.answer, prediction=p),
                         parse_verdict=parse_yes_no)

    run(records, contexts)
    if opts.controls:
        answer_controls(records, run)


def aggregate(records: Sequence[LMERecord]) -> dict[str, Any]:
    if not records:
        return {"n": 0}
    out: dict[str, Any] = {"n": len(records)}
    for key in records[0].metrics:
        vals = [r.metrics[key] for r in records if not np.isnan(r.metrics[key])]
        out[key] = float(np.mean(vals)) if vals else None
    out.update(control_means(records))
    answered = [r.qa for r in records if r.qa]
    if answered:
        qa = qa_summary(answered, ("f1",))
        out["qa_f1"], out["qa_accuracy"] = qa["f1"], qa["judge_accuracy"]
        if qa.get("recorded"):
            out["qa_recorded"] = qa["recorded"]
        out.update({f"qa_{k}": v for k, v in control_f1(records).items()})
    return out


def evaluate_longmemeval(make_memory: Callable[[str], System], instances: Sequence[Conversation], ks: Sequence[int] = (5, 10, 20),
                    budget: int = 600, qa_options: QAOptions | None = None,
                    show_progress: bool = True, seed: int = 0) -> tuple[dict[str, Any], list[LMERecord]]:
    """Evaluate each instance in a fresh system from ``make_memory(question_id)`` (closed after); ``seed`` draws
    the random control contexts."""
    if not ks or min(ks) <= 0:
        raise ValueError("ks must be positive integers")
    cache_before = vector_cache.totals()
    records, contexts = [], []
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, disable=not show_progress) as progress:
        task = progress.add_task("LongMemEval questions", total=len(instances))
        for inst in instances:
            memory = make_memory(inst.conv_id)
            try:
                rec, ctx = evaluate_instance(memory, inst, ks, budget, seed)
            finally:
                memory.close()
            records.append(rec)
            contexts.append(ctx)
            progress.advance(task)
    if qa_options is not None and records:
        answer(records, contexts, qa_options)
    by_type: dict[str, list[LMERecord]] = defaultdict(list)
    for r in records:
        by_type[r.question_type].append(r)
    search = [r.search_ms for r in records]
    turns, ingest_s = sum(r.turns for r in records), sum(r.ingest_s for r in records)
    latency = {"search_ms_p50": percentile(search, 50), "search_ms_p95": percentile(search, 95),
               "ingest_turns_per_s": turns / ingest_s if ingest_s > 0 else float("nan")}
    if qa_options is not None and records:
        e2e = [r.qa["e2e_ms"] for r in records]
        latency.update(e2e_ms_p50=percentile(e2e, 50), e2e_ms_p95=percentile(e2e, 95))
    results = {"retrieval": {"overall": aggregate(records), "by_type": {t: aggregate(rs) for t, rs in sorted(by_type.items())}},
               "latency": latency, "cost": {"turns": turns, "ingest_s": ingest_s, "instances": len(records)}}
    vector_cache.note_use(results, cache_before)
    return results, records
