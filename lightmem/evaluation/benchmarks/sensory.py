"""Measurements of the sensory stage: compression, topic segmentation, ingestion cost.

- Compression: token ratio, and the share of answer words of LoCoMo questions that survive
  in their compressed evidence turns.
- Segmentation: LongMemEval's sessions are topic boundaries (LightMem §4): the user turns of a
  haystack are streamed through the sensory stage without session information, and the
  predicted segment starts are compared with the session starts. ``recall`` is the paper's
  "accuracy" (correct boundaries / true boundaries); precision and F1 keep it honest.
- Ingestion: turns/s through ``Memory.add`` and LLM calls per conversation.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from lightmem.datasets.formats import Conversation
from lightmem.memory import Memory
from lightmem.text import analyze
from lightmem.types import Turn


def boundary_scores(pred: set[int], true: set[int], tolerance: int = 0) -> dict[str, float]:
    """Counts of boundary matches: a true boundary is found when a prediction lies within
    ``tolerance`` turns of it; a prediction is correct when a true boundary lies that near."""
    found = sum(1 for t in true if any(abs(t - p) <= tolerance for p in pred))
    correct = sum(1 for p in pred if any(abs(t - p) <= tolerance for t in true))
    return {"true": len(true), "pred": len(pred), "found": found, "correct": correct}


def summarize_boundaries(counts: Sequence[dict[str, float]]) -> dict[str, float]:
    """Micro recall (the paper's accuracy), precision and F1 over streams."""
    true, pred = sum(c["true"] for c in counts), sum(c["pred"] for c in counts)
    rec = sum(c["found"] for c in counts) / true if true else float("nan")
    prec = sum(c["correct"] for c in counts) / pred if pred else float("nan")
    f1 = 2 * prec * rec / (prec + rec) if pred and true and prec + rec > 0 else 0.0
    return {"recall": rec, "precision": prec, "f1": f1, "true": true, "pred": pred}


def user_stream(conv: Conversation, role: str = "user") -> list[Turn]:
    """The turns of ``role`` across all sessions, with their session ids (the ground truth)."""
    return [t for s in conv.sessions for t in s.turns if t.speaker == role]


def segment_stream(sensory_stage: Any, turns: Sequence[Turn], user: str = "bench") -> list[list[str]]:
    """Turn ids per segment when ``turns`` stream through ``sensory_stage`` (its buffers drained at the end).

    Session ids are hidden from the sensory stage, so only the segmenter can find the sessions.
    """
    hidden = [replace(t, session_id=None) for t in turns]
    segments = sensory_stage.push(user, hidden).segments + sensory_stage.drain(user).segments
    sensory_stage.forget(user)
    return [s.turn_ids for s in segments]


def segmentation_eval(sensory_stage: Any, streams: Sequence[Sequence[Turn]], tolerance: int = 0) -> dict[str, float]:
    """Boundary recall / precision / F1 of the sensory stage's segments against session starts."""
    counts = []
    for turns in streams:
        if len(turns) < 2:
            continue
        pos = {t.turn_id: i for i, t in enumerate(turns)}
        true = {i for i in range(1, len(turns)) if turns[i].session_id != turns[i - 1].session_id}
        pred = {pos[seg[0]] for seg in segment_stream(sensory_stage, turns)} - {0}
        counts.append(boundary_scores(pred, true, tolerance))
    return summarize_boundaries(counts)


def compression_eval(compressor: Any, conversations: Sequence[Conversation], rate: float) -> dict[str, float]:
    """Token ratio of compressed turns, and answer-word retention in evidence turns.

    A question's answer words are its answer's stemmed content words that occur in its
    evidence turns; retention is the share of those still present after compression.
    """
    tok_in = tok_out = kept = total = 0
    for conv in conversations:
        turns = conv.turns
        texts = [t.text for t in turns]
        compressed = compressor.compress_many(texts, rate)
        tok_in += sum(len(x.split()) for x in texts)
        tok_out += sum(len(x.split()) for x in compressed)
        by_id = {t.turn_id: (set(analyze(x)), set(analyze(c))) for t, x, c in zip(turns, texts, compressed)}
        for qa in conv.qa:
            ev = [by_id[e] for e in qa.evidence if e in by_id]
            if not ev or not str(qa.answer).strip():
                continue
            raw = set().union(*(r for r, _ in ev))
            comp = set().union(*(c for _, c in ev))
            words = [w for w in set(analyze(str(qa.answer))) if w in raw]
            total += len(words)
            kept += sum(1 for w in words if w in comp)
    return {"rate": rate, "word_ratio": tok_out / tok_in if tok_in else float("nan"),
            "answer_words": total, "answer_word_retention": kept / total if total else float("nan")}


def ingest_eval(make_memory: Callable[[str], Memory], conv: Conversation, per_turn: bool = True) -> dict[str, float]:
    """Turns/s through ``Memory.add_turns`` (one call per turn, as an agent writes), items
    written and LLM calls of the writer, for one conversation."""
    memory = make_memory(conv.conv_id)
    try:
        before = memory.usage().get("writer", {}).get("calls", 0)
        t0 = time.perf_counter()
        for s in conv.sessions:
            if per_turn:
                for t in s.turns:
                    memory.add_turns(conv.conv_id, [t])
            else:
                memory.add_turns(conv.conv_id, s.turns)
        memory.flush(conv.conv_id)
        memory.flush_index()
        dt = time.perf_counter() - t0
        n = len(conv.turns)
        counts = memory.stats().get(conv.conv_id, {})
        items = memory.get_all(conv.conv_id)
        return {"turns": n, "seconds": dt, "turns_per_s": n / dt if dt > 0 else float("nan"),
                "items": counts.get("items", 0), "item_tokens": sum(i.n_tokens for i in items),
                "llm_calls": memory.usage().get("writer", {}).get("calls", 0) - before}
    finally:
        memory.close()
