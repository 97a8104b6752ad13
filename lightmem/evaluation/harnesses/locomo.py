"""The LoCoMo harness: ingest each conversation turn by turn, score evidence recall, answer.

Retrieval needs no generator: every item carries the ids of the turns it came from, and a
question's evidence is covered when those ids reach the retrieved set (at K, or within
a token budget packed exactly as the context composer packs memories). With ``QAOptions``
the memories packed within the budget become the context of a generator's answer, scored
with LoCoMo's F1, BLEU-1, ROUGE-L and, when a judge LLM is configured, the LLM judge
(the QA pass and its aggregate are ``lightmem.evaluation.harnesses.qa``'s, shared with LongMemEval).

The system under test is any ``System`` (``lightmem.evaluation.harnesses.system``), so baselines that are
not a ``Memory`` (``lightmem.evaluation.harnesses.baselines``) run through it unchanged.
``lightmem.evaluation.runs.locomo`` builds the systems from a config and writes the results.
"""
from __future__ import annotations

import logging
import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
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
    packed_lines,
    packed_recall,
)
from lightmem.evaluation.harnesses.qa import (
    LOCOMO_JUDGE_PROMPT,
    QAOptions,
    answer_questions,
    locomo_scores,
    parse_locomo_label,
    qa_summary,
)
from lightmem.evaluation.harnesses.system import System
from lightmem.metrics.answers import answer_coverage
from lightmem.metrics.evidence import evidence_precision, evidence_recall, normalize_evidence
from lightmem.metrics.stats import percentile, spread
from lightmem.models import vector_cache

log = logging.getLogger(__name__)
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
ADVERSARIAL = 5  # reported apart: its "answer" is that the conversation does not say


@dataclass
class QuestionRecord:
    """One scored question, kept for error analysis (written to questions.jsonl)."""

    conv_id: str
    category: int
    question: str
    evidence: list[str]
    # "@5" | "@budget" (strict: whole memories) | "@budget_credited" (excerpts credited too) -> {all, any, mean, precision}
    recall: dict[str, dict[str, float]]
    tokens: dict[str, int]
    retrieved: list[list[str]]  # provenance of the hits at max K, best first
    search_ms: float
    stage_ms: dict[str, float] = field(default_factory=dict)
    answer: str = ""
    qa: dict[str, Any] = field(default_factory=dict)  # prediction, f1, bleu1, rouge_l, judge, generate_ms, e2e_ms
    # answer coverage of the packed memories' text, date prefixes left out (None: no gold answer)
    coverage: float | None = None
    # evidence recall of the Stage-1 candidate pool that build_context's Stage 2 ranks (the Memory's own K times
    # candidate_factor, ``n``): what the prompt could at best hold; None for a system without a candidate stage
    candidate_recall: dict[str, float] | None = None
    packed: list[dict[str, Any]] = field(default_factory=list)  # the prompt's memory lines, each whole or excerpt
    context_ms: float = 0.0  # build_context's milliseconds
    queries: list[str] = field(default_factory=list)  # the plan's hypothetical queries at max K (what SLM-1 wrote)
    # the controls (packed.CONTROLS) composed within the same budget: recall_all, coverage, tokens, prompt, qa
    controls: dict[str, dict[str, Any]] = field(default_factory=dict)


def sample_questions(conv: Conversation, categories: Sequence[int], max_questions: int | None = None) -> list:
    """The scorable questions (category kept, usable evidence); with ``max_questions``, that many spread
    evenly over the conversation (every category and session keeps its share, no randomness)."""
    return spread([q for q in conv.qa if q.category in categories and normalize_evidence(q.evidence)], max_questions)


