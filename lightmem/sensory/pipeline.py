"""The sensory stage: the sensory and short-term buffers before the Writer, per user (LightMem §3.1–3.2, SimpleMem §2.1).

    turns ─ normalize (I/you → names, he/she → last-mentioned person, relative → absolute dates)
          ─ pre-compress at rate r (token classifier, or cross-entropy under an SLM)
          ─ sensory buffer (512 tokens) ─ topic segmentation (attention ∩ similarity);
            the last segment of a full buffer is carried into the next one
          ─ STM buffer: segments accumulate until th tokens
          ─ entropy gate / importance windows on the flushed block
          → segments for the Writer ({topic, turns})

Every stage is switchable (``SensorySpec``). ``push`` returns the segments ready to be written;
turns still buffered are ``pending`` and the Memory keeps their ids in the store, so a killed
process loses nothing: the next ``push`` for the user starts from the restored pending turns.
"""
from __future__ import annotations

import copy
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lightmem.language.entities import ANCHOR_LABELS, entities_many
from lightmem.language.normalize import Referents, anchor_dates, name_speakers, resolve_pronouns
from lightmem.sensory.gates import GateHistory, entropy_gate, importance_windows
from lightmem.sensory.segmenter import segments_from
from lightmem.text import STOPWORDS, words
from lightmem.types import Turn

log = logging.getLogger(__name__)


@dataclass
class NormalizeSpec:
    enabled: bool = True
    speakers: bool = True  # I / my / you → names
    pronouns: bool = True  # he / she → the last-mentioned person (this turn and the two before)
    dates: bool = True  # yesterday → yesterday [2023-05-07]
    date_style: str = "iso"  # iso | text ("7 May 2023")


@dataclass
class CompressSpec:
    enabled: bool = True
    rate: float = 0.6


@dataclass
class SegmentSpec:
    enabled: bool = True
    method: str = "hybrid"  # hybrid (attention ∩ similarity) | attention | similarity
    tau: float = 0.3  # similarity threshold of B2
    buffer_tokens: int = 512  # sensory buffer (the encoder's window)
    session_boundaries: bool = True  # a new session always opens a new segment
    layers: tuple[int, ...] = (-3, -2, -1)  # encoder layers averaged for the attention boundaries
    sink: int = 3  # positions masked at each end of the sequence (attention sinks)
    shift: int = 0  # attention peak k → boundary before k + shift (0: the paper's rule)


@dataclass
class GateSpec:
    enabled: bool = False
    window: int = 10
    stride: int = 5
    alpha: float = 0.5
    tau: float = 0.35


@dataclass
class ImportanceSpec:
    enabled: bool = False
    radius: int = 10
    tau: float = 0.30


@dataclass
class SensorySpec:
    """Switches and knobs of every stage (conf/sensory/*.yaml)."""

    normalize: NormalizeSpec = field(default_factory=NormalizeSpec)
    compress: CompressSpec = field(default_factory=CompressSpec)
    segment: SegmentSpec = field(default_factory=SegmentSpec)
    stm_threshold: int = 512  # th: tokens of segments buffered before the Writer runs (0: every push)
    gate: GateSpec = field(default_factory=GateSpec)
    importance: ImportanceSpec = field(default_factory=ImportanceSpec)


@dataclass(eq=False)
class Processed:
    """A turn after the sensory stages."""

    turn: Turn
    text: str  # normalized
    compressed: str  # what the Writer gets (== text when compression is off)
    n_tokens: int  # tokens of ``compressed``
    seg_text: str  # what the segmenter reads: ``compressed``, recompressed at 0.5 while over a quarter buffer
    seg_tokens: int
    entities: list[tuple[str, str]]
    vector: np.ndarray | None = None  # embedding of ``text`` (L2-normalized), made when a stage needs it


@dataclass
class Segment:
    """Consecutive turns on one topic: the unit the Writer summarizes."""

    turns: list[Processed]
    topic: str

    @property
    def turn_ids(self) -> list[str]:
        return [p.turn.turn_id for p in self.turns]

    @property
    def n_tokens(self) -> int:
        return sum(p.n_tokens for p in self.turns)


@dataclass
class Flushed:
    """What a push released: segments to write, and turns the gates dropped (kept raw only)."""

    segments: list[Segment] = field(default_factory=list)
    dropped: list[Turn] = field(default_factory=list)


