"""Supervision distilled from the dev benchmarks (never from held-out data).

* Selector groups: a question, its Stage-1 candidates (2K) from a real ``Memory``, labels
  from the evidence turns; evidence Stage 1 missed can be added as extra positives.
* Compressor labels: each LoCoMo turn cited by an ``observation`` fact, one keep/drop
  label per word (kept when its stem occurs in the facts citing the turn), the way
  LLMLingua-2 labelled words by aligning the original with a compressed version.
* Complexity labels: HIGH when answering needs several pieces of evidence.

Splits are by conversation (``lightmem.datasets.splits``).
"""
from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tqdm import tqdm

from lightmem.datasets.formats import Conversation
from lightmem.memory import Memory
from lightmem.metrics.answers import normalize_answer
from lightmem.metrics.evidence import normalize_evidence
from lightmem.retrieval.stage2 import candidate_text, item_text
from lightmem.text import STOPWORDS, stem, words
from lightmem.training.groups import CandidateGroup


def asked_questions(make_memory: Callable[[str], Memory], convs: Sequence[Conversation], source: str,
                    categories: Sequence[Any] | None = None, show_progress: bool = False) -> Iterator[tuple[Any, ...]]:
    """``(memory, user, conversation, qa, evidence ids, asked_at)`` for every answerable question, after its conversation
    was ingested into a fresh ``make_memory(conv_id)`` (closed once its questions are done)."""
    for conv in tqdm(convs, desc=f"mining {source}", disable=not show_progress):
        mem = make_memory(conv.conv_id)
        try:
            user = "u"
            for s in conv.sessions:
                mem.add_turns(user, s.turns)
            mem.flush(user)
            mem.flush_index()  # mined on fully indexed memory (vectors and word scores)
            asked_at = max((s.timestamp for s in conv.sessions), default=None)
            for qa in conv.qa:
                evidence = set(normalize_evidence(qa.evidence))
                if evidence and (categories is None or qa.category in categories):
                    yield mem, user, conv, qa, evidence, asked_at
        finally:
            mem.close()


def mine_selector_groups(make_memory: Callable[[str], Memory], convs: Sequence[Conversation], source: str, k: int = 10,
                         categories: Sequence[Any] | None = None, add_missed: bool = True,
                         show_progress: bool = False) -> list[dict[str, Any]]:
    """One group per answerable question: the 2K Stage-1 candidates of ``retrieve(k)`` with 0/1 labels
    (``CandidateGroup.to_dict()`` each: the selector files' fields).

    ``n_evidence`` keeps how many evidence turns exist, so evaluation can count the ones
    Stage 1 missed; with ``add_missed`` those turns are appended as positives (training only).
    """
    groups: list[dict[str, Any]] = []
    by_turn: dict[str, Any] = {}  # turn id -> the item written from it, for the current conversation
    current = None
    for mem, user, conv, qa, evidence, asked_at in asked_questions(make_memory, convs, source, categories, show_progress):
        if conv.conv_id != current:
            current, by_turn = conv.conv_id, {p: it for it in mem.get_all(user) for p in it.provenance}
        res = mem.retrieve(qa.question, user, k=k, now=asked_at)
        texts = [candidate_text(h) for h in res.candidates]
        labels = [int(bool(evidence & set(h.item.provenance))) for h in res.candidates]
        covered = {p for h in res.candidates for p in h.item.provenance} & evidence
        missed = [by_turn[e] for e in sorted(evidence - covered) if e in by_turn]
        stage1 = [h.score for h in res.candidates]
        if add_missed and missed:
            texts = texts + [item_text(it) for it in missed]
            labels = labels + [1] * len(missed)
            stage1 = stage1 + [float("-inf")] * len(missed)
        groups.append(CandidateGroup(query=qa.question, texts=texts, labels=labels, stage1=stage1, n_evidence=len(evidence),
                                     n_missed=len(evidence - covered), source=source, conversation=conv.conv_id,
                                     category=qa.category).to_dict())
    return groups


