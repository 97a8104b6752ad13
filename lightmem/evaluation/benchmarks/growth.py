"""MTM growth stress test (LightMem-SLM §4.5): one user's memory grows along one trajectory, and at
about 100 / 1k / 5k / 10k entries the questions answerable so far are asked again, with Stage-2
reranking and in the Stage-1 order only (the "vector_only" rows), on the same store.

The trajectory is the LoCoMo conversations one after another, then LongMemEval haystack sessions
(distractor history) until the largest size. Turn ids are prefixed with their source so that
conversations never share an id; a question is asked once all its evidence turns are in memory.
"""
from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from lightmem.datasets.formats import Conversation, QAItem
from lightmem.evaluation.harnesses.system import is_whole
from lightmem.metrics.evidence import evidence_recall, normalize_evidence
from lightmem.metrics.stats import percentile, spread
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.types import Turn

USER = "trajectory"


def trajectory(conversations: Sequence[Conversation], filler: Sequence[Conversation] = ()) -> Iterator[tuple[list[Turn], str]]:
    """Sessions in order as (turns with source-prefixed ids, source); filler sessions appear once each."""
    for conv in conversations:
        for s in conv.sessions:
            yield [replace(t, turn_id=f"{conv.conv_id}/{t.turn_id}") for t in s.turns], conv.conv_id
    seen: set[str] = set()
    for inst in filler:
        for s in inst.sessions:
            if s.session_id in seen or not s.turns:
                continue
            seen.add(s.session_id)
            yield [replace(t, turn_id=f"filler/{t.turn_id}") for t in s.turns], "filler"


def prefixed_questions(conversations: Sequence[Conversation], categories: Sequence[int] = (1, 2, 3, 4)) -> list[tuple[QAItem, list[str]]]:
    """(question, evidence ids prefixed like the trajectory's turns) for every scorable question."""
    out = []
    for conv in conversations:
        for q in conv.qa:
            ev = normalize_evidence(q.evidence)
            if q.category in categories and ev:
                out.append((q, [f"{conv.conv_id}/{e}" for e in ev]))
    return out


def run_growth(memory, conversations: Sequence[Conversation], filler: Sequence[Conversation], sizes: Sequence[int],
               k: int = 10, budget: int = 600, max_questions: int | None = 300, show_progress: bool = True) -> dict[str, Any]:
    """Grow ``memory`` along the trajectory and score both variants at each size; returns the ``growth`` results."""
    if not sizes or min(sizes) <= 0:
        raise ValueError("sizes must be positive")
    sizes = sorted(int(s) for s in sizes)
    reranker = memory.retriever.selector
    variants = {"reranking": reranker, "vector_only": Stage1Selector()}
    questions = prefixed_questions(conversations)
    ingested: set[str] = set()
    rows: list[dict[str, Any]] = []
    pending = list(sizes)
    n_items, ingest_s = 0, 0.0
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, disable=not show_progress) as progress:
        task = progress.add_task("MTM growth (entries)", total=sizes[-1])
        for turns, _source in trajectory(conversations, filler):
            if not pending:
                break
            t0 = time.perf_counter()
            memory.add_turns(USER, turns)
            ingest_s += time.perf_counter() - t0
            ingested.update(t.turn_id for t in turns)
            n_items = memory.stats().get(USER, {}).get("items", 0)
            progress.update(task, completed=min(n_items, sizes[-1]))
            if pending and n_items >= pending[0]:
                memory.flush_index()  # scored on fully indexed memory
            while pending and n_items >= pending[0]:
                target = pending.pop(0)
                asked = spread([(q, ev) for q, ev in questions if set(ev) <= ingested], max_questions)
                for name, selector in variants.items():
                    memory.retriever.selector = selector
                    cache = getattr(memory.embedder, "_cache", None)
                    if cache is not None:  # each variant embeds its queries cold: latencies stay comparable
                        cache.clear()
                    rows.append({"size": target, "entries": n_items, "variant": name, **_score(memory, asked, k, budget)})
                memory.retriever.selector = reranker
        memory.flush(USER)
    if pending:
        rows.append({"note": f"the trajectory ended at {n_items} entries, before sizes {pending}"})
    return {"rows": rows, "k": k, "budget": budget, "ingest_s": ingest_s, "entries": n_items}


def _score(memory, asked: Sequence[tuple[QAItem, list[str]]], k: int, budget: int) -> dict[str, Any]:
    rec_k, rec_b, ms = [], [], []
    for q, ev in asked:
        t = time.perf_counter()
        hits = memory.retrieve(q.question, USER, k=k).hits
        ms.append((time.perf_counter() - t) * 1000)
        rec_k.append(evidence_recall([h.item.provenance for h in hits], ev).all)
        ctx = memory.build_context(q.question, USER, budget=budget)
        rec_b.append(evidence_recall([m.provenance for m in ctx.memories if is_whole(m)], ev).all)
    mean = (lambda v: float(np.mean(v)) if v else float("nan"))
    return {"n": len(asked), "recall_all@k": mean(rec_k), "recall_all@budget": mean(rec_b),
            "search_ms_p50": percentile(ms, 50), "search_ms_p95": percentile(ms, 95), "per_question": rec_b}