@dataclass
class _UserState:
    sensory: list[Processed] = field(default_factory=list)
    stm: list[Segment] = field(default_factory=list)
    recent: list[tuple[str, Referents]] = field(default_factory=list)  # (speaker, persons it named) of the last 2 turns
    gate: GateHistory = field(default_factory=GateHistory)


def topic_label(turns: Sequence[Processed], n: int = 3) -> str:
    """A short topic: the segment's most frequent entities (speakers aside), else its most frequent content words."""
    speakers = {p.turn.speaker for p in turns}
    ents = Counter(e for p in turns for e, label in p.entities if e not in speakers and label != "DATE")
    if ents:
        return ", ".join(e for e, _ in ents.most_common(n))
    counts = Counter(w for p in turns for w in words(p.text) if w not in STOPWORDS and len(w) > 3)
    return ", ".join(w for w, _ in counts.most_common(n)) or "chat"


def _packaged_classifier(**kwargs: Any) -> Any:
    """The trained token classifier of checkpoints/word_scorer on int8 ONNX Runtime (as conf/sensory/lightmem.yaml)."""
    from lightmem.models.registry import checkpoint_path
    from lightmem.models.word_scorer import TokenClassifierWordScorer

    return TokenClassifierWordScorer(str(checkpoint_path("word_scorer")), device="cpu", backend="onnx_int8", **kwargs)