def evaluate_conversation(
    memory: System,
    conv: Conversation,
    ks: Sequence[int],
    budget: int,
    categories: Sequence[int],
    on_question: Callable[[], None] = lambda: None,
    max_questions: int | None = None,
    qa_options: QAOptions | None = None,
    after_ingest: Callable[[System, Conversation], dict[str, Any]] | None = None,
    seed: int = 0,
) -> tuple[list[QuestionRecord], dict[str, float]]:
    """Ingest ``conv`` into ``memory`` session by session, then score its questions.

    Each question's context is ``memory.build_context(question, budget=budget)``: recall, coverage and the
    reader's answer are all of that prompt. ``seed`` draws the random control context.

    ``after_ingest(memory, conv)`` runs after consolidation and before the questions (the
    update-gap stress test writes its recent noise there); what it returns lands in the stats.
    """
    user = conv.conv_id
    usage_before = memory.usage()  # roles may share a runtime across conversations
    t0 = time.perf_counter()
    for session in conv.sessions:
        memory.add_turns(user, session.turns)
    memory.flush(user)  # the sensory stage's buffers, if any, become items before questions are asked
    memory.flush_index()  # and every item has its vector
    ingest_s = time.perf_counter() - t0
    consolidate_s, cycles = 0.0, 0
    if memory.ltm is not None:  # questions come after a "night": whatever is left is consolidated
        t1 = time.perf_counter()
        memory.wait_for_consolidation()
        cycles = len(memory.consolidate(user)) + (len(memory.ltm.scheduler.reports) if memory.ltm.scheduler else 0)
        consolidate_s = time.perf_counter() - t1
    injected = after_ingest(memory, conv) if after_ingest is not None else {}
    contexts: list[str] = []
    kmax = max(ks)
    served_k = getattr(memory, "k", None)  # the K of build_context's search (a system without one: None)
    # Questions are asked after the last session: relative time in them is anchored there.
    asked_at = max((s.timestamp for s in conv.sessions), default=None)
    turns = {t.turn_id: t for s in conv.sessions for t in s.turns if t.text.strip()}
    records = []
    for n, qa in enumerate(sample_questions(conv, categories, max_questions)):
        evidence = normalize_evidence(qa.evidence)
        recall, tokens, stage_ms = {}, {}, {}
        search_ms = 0.0
        # Largest K first: that search is the timed one and sees a cold query-vector cache.
        for k in sorted(ks, reverse=True):
            t = time.perf_counter()
            result = memory.retrieve(qa.question, user, k=k, now=asked_at)
            elapsed = (time.perf_counter() - t) * 1000
            hits = result.hits
            if k == kmax:
                search_ms, stage_ms, top_hits = elapsed, dict(result.timings_ms), hits
                queries = [hq.text for hq in result.plan.hqs] if result.plan is not None else []
            if k == served_k:
                pool = result.candidates
            recall[f"@{k}"] = asdict(evidence_recall([h.item.provenance for h in hits], evidence))
            recall[f"@{k}"]["precision"] = evidence_precision([h.item.provenance for h in hits], evidence)
            tokens[f"@{k}"] = sum(h.item.n_tokens for h in hits)
        if served_k not in ks:  # build_context searches with the Memory's own K: its pool is the one that counts
            pool = memory.retrieve(qa.question, user, now=asked_at).candidates
        candidate_recall = ({**asdict(evidence_recall([h.item.provenance for h in pool], evidence)),
                             "n": float(len(pool))} if pool else None)
        recall = {f"@{k}": recall[f"@{k}"] for k in sorted(ks)}
        tokens = {f"@{k}": tokens[f"@{k}"] for k in sorted(ks)}
        # What a reader gets: the prompt build_context returns, scored as it is.
        t = time.perf_counter()
        ctx = memory.build_context(qa.question, user, budget=budget, now=asked_at)
        context_ms = (time.perf_counter() - t) * 1000
        recall.update(packed_recall(ctx, evidence))
        tokens["@budget"] = ctx.n_tokens
        contexts.append(ctx.prompt)
        rng = np.random.default_rng([seed, n, zlib.crc32(conv.conv_id.encode())])
        controls = {name: control_scores(c, evidence, qa.answer)
                    for name, c in control_contexts(memory.composer, user, turns, qa.question, evidence, budget, rng).items()}
        records.append(
            QuestionRecord(conv.conv_id, int(qa.category), qa.question, evidence, recall, tokens,
                           [list(h.item.provenance) for h in top_hits], search_ms, stage_ms, answer=str(qa.answer),
                           coverage=answer_coverage(qa.answer, memory_text(ctx)), candidate_recall=candidate_recall,
                           packed=packed_lines(ctx), context_ms=context_ms, controls=controls, queries=queries)
        )
        on_question()
    qa_usage: dict[str, dict[str, float]] = {}
    if qa_options is not None and records:
        qa_usage = _answer(records, contexts, qa_options)
    n_turns = sum(len(s.turns) for s in conv.sessions)
    stats = {"ingest_s": ingest_s, "turns": n_turns, "items": memory.stats().get(user, {}).get("items", 0),
             "llm": {r: u for r, u in _usage_delta(usage_before, memory.usage()).items() if r not in QA_ROLES},
             "llm_qa": qa_usage, **injected}
    if memory.ltm is not None:
        stats.update({"consolidate_s": consolidate_s, "cycles": cycles, **{f"ltm_{k}": v for k, v in memory.ltm_stats().items()}})
    return records, stats


QA_ROLES = ("generator", "judge")