def synth_groups(samples: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Synthetic (Query, Subgraph, Path) samples as selector groups (answerable ones carry positives)."""
    return [CandidateGroup(query=s["query"], texts=[c["text"] for c in s["candidates"]], labels=[c["label"] for c in s["candidates"]],
                           n_evidence=s["hops"], n_missed=0, source="synth", conversation=s["conversation"],
                           category=s["kind"]).to_dict()
            for s in samples]


def _norm(word: str) -> str | None:
    """The stem of a whitespace-separated word's first token; None for punctuation only."""
    m = words(word)
    return stem(m[0]) if m else None


def compressor_examples(raw_samples: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Word-level keep labels for every LoCoMo turn its ``observation`` facts cite.

    A word is kept when its Porter stem occurs in one of those facts (punctuation-only
    words are dropped). ``answer`` marks words that belong to the answer of a question
    citing the turn: the retention metric counts how many survive compression.
    """
    out = []
    for sample in raw_samples:
        facts: dict[str, list[str]] = defaultdict(list)
        for per_speaker in (sample.get("observation") or {}).values():
            for rows in per_speaker.values():
                for row in rows:
                    if isinstance(row, list) and len(row) == 2:
                        for dia in re.split(r"[;,\s]+", str(row[1])):
                            if dia:
                                facts[dia].append(str(row[0]))
        answers: dict[str, set[str]] = defaultdict(set)
        for qa in sample.get("qa", []):
            if "answer" not in qa:
                continue
            ans = {stem(w) for w in normalize_answer(str(qa["answer"])).split() if w not in STOPWORDS}
            for e in normalize_evidence(qa.get("evidence", [])):
                answers[e] |= ans
        conv = sample.get("conversation", {})
        for key, turns in conv.items():
            if not (key.startswith("session_") and isinstance(turns, list)):
                continue
            for t in turns:
                dia, text = str(t.get("dia_id")), str(t.get("text") or "")
                turn_words = text.split()  # the compressor keeps or drops whole whitespace words
                if dia not in facts or not turn_words:
                    continue
                keep_stems = {stem(w) for f in facts[dia] for w in words(f)}
                norms = [_norm(w) for w in turn_words]
                out.append({"id": f"{sample.get('sample_id')}:{dia}", "conversation": sample.get("sample_id"), "words": turn_words,
                            "labels": [int(n is not None and n in keep_stems) for n in norms],
                            "answer": [int(n is not None and n in answers.get(dia, set())) for n in norms]})
    return out


LOCOMO_TYPES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


def _complexity_row(text: str, n_evidence: int, qtype: str, source: str, conversation: str) -> dict[str, Any]:
    """HIGH (1) when the answer needs two or more evidence units (turns, sessions or facts), the same rule for every
    source: a source-specific rule (LongMemEval's temporal questions HIGH, LoCoMo's multi-hop HIGH) taught the
    classifier labels that disagree across sources. ``type`` is the question's own type, for per-type reports."""
    return {"text": text, "label": int(n_evidence >= 2), "n_evidence": n_evidence, "type": qtype, "source": source,
            "conversation": conversation}


def complexity_examples_locomo(convs: Sequence[Conversation]) -> list[dict[str, Any]]:
    """Categories 1-4 with usable evidence (adversarial items left out); evidence units are dialogue turns."""
    return [_complexity_row(qa.question, len(normalize_evidence(qa.evidence)), LOCOMO_TYPES[qa.category], "locomo", c.conv_id)
            for c in convs for qa in c.qa if qa.category in LOCOMO_TYPES and normalize_evidence(qa.evidence)]


def complexity_examples_lme(convs: Sequence[Conversation]) -> list[dict[str, Any]]:
    """Evidence units are the answer sessions."""
    return [_complexity_row(qa.question, len(qa.extra.get("answer_session_ids") or []), str(qa.category), "longmemeval", c.conv_id)
            for c in convs for qa in c.qa]


def complexity_examples_synth(samples: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Evidence units are the path's facts (an unanswerable question has none)."""
    return [_complexity_row(s["query"], int(s["hops"]), str(s["kind"]), "synth", s["conversation"]) for s in samples]