class SensoryStage:
    """Runs the sensory stages and both buffers for every user of a Memory.

    Args:
        spec: The stage switches.
        embedder: Embeds turns for segmentation similarity and the gates.
        compressor: A ``WordScorer`` (needed when compression is on).
        segmenter: A ``TopicSegmenter`` (needed when segmentation is on).
        nlp: Optional spaCy pipeline for entities (capitalised words without it).
        counter: Token counter of the buffers (the embedder's by default).
    """

    def __init__(self, spec: SensorySpec | None = None, embedder: Any = None, compressor: Any = None, segmenter: Any = None,
                 nlp: Any = None, counter: Any = None) -> None:
        self.spec = spec or SensorySpec()
        if embedder is None:
            raise ValueError("the sensory stage needs an embedder")
        if self.spec.compress.enabled and compressor is None:
            raise ValueError("compression is on but no compressor was given (set compress.enabled=false to skip it)")
        if self.spec.segment.enabled and segmenter is None:
            raise ValueError("segmentation is on but no segmenter was given (set segment.enabled=false to skip it)")
        self.embedder, self.compressor, self.segmenter, self.nlp = embedder, compressor, segmenter, nlp
        self.counter = counter or embedder.token_counter()
        self._users: dict[str, _UserState] = {}
        self.stats: Counter[str] = Counter()

    @classmethod
    def build(cls, embedder: Any, spec: SensorySpec | None = None, compressor: Any = None, nlp: Any = None) -> "SensoryStage":
        """A sensory stage whose compressor and segmenter come from the trained checkpoint when not given.

        The segmenter reads attention from the compressor's encoder; with a compressor that has
        none (the cross-entropy scorer), the trained token classifier is loaded for it.
        """
        from lightmem.models.word_scorer import TokenClassifierWordScorer
        from lightmem.sensory.segmenter import TopicSegmenter

        spec = spec or SensorySpec()
        seg = spec.segment
        needs_encoder = seg.enabled and seg.method != "similarity"
        if compressor is None and (spec.compress.enabled or needs_encoder):
            compressor = _packaged_classifier(rate=spec.compress.rate)
        segmenter = None
        if seg.enabled:
            encoder = compressor if isinstance(compressor, TokenClassifierWordScorer) else None
            if needs_encoder and encoder is None:
                encoder = _packaged_classifier()
            attention = encoder.attention_fn(seg.layers) if encoder is not None and needs_encoder else None
            segmenter = TopicSegmenter(encoder.model if encoder else None, encoder.tok if encoder else None, seg.tau, seg.method,
                                       seg.layers, seg.sink, seg.buffer_tokens, seg.shift, attention=attention)
        return cls(spec, embedder, compressor if spec.compress.enabled else None, segmenter, nlp)

    # -- state -----------------------------------------------------------------------------
    def has_state(self, user_id: str) -> bool:
        return user_id in self._users

    def pending(self, user_id: str) -> list[Turn]:
        """Turns of the user still in the sensory or STM buffer, oldest first."""
        st = self._users.get(user_id)
        if st is None:
            return []
        return [p.turn for s in st.stm for p in s.turns] + [p.turn for p in st.sensory]

    def snapshot(self, user_id: str) -> _UserState | None:
        """The user's buffers as they are now. The stages replace or re-slice the lists and never edit a
        turn or segment in place (a turn's lazily made vector aside), so copying the lists is enough."""
        st = self._users.get(user_id)
        return None if st is None else _UserState(list(st.sensory), list(st.stm), list(st.recent), copy.deepcopy(st.gate))

    def restore(self, user_id: str, snap: _UserState | None) -> None:
        """Put back a snapshot (after a failed write) so buffers and store stay in step."""
        if snap is None:
            self._users.pop(user_id, None)
        else:
            self._users[user_id] = snap

    def forget(self, user_id: str) -> None:
        self._users.pop(user_id, None)

    # -- the stages --------------------------------------------------------------------------
    def push(self, user_id: str, turns: Sequence[Turn]) -> Flushed:
        """Take new turns; return what the buffers release (possibly nothing)."""
        st = self._users.setdefault(user_id, _UserState())
        if turns:
            st.sensory.extend(self._process(st, turns))
        self._segment(st, final=False)
        return self._release(st, final=False)

    def drain(self, user_id: str) -> Flushed:
        """Release everything buffered for the user (end of a conversation, or ``Memory.flush``)."""
        st = self._users.get(user_id)
        if st is None:
            return Flushed()
        self._segment(st, final=True)
        return self._release(st, final=True)

    def _process(self, st: _UserState, turns: Sequence[Turn]) -> list[Processed]:
        spec = self.spec.normalize
        ents = entities_many([t.text for t in turns], self.nlp, ANCHOR_LABELS, skip_initial=True)
        texts = []
        for t, e in zip(turns, ents):
            text = t.text
            if spec.enabled:
                listener = next((s for s, _ in reversed(st.recent) if s != t.speaker), None)
                if spec.speakers:
                    text = name_speakers(text, t.speaker, listener)
                mentioned = Referents()
                mentioned.observe([x for x, label in e if label in ("PERSON", "NAME")], text)
                if spec.pronouns:  # scope: this turn and the two before (SimpleMem Table 6)
                    scope = _merge([mentioned, *(r for _, r in reversed(st.recent[-2:]))])
                    text = resolve_pronouns(text, scope, exclude=(t.speaker, listener or t.speaker))
                if spec.dates:
                    text = anchor_dates(text, t.timestamp, spec.date_style)
                st.recent = [*st.recent[-1:], (t.speaker, mentioned)]
            if t.caption:
                text = f"{text} [shares an image: {t.caption}]"
            texts.append(text)
        compressed = self.compressor.compress_many(texts, self.spec.compress.rate) if self.spec.compress.enabled else texts
        counts = self.counter.count(compressed)
        cap = max(1, self.spec.segment.buffer_tokens // 4)
        seg_texts = [self._fit(c, n, cap) for c, n in zip(compressed, counts)]
        seg_counts = [n if x is c else self.counter.count([x])[0] for x, c, n in zip(seg_texts, compressed, counts)]
        self.stats["turns"] += len(turns)
        self.stats["tokens_in"] += sum(self.counter.count(texts))
        self.stats["tokens_out"] += sum(counts)
        return [Processed(t, x, c, n, st_, sn, e)
                for t, x, c, n, st_, sn, e in zip(turns, texts, compressed, counts, seg_texts, seg_counts, ents)]

    def _vectors(self, part: Sequence[Processed]) -> np.ndarray:
        """The turns' embeddings, the missing ones encoded in one batch: turns added one at a time
        are embedded together when the buffer is segmented, not one call per turn."""
        todo = [p for p in part if p.vector is None]
        if todo:
            for p, v in zip(todo, self.embedder.encode([p.text for p in todo])):
                p.vector = v
        return np.stack([p.vector for p in part])

    def _fit(self, text: str, n_tokens: int, cap: int) -> str:
        """An over-long turn for the segmenter: compressed at 0.5 until it fits ``cap`` tokens
        (LightMem App. C.1), or cut to its first ``cap`` words without a compressor."""
        if n_tokens <= cap:
            return text
        if self.compressor is not None:
            return self.compressor.fit(text, cap, lambda x: self.counter.count([x])[0])
        return " ".join(text.split()[:cap])

    def _cut(self, part: list[Processed]) -> list[Segment]:
        """Segments of a run of turns (one per turn when segmentation is off)."""
        if not part:
            return []
        if not self.spec.segment.enabled:
            return [Segment([p], topic_label([p])) for p in part]
        vectors = self._vectors(part) if self.segmenter.method != "attention" else None
        bounds = self.segmenter.boundaries([p.seg_text for p in part], vectors)
        self.stats["boundaries"] += len(bounds)
        return [Segment(part[a:b], topic_label(part[a:b])) for a, b in segments_from(bounds, len(part))]

    def _segment(self, st: _UserState, final: bool) -> None:
        """Move segments from the sensory buffer to the STM buffer."""
        seg = self.spec.segment
        while st.sensory:
            if seg.session_boundaries:
                first = st.sensory[0].turn.session_id
                j = next((i for i, p in enumerate(st.sensory) if p.turn.session_id != first), None)
                if j is not None and _fits(st.sensory[:j], seg.buffer_tokens):
                    st.stm.extend(self._cut(st.sensory[:j]))  # a closed session leaves no residual
                    del st.sensory[:j]
                    continue
            total = sum(p.seg_tokens for p in st.sensory)
            if total < seg.buffer_tokens and not final:
                return
            n, used = 0, 0
            while n < len(st.sensory) and (n == 0 or used + st.sensory[n].seg_tokens <= seg.buffer_tokens - 2):
                used += st.sensory[n].seg_tokens
                n += 1
            segments = self._cut(st.sensory[:n])
            if final and n == len(st.sensory):
                st.stm.extend(segments)
                st.sensory.clear()
                return
            if len(segments) > 1:  # the last segment is the residual, carried into the next buffer
                segments = segments[:-1]
            st.stm.extend(segments)
            del st.sensory[: sum(len(s.turns) for s in segments)]

    def _release(self, st: _UserState, final: bool) -> Flushed:
        """The STM buffer's segments once it holds th tokens (or on drain), through the gates."""
        if not st.stm or (not final and sum(s.n_tokens for s in st.stm) < self.spec.stm_threshold):
            return Flushed()
        segments, st.stm = st.stm, []
        flat = [p for s in segments for p in s.turns]
        keep = [True] * len(flat)
        vecs = self._vectors(flat) if self.spec.gate.enabled or self.spec.importance.enabled else None
        ent_sets = [{e.lower() for e, _ in p.entities} for p in flat]
        if self.spec.gate.enabled:
            g = self.spec.gate
            flags, _, st.gate = entropy_gate(ent_sets, vecs, g.window, g.stride, g.alpha, g.tau, st.gate)
            keep = [k and f for k, f in zip(keep, flags)]
        if self.spec.importance.enabled:
            imp = self.spec.importance
            flags = importance_windows([bool(s) for s in ent_sets], vecs, imp.radius, imp.tau)
            keep = [k and f for k, f in zip(keep, flags)]
        out, dropped, i = Flushed(), [], 0
        for s in segments:
            flags = keep[i : i + len(s.turns)]
            i += len(s.turns)
            dropped.extend(p.turn for p, k in zip(s.turns, flags) if not k)
            kept = [p for p, k in zip(s.turns, flags) if k]
            if kept:
                out.segments.append(Segment(kept, s.topic))
        out.dropped = dropped
        self.stats["flushes"] += 1
        self.stats["segments"] += len(out.segments)
        self.stats["dropped"] += len(dropped)
        return out


def _fits(part: Sequence[Processed], limit: int) -> bool:
    return sum(p.seg_tokens for p in part) <= limit - 2


def _merge(newest_first: Sequence[Referents]) -> Referents:
    """The most recent referent of each kind across a few turns."""
    out = Referents()
    for r in newest_first:
        out.female, out.male, out.person = out.female or r.female, out.male or r.male, out.person or r.person
    return out