def _answer(records: Sequence[QuestionRecord], contexts: Sequence[str], opts: QAOptions) -> dict[str, dict[str, float]]:
    """Answer, score and (with a judge) judge every record in place; with ``opts.controls`` the control
    contexts are answered too (in ``record.controls[name]["qa"]``). Returns the QA roles' LLM usage."""
    meters = {id(m): m for m in (opts.llm.meter, getattr(opts.judge, "meter", None)) if m is not None}
    before = {}
    for m in meters.values():
        before.update(m.summary())

    def run(recs: Sequence[QuestionRecord], prompts: Sequence[str]) -> None:
        answer_questions(recs, prompts, opts, scores=lambda r, p: locomo_scores(p, r.answer, r.category),
                         judge_prompt=lambda r, p: LOCOMO_JUDGE_PROMPT.format(question=r.question, gold=r.answer, prediction=p),
                         parse_verdict=parse_locomo_label)

    run(records, contexts)
    for r in records:
        r.qa["context_tokens"] = int(r.tokens["@budget"])
    if opts.controls:
        answer_controls(records, run)
    after = {}
    for m in meters.values():
        after.update(m.summary())
    return {role: u for role, u in _usage_delta(before, after).items() if role in QA_ROLES}


def qa_aggregate(records: Sequence[QuestionRecord]) -> dict[str, Any]:
    """Mean F1, BLEU-1, ROUGE-L and judge accuracy (over judged questions) of a set of answered questions."""
    done = [r.qa for r in records if r.qa]
    if not done:
        return {"n": 0}
    return {**qa_summary(done, ("f1", "bleu1", "rouge_l")), **control_f1(records)}


def aggregate(records: Sequence[QuestionRecord]) -> dict[str, Any]:
    """Mean recall and tokens per cut (@K, @budget) for a set of questions."""
    if not records:
        return {"n": 0}
    out: dict[str, Any] = {"n": len(records)}
    for cut in records[0].recall:
        for kind in ("all", "any", "mean"):
            out[f"recall_{kind}{cut}"] = float(np.mean([r.recall[cut][kind] for r in records]))
        out[f"precision{cut}"] = float(np.mean([r.recall[cut].get("precision", float("nan")) for r in records]))
        if cut in records[0].tokens:
            out[f"tokens{cut}"] = float(np.mean([r.tokens[cut] for r in records]))
    cov = [r.coverage for r in records if r.coverage is not None]
    out["answer_coverage@budget"] = float(np.mean(cov)) if cov else float("nan")
    out["memories@budget"] = float(np.mean([len(r.packed) for r in records]))
    out["excerpts@budget"] = float(np.mean([sum(not p["whole"] for p in r.packed) for r in records]))
    out.update(control_means(records))
    pools = [r.candidate_recall for r in records if r.candidate_recall is not None]
    out["pool_recall_all"] = float(np.mean([c["all"] for c in pools])) if pools else float("nan")
    out["pool_size"] = float(np.mean([c["n"] for c in pools])) if pools else float("nan")
    return out


def summarize(records: Sequence[QuestionRecord], ingest: Sequence[dict[str, float]]) -> dict[str, Any]:
    """The ``retrieval``, ``latency`` and ``cost`` sections of results.json."""
    by_cat: dict[int, list[QuestionRecord]] = defaultdict(list)
    by_conv: dict[str, list[QuestionRecord]] = defaultdict(list)
    for r in records:
        by_cat[r.category].append(r)
        by_conv[r.conv_id].append(r)
    scored = [r for r in records if r.category != ADVERSARIAL]
    overall = aggregate(scored)
    search = [r.search_ms for r in records]
    latency = {"search_ms_p50": percentile(search, 50), "search_ms_p95": percentile(search, 95), "search_ms_mean": float(np.mean(search)) if search else float("nan")}
    for stage in ("embed", "stage1", "stage2"):
        vals = [r.stage_ms[stage] for r in records if stage in r.stage_ms]
        latency[f"{stage}_ms_p50"] = percentile(vals, 50)
        latency[f"{stage}_ms_p95"] = percentile(vals, 95)
    turns = sum(i["turns"] for i in ingest)
    ingest_s = sum(i["ingest_s"] for i in ingest)
    latency["ingest_turns_per_s"] = turns / ingest_s if ingest_s > 0 else float("nan")
    answered = [r for r in records if r.qa]
    if answered:
        for key, name in (("generate_ms", "generate"), ("e2e_ms", "e2e")):
            vals = [r.qa[key] for r in answered]
            latency[f"{name}_ms_p50"], latency[f"{name}_ms_p95"] = percentile(vals, 50), percentile(vals, 95)
        latency["retrieval_ms_p50"], latency["retrieval_ms_p95"] = latency["search_ms_p50"], latency["search_ms_p95"]
    cost = {k: v for k, v in overall.items() if k.startswith("tokens")}
    cost.update({"turns": turns, "items": sum(i["items"] for i in ingest), "ingest_s": ingest_s, "searches": len(records) * (len(records[0].recall) - 1) if records else 0})
    cost["llm"] = _merge_usage([i.get("llm", {}) for i in ingest], turns, len(records))
    if any("consolidate_s" in i for i in ingest):
        ltm_keys = sorted({k for i in ingest for k in i if k.startswith("ltm_") or k in ("consolidate_s", "cycles")})
        cost["ltm"] = {k: float(sum(i.get(k, 0) for i in ingest)) for k in ltm_keys}
        cost["ltm"]["nodes_per_turn"] = cost["ltm"].get("ltm_nodes", 0.0) / turns if turns else float("nan")
    injected = {k: float(sum(i.get(k, 0) for i in ingest)) for k in sorted({k for i in ingest for k in i if k.startswith("injected_")})}
    if injected:
        cost["injected"] = injected
    out = {
        "retrieval": {
            "overall": overall,
            "by_category": {f"{c}-{CATEGORY_NAMES.get(c, c)}": aggregate(rs) for c, rs in sorted(by_cat.items())},
            "by_conversation": {c: aggregate(rs) for c, rs in by_conv.items()},
        },
        "latency": latency,
        "cost": cost,
    }
    if answered:
        by_cat_qa = {f"{c}-{CATEGORY_NAMES.get(c, c)}": qa_aggregate(rs) for c, rs in sorted(by_cat.items())}
        out["qa"] = {"overall": qa_aggregate([r for r in answered if r.category != ADVERSARIAL]), "by_category": by_cat_qa,
                     "adversarial": qa_aggregate([r for r in answered if r.category == ADVERSARIAL])}
        cost["context_tokens_per_question"] = float(np.mean([r.qa["context_tokens"] for r in answered]))
        cost["llm_qa"] = _merge_usage([i.get("llm_qa", {}) for i in ingest], turns, len(answered))
    return out


