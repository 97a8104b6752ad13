"""Writer (SLM-3): turns an interaction into MTM entries with provenance.

``TurnWriter`` stores each turn as it is; ``ExtractiveWriter`` makes each turn
self-contained without generation (speakers named, dates anchored, entities tagged);
``GenerativeWriter`` asks an SLM for compact facts and falls back to the extractive
entries whenever the model's output is unusable, so no turn is ever lost.

With the sensory stage on, writers get topic segments (``write_segments``): the turns
are already normalized and compressed, and each entry is {topic, summary, source turns}.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from lightmem.language.normalize import anchor_dates, name_speakers
from lightmem.language.phatic import caption_note, compact_turn, sentence_units
from lightmem.llm import prompts
from lightmem.llm.base import LLM
from lightmem.llm.jsonio import call_json
from lightmem.timeutil import iso
from lightmem.types import ItemKind, Turn

if TYPE_CHECKING:  # the optional sensory stage's output, only named in annotations
    from lightmem.sensory.pipeline import Processed, Segment

log = logging.getLogger(__name__)


@dataclass
class DraftItem:
    """An entry the Writer proposes; the store gives it an id, vector and token count."""

    text: str
    provenance: list[str]
    event_time: float
    topic: str | None = None
    entities: list[str] = field(default_factory=list)
    kind: ItemKind = ItemKind.EPISODIC
    metadata: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Writer(Protocol):
    """Writes entries for new turns, given the recent context (STM) as plain strings."""

    def write(self, turns: Sequence[Turn], context: Sequence[str] = ()) -> list[DraftItem]: ...


def write_segments(writer: Writer, segments: Sequence[Segment], context: Sequence[str] = ()) -> list[DraftItem]:
    """Entries for topic segments: the writer's ``write_segments``, else its ``write`` on the raw turns."""
    if hasattr(writer, "write_segments"):
        return writer.write_segments(segments, context)
    return writer.write([p.turn for s in segments for p in s.turns], context)


def _chunks(seg: Segment, max_tokens: int) -> list[list[Processed]]:
    """A segment's turns in runs of at most ``max_tokens`` (a longer single turn is cut by words)."""
    out: list[list[Processed]] = [[]]
    used = 0
    for p in seg.turns:
        if out[-1] and used + p.n_tokens > max_tokens:
            out.append([])
            used = 0
        out[-1].append(p)
        used += p.n_tokens
    return out