_COUNTS = ("calls", "input_tokens", "output_tokens", "failures", "repaired")


def _usage_delta(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    return {role: {k: u.get(k, 0) - before.get(role, {}).get(k, 0) for k in _COUNTS} for role, u in after.items()}


def _merge_usage(per_conv: Sequence[dict[str, dict[str, float]]], turns: int, questions: int) -> dict[str, dict[str, float]]:
    """LLM usage per role summed over conversations, with calls and tokens per turn and per question."""
    out: dict[str, dict[str, float]] = {}
    for usage in per_conv:
        for role, u in usage.items():
            agg = out.setdefault(role, dict.fromkeys(_COUNTS, 0))
            for key in agg:
                agg[key] += u.get(key, 0)
    for role, agg in out.items():
        unit = max(turns if role == "writer" else questions, 1)
        agg["calls_per_unit"] = agg["calls"] / unit
        agg["tokens_per_unit"] = (agg["input_tokens"] + agg["output_tokens"]) / unit
        agg["unit"] = "turn" if role == "writer" else "question"
    return out


def evaluate_locomo(
    make_memory: Callable[[str], System],
    conversations: Sequence[Conversation],
    ks: Sequence[int] = (5, 10, 20),
    budget: int = 600,
    categories: Sequence[int] = (1, 2, 3, 4),
    show_progress: bool = True,
    max_questions: int | None = None,
    qa_options: QAOptions | None = None,
    after_ingest: Callable[[System, Conversation], dict[str, Any]] | None = None,
    seed: int = 0,
) -> tuple[dict[str, Any], list[QuestionRecord]]:
    """Evaluate each conversation in a fresh system from ``make_memory(conv_id)`` (closed after)."""
    if not ks or min(ks) <= 0:
        raise ValueError("ks must be positive integers")
    if budget <= 0:
        raise ValueError("budget must be positive")
    n_q = sum(len(sample_questions(c, categories, max_questions)) for c in conversations)
    cache_before = vector_cache.totals()
    records: list[QuestionRecord] = []
    ingest: list[dict[str, float]] = []
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, disable=not show_progress, transient=False) as progress:
        task = progress.add_task("LoCoMo questions", total=n_q)
        for conv in conversations:
            progress.update(task, description=f"{conv.conv_id}: ingest")
            memory = make_memory(conv.conv_id)
            try:
                recs, stats = evaluate_conversation(
                    memory, conv, ks, budget, categories, on_question=lambda: progress.advance(task), max_questions=max_questions,
                    qa_options=qa_options, after_ingest=after_ingest, seed=seed,
                )
            finally:
                memory.close()
            progress.update(task, description=f"{conv.conv_id}: search")
            records.extend(recs)
            ingest.append(stats)
    results = summarize(records, ingest)
    vector_cache.note_use(results, cache_before)
    return results, records