def _split_words(text: str, n_tokens: int, max_tokens: int) -> list[str]:
    """``text`` cut into about ``ceil(n_tokens / max_tokens)`` pieces of whole words."""
    parts = max(1, -(-n_tokens // max_tokens))
    ws = text.split()
    step = max(1, -(-len(ws) // parts))
    return [" ".join(ws[i : i + step]) for i in range(0, len(ws), step)] or [text]


def segment_drafts(segments: Sequence[Segment], granularity: str = "segment", max_tokens: int = 160,
                   writer: str = "extractive") -> list[DraftItem]:
    """Entries made from segments without generation.

    ``segment``: one entry per segment (split at turn boundaries to stay under ``max_tokens``,
    the embedder's useful length); ``turn``: one entry per turn, tagged with its segment's topic.
    """
    if granularity not in ("segment", "turn"):
        raise ValueError(f"granularity must be 'segment' or 'turn', got {granularity!r}")
    drafts: list[DraftItem] = []
    for seg in segments:
        runs = [[p] for p in seg.turns] if granularity == "turn" else _chunks(seg, max_tokens)
        for run in runs:
            lines = [f"{p.turn.speaker}: {p.compressed}" for p in run]
            n = sum(p.n_tokens for p in run)
            texts = _split_words(lines[0], n, max_tokens) if len(run) == 1 and n > max_tokens else ["\n".join(lines)]
            ents = list(dict.fromkeys(e for p in run for e, label in p.entities if label != "DATE"))
            meta = {"writer": writer, "speaker": run[0].turn.speaker, "segment": seg.turn_ids[0]}
            if run[0].turn.session_id:
                meta["session_id"] = run[0].turn.session_id
            for text in texts:
                drafts.append(DraftItem(text=text, provenance=[p.turn.turn_id for p in run], event_time=run[0].turn.timestamp,
                                        topic=seg.topic, entities=ents, metadata=dict(meta)))
    return drafts


# Metadata keys the pipeline itself writes on a memory (word keep-scores, excerpt and dating marks, consolidation
# members, LTM nodes, the writer's name): a turn's metadata never sets them.
SYSTEM_KEYS = frozenset({"keep", "excerpt", "dated", "members", "ltm_node", "confidence", "evidence", "writer"})


def without_system_keys(meta: Mapping[str, Any]) -> dict[str, Any]:
    """A caller's metadata (a turn's, an update's, a put's) without the pipeline's ``SYSTEM_KEYS``, which only the
    pipeline sets: a caller's ``{"members": 5}`` would be read as an abstract's members, ``{"keep": ...}`` as word
    scores."""
    return {k: v for k, v in meta.items() if k not in SYSTEM_KEYS}


def _meta(t: Turn) -> dict[str, Any]:
    """A memory's metadata from its turn: the turn's own (what the caller gave with the message; the pipeline's
    ``SYSTEM_KEYS`` left out), then the speaker and session, which the read path relies on."""
    own = without_system_keys(t.metadata) if t.metadata else {}
    return {**own, "speaker": t.speaker, **({"session_id": t.session_id} if t.session_id else {})}


class TurnWriter:
    """One entry per turn: ``speaker: text`` (with the image caption), provenance = the turn.

    Args:
        compact: Drop chit-chat sentences ("Thanks, Mel!", "Wow, that's amazing!") and caption
            boilerplate (``language/phatic.py``): more memories fit a context budget; the turn
            itself is stored unchanged.
        granularity: ``turn`` (one entry per turn) or ``sentence``: one entry per sentence of a
            compacted turn (short sentences join the next, ``min_words``), each with the turn as
            provenance and the image caption on its last entry. A question that gathers facts from
            many turns then gets more of them within a token budget.
        min_words: With ``sentence``: the fewest words of an entry.
    """

    def __init__(self, compact: bool = False, granularity: str = "turn", min_words: int = 6) -> None:
        if granularity not in ("turn", "sentence"):
            raise ValueError(f"granularity must be 'turn' or 'sentence', got {granularity!r}")
        self.compact, self.granularity, self.min_words = compact or granularity == "sentence", granularity, min_words

    def write(self, turns: Sequence[Turn], context: Sequence[str] = ()) -> list[DraftItem]:
        if self.granularity == "sentence":
            return [d for t in turns for d in self._sentences(t)]
        render = (lambda t: compact_turn(t.speaker, t.text, t.caption)) if self.compact else Turn.render
        return [DraftItem(text=render(t), provenance=[t.turn_id], event_time=t.timestamp, metadata=_meta(t)) for t in turns]

    def _sentences(self, t: Turn) -> list[DraftItem]:
        units = sentence_units(t.text, self.min_words) or [""]
        if t.caption:
            units[-1] += caption_note(t.caption)
        return [DraftItem(text=f"{t.speaker}: {u.strip()}", provenance=[t.turn_id], event_time=t.timestamp, metadata=_meta(t))
                for u in units if u.strip()]

    def write_segments(self, segments: Sequence[Segment], context: Sequence[str] = ()) -> list[DraftItem]:
        """One entry per (normalized, compressed) turn, tagged with its segment's topic."""
        return segment_drafts(segments, "turn", writer="turn")


def default_writer() -> TurnWriter:
    """The default Writer: one item per turn without its chit-chat sentences (``Memory.open`` and a
    Hydra config that names no ``writer`` both use it; conf/writer/turn_compact.yaml is the same)."""
    return TurnWriter(compact=True)


def _listener(turns: Sequence[Turn], i: int, context: Sequence[str]) -> str | None:
    """The other party of turn i: the nearest earlier (else later) different speaker."""
    me = turns[i].speaker
    for t in list(reversed(turns[:i])) + list(turns[i + 1 :]):
        if t.speaker != me:
            return t.speaker
    for line in reversed(context):
        who = line.partition(": ")[0]
        if who and who != me:
            return who
    return None


class ExtractiveWriter:
    """One self-contained entry per turn, without generation.

    Args:
        nlp: Optional spaCy pipeline; named entities become the item's ``entities``.
        name_speakers: Replace I / my / you by the speakers' names.
        anchor_dates: Append absolute dates to relative ones ("yesterday [7 May 2023]").
        granularity: With the sensory stage: ``segment`` (an entry per topic segment) or ``turn``.
        max_tokens: With the sensory stage: the longest entry (longer segments are split).
    """

    _LABELS = {"PERSON", "ORG", "GPE", "LOC", "EVENT", "WORK_OF_ART", "PRODUCT", "FAC", "NORP", "DATE"}

    def __init__(self, nlp: Any = None, name_speakers: bool = True, anchor_dates: bool = True, granularity: str = "segment",
                 max_tokens: int = 160) -> None:
        self.nlp, self.name, self.anchor = nlp, name_speakers, anchor_dates
        self.granularity, self.max_tokens = granularity, max_tokens

    def write_segments(self, segments: Sequence[Segment], context: Sequence[str] = ()) -> list[DraftItem]:
        """{topic, summary, source turns} per segment: the summary is the segment's compressed turns."""
        return segment_drafts(segments, self.granularity, self.max_tokens)

    def write(self, turns: Sequence[Turn], context: Sequence[str] = ()) -> list[DraftItem]:
        texts = []
        for i, t in enumerate(turns):
            body = name_speakers(t.text, t.speaker, _listener(turns, i, context)) if self.name else t.text
            body = anchor_dates(body, t.timestamp) if self.anchor else body
            rendered = f"{t.speaker}: {body}" + (f" [shares an image: {t.caption}]" if t.caption else "")
            texts.append(rendered)
        ents: list[list[str]] = [[] for _ in turns]
        if self.nlp is not None:
            for i, doc in enumerate(self.nlp.pipe([t.text for t in turns])):
                ents[i] = list(dict.fromkeys(e.text for e in doc.ents if e.label_ in self._LABELS))
        return [
            DraftItem(text=x, provenance=[t.turn_id], event_time=t.timestamp, entities=e, metadata=_meta(t))
            for x, t, e in zip(texts, turns, ents)
        ]


class _Entry(BaseModel):
    text: str = Field(min_length=3, max_length=600)
    source_turns: list[str] = Field(default_factory=list)
    topic: str | None = Field(default=None, max_length=120)


class WriterOutput(BaseModel):
    """The JSON the generative writer must produce."""

    memories: list[_Entry] = Field(default_factory=list, max_length=32)


class GenerativeWriter:
    """An SLM distils turns into compact facts with cited source turns.

    Entries citing no turn of the batch are dropped; a batch whose output is unusable is
    written by the fallback (extractive) writer instead. Raw turns are always kept in the
    store's turn table, so provenance never points at nothing.

    Args:
        llm: The LLM runtime.
        fallback: Writes a batch when the model fails.
        turns_per_call: Turns per prompt.
        max_new_tokens: Length limit of the JSON answer.
    """

    def __init__(self, llm: LLM, fallback: Writer | None = None, turns_per_call: int = 8, max_new_tokens: int = 256,
                 tokens_per_call: int = 768) -> None:
        self.llm, self.fallback = llm, fallback or ExtractiveWriter()
        self.turns_per_call, self.max_new_tokens = max(1, turns_per_call), max_new_tokens
        self.tokens_per_call = max(1, tokens_per_call)

    def write(self, turns: Sequence[Turn], context: Sequence[str] = ()) -> list[DraftItem]:
        batches = [list(turns[i : i + self.turns_per_call]) for i in range(0, len(turns), self.turns_per_call)]
        batch_prompts = [
            prompts.WRITER.format(
                date=iso(b[0].timestamp)[:10],
                context=prompts.bullet(list(context)[-6:]),
                turns="\n".join(f"{t.turn_id}: {t.speaker}: {t.text}" for t in b),
            )
            for b in batches
        ]
        outs = call_json(self.llm, batch_prompts, WriterOutput, "writer", prompts.retry, self.max_new_tokens)
        drafts: list[DraftItem] = []
        for batch, out in zip(batches, outs):
            drafts.extend(self._drafts(out, batch, {}) or self.fallback.write(batch, context))
        return drafts

    def write_segments(self, segments: Sequence[Segment], context: Sequence[str] = ()) -> list[DraftItem]:
        """One call per STM flush (split only past ``tokens_per_call``): every segment of the
        buffer is summarized in the same prompt, as LightMem's f_sum does."""
        groups: list[list[Segment]] = []
        used = 0
        for seg in segments:
            if not groups or used + seg.n_tokens > self.tokens_per_call:
                groups.append([])
                used = 0
            groups[-1].append(seg)
            used += seg.n_tokens
        batch_prompts = [
            prompts.WRITER_SEGMENTS.format(
                date=iso(g[0].turns[0].turn.timestamp)[:10],
                context=prompts.bullet(list(context)[-6:]),
                segments="\n".join(
                    f"Topic: {seg.topic}\n" + "\n".join(f"{p.turn.turn_id}: {p.turn.speaker}: {p.compressed}" for p in seg.turns)
                    for seg in g
                ),
            )
            for g in groups
        ]
        outs = call_json(self.llm, batch_prompts, WriterOutput, "writer", prompts.retry, self.max_new_tokens)
        drafts: list[DraftItem] = []
        for g, out in zip(groups, outs):
            topics = {p.turn.turn_id: seg.topic for seg in g for p in seg.turns}
            made = self._drafts(out, [p.turn for seg in g for p in seg.turns], topics)
            drafts.extend(made or write_segments(self.fallback, g, context))
        return drafts

    def _drafts(self, out: WriterOutput | None, batch: Sequence[Turn], topics: dict[str, str]) -> list[DraftItem]:
        """Entries citing turns of the batch (none: the caller falls back)."""
        by_id = {t.turn_id: t for t in batch}
        entries = [] if out is None else [e for e in out.memories if any(s in by_id for s in e.source_turns)]
        if not entries and out is not None and out.memories:
            self.llm.meter.failure("writer")  # entries without valid provenance
        drafts = []
        for e in entries:
            src = [s for s in dict.fromkeys(e.source_turns) if s in by_id]
            drafts.append(DraftItem(text=e.text.strip(), provenance=src, event_time=max(by_id[s].timestamp for s in src),
                                    topic=(e.topic or topics.get(src[0]) or None), metadata={"writer": "generative"}))
        return drafts
