"""The sensory stage inside Memory.add: buffers, pending turns that survive a restart, switches,
writers per segment, and hostile input."""
from __future__ import annotations

import json

import numpy as np
import pytest
from fakes import ScriptedLLM

from lightmem.errors import InvalidInputError
from lightmem.memory import Memory
from lightmem.models.word_scorer import _KeepAtRate
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.roles.writer import ExtractiveWriter, GenerativeWriter
from lightmem.sensory.pipeline import GateSpec, NormalizeSpec, SegmentSpec, SensorySpec, SensoryStage
from lightmem.sensory.segmenter import TopicSegmenter
from lightmem.types import Turn

DAY = 1_683_554_160.0  # 2023-05-08 13:56 UTC


class LengthCompressor(_KeepAtRate):
    """A deterministic stand-in for the trained classifier: longer words score higher."""

    def __init__(self, rate: float = 0.6) -> None:
        self.rate = rate

    def word_scores_many(self, docs):
        return [[float(len(w)) for w in words] for words in docs]


def make_path(embedder, **spec_kw) -> SensoryStage:
    spec = SensorySpec(**{"segment": SegmentSpec(method="similarity", tau=0.2, buffer_tokens=64), "stm_threshold": 40,
                            **spec_kw})
    seg = TopicSegmenter(method="similarity", tau=spec.segment.tau, max_tokens=spec.segment.buffer_tokens)
    return SensoryStage(spec, embedder, LengthCompressor(spec.compress.rate), seg if spec.segment.enabled else None)


def turns(n: int, session: str = "s1", start: int = 0, ts: float = DAY) -> list[Turn]:
    topics = ["hiking trips in the Rocky Mountains", "adopting a rescue puppy named Max", "painting a sunset over Lake Tahoe"]
    return [Turn(f"{session}:{i}", "Caroline" if i % 2 == 0 else "Melanie",
                 f"I told you about {topics[(i // 4) % 3]} yesterday, number {i}", ts, session)
            for i in range(start, start + n)]


def open_memory(path, embedder, sensory_stage, writer=None) -> Memory:
    return Memory.open(path, embedder=embedder, selector=Stage1Selector(), writer=writer or ExtractiveWriter(),
                       sensory_stage=sensory_stage, synchronous="NORMAL")


def covered(memory: Memory, user: str) -> set[str]:
    return {p for it in memory.get_all(user) for p in it.provenance}


def test_turns_wait_in_the_buffers_then_become_segment_entries(tmp_path, embedder):
    m = open_memory(tmp_path / "s", embedder, make_path(embedder))
    written = m.add_turns("u", turns(2))
    assert written == [] and [t.turn_id for t in m.pending("u")] == ["s1:0", "s1:1"]
    assert m.stats()["u"]["pending"] == 2 and m.stats()["u"]["turns"] == 2
    m.add_turns("u", turns(18, start=2))
    items = m.get_all("u")
    assert items, "the STM buffer released segments"
    assert all(it.topic for it in items) and any(len(it.provenance) > 1 for it in items)
    m.flush("u")
    assert m.pending("u") == [] and covered(m, "u") == {f"s1:{i}" for i in range(20)}
    text = " ".join(it.text for it in m.get_all("u"))
    assert "[2023-05-07]" in text and "Caroline" in text and " I " not in f" {text} "
    m.close()


def test_pending_turns_survive_a_restart(tmp_path, embedder):
    m = open_memory(tmp_path / "s", embedder, make_path(embedder))
    m.add_turns("u", turns(3))
    assert len(m.pending("u")) == 3
    m.close()  # the process dies with turns only in the buffers
    m2 = open_memory(tmp_path / "s", embedder, make_path(embedder))
    assert [t.turn_id for t in m2.pending("u")] == ["s1:0", "s1:1", "s1:2"]
    m2.add_turns("u", turns(3))  # a resumed ingest: nothing duplicated
    m2.add_turns("u", turns(2, start=3))
    m2.flush("u")
    assert covered(m2, "u") == {f"s1:{i}" for i in range(5)}
    provs = [p for it in m2.get_all("u") for p in it.provenance]
    assert len(provs) == len(set(provs)) == 5
    m2.close()


def test_a_failed_write_rolls_the_buffers_back(tmp_path, embedder):
    class Broken(ExtractiveWriter):
        calls = 0

        def write_segments(self, segments, context=()):
            Broken.calls += 1
            if Broken.calls == 1:
                raise RuntimeError("writer crashed")
            return super().write_segments(segments, context)

    m = open_memory(tmp_path / "s", embedder, make_path(embedder, stm_threshold=0), writer=Broken())
    with pytest.raises(RuntimeError):
        m.add_turns("u", turns(6))
    assert m.stats().get("u", {}).get("turns", 0) == 0 and m.sensory_stage.pending("u") == []
    m.add_turns("u", turns(6))
    m.flush("u")
    assert covered(m, "u") == {f"s1:{i}" for i in range(6)}
    m.close()


def test_a_failed_write_puts_back_exactly_what_was_buffered_before_it(tmp_path, embedder):
    class Broken(ExtractiveWriter):
        fail = False

        def write_segments(self, segments, context=()):
            if Broken.fail:
                raise RuntimeError("writer crashed")
            return super().write_segments(segments, context)

    m = open_memory(tmp_path / "s", embedder, make_path(embedder, stm_threshold=10_000), writer=Broken())
    m.add_turns("u", turns(8))  # segmented into the STM buffer, nothing written yet
    state = m.sensory_stage._users["u"]
    before = ([p.turn.turn_id for p in state.sensory], [s.turn_ids for s in state.stm], len(state.recent))
    assert before[1] and m.get_all("u") == []
    Broken.fail = True
    with pytest.raises(RuntimeError):
        m.flush("u")  # drains both buffers into the writer, which fails
    state = m.sensory_stage._users["u"]
    assert ([p.turn.turn_id for p in state.sensory], [s.turn_ids for s in state.stm], len(state.recent)) == before
    Broken.fail = False
    m.flush("u")
    assert covered(m, "u") == {f"s1:{i}" for i in range(8)} and m.pending("u") == []
    m.close()


def test_a_new_session_always_opens_a_new_segment(tmp_path, embedder):
    m = open_memory(tmp_path / "s", embedder, make_path(embedder))
    m.add_turns("u", turns(3, "a"))
    m.add_turns("u", turns(3, "b", ts=DAY + 86400))
    m.flush("u")
    for it in m.get_all("u"):
        assert len({p.split(":")[0] for p in it.provenance}) == 1
    m.close()


@pytest.mark.parametrize("switch", ["normalize", "compress", "segment", "gate", "importance", "all_off"])
def test_every_stage_can_be_switched(tmp_path, embedder, switch):
    kw = {}
    if switch in ("normalize", "all_off"):
        kw["normalize"] = NormalizeSpec(enabled=False)
    if switch in ("compress", "all_off"):
        kw["compress"] = type(SensorySpec().compress)(enabled=False)
    if switch in ("segment", "all_off"):
        kw["segment"] = SegmentSpec(enabled=False)
    if switch == "gate":
        kw["gate"] = GateSpec(enabled=True, tau=0.0)
    if switch == "importance":
        kw["importance"] = type(SensorySpec().importance)(enabled=True, tau=-1.0)
    wp = make_path(embedder, **kw)
    m = open_memory(tmp_path / "s", embedder, wp)
    m.add_turns("u", turns(8))
    m.flush("u")
    assert covered(m, "u") == {f"s1:{i}" for i in range(8)}  # permissive thresholds: nothing dropped
    items = m.get_all("u")
    if switch in ("segment", "all_off"):
        assert all(len(it.provenance) == 1 for it in items)
    if switch in ("compress", "all_off"):
        assert any("yesterday" in it.text and "number" in it.text for it in items)
    if switch in ("normalize", "all_off"):
        assert not any("[2023-05-07]" in it.text for it in items)
    else:
        assert all("[2023-05-07]" in it.text for it in items)
    m.close()


def test_gated_turns_stay_archived_raw(tmp_path, embedder):
    wp = make_path(embedder, gate=GateSpec(enabled=True, tau=10.0))  # nothing reaches τ
    m = open_memory(tmp_path / "s", embedder, wp)
    m.add_turns("u", turns(6))
    assert m.flush("u") == [] and m.get_all("u") == []
    assert len(m.store.turns("u")) == 6 and m.pending("u") == []
    assert wp.stats["dropped"] == 6
    m.close()


def test_generative_writer_makes_one_call_per_flush_and_falls_back(tmp_path, embedder):
    def respond(prompt: str) -> str:
        ids = [line.split(":")[0] + ":" + line.split(":")[1] for line in prompt.splitlines() if line.startswith("s1:")]
        return json.dumps({"memories": [{"topic": "t", "text": "Caroline likes hiking.", "source_turns": ids[:2]}]})

    llm = ScriptedLLM(respond=respond)
    m = open_memory(tmp_path / "s", embedder, make_path(embedder, stm_threshold=10_000), writer=GenerativeWriter(llm))
    m.add_turns("u", turns(8))
    assert llm.meter.summary() == {} and m.get_all("u") == []  # still buffered: no call yet
    written = m.flush("u")
    assert llm.meter.summary()["writer"]["calls"] == 1
    assert [it.text for it in written] == ["Caroline likes hiking."] and written[0].provenance == ["s1:0", "s1:1"]
    bad = ScriptedLLM(script=["not json"])
    m2 = open_memory(tmp_path / "s2", embedder, make_path(embedder, stm_threshold=10_000), writer=GenerativeWriter(bad))
    m2.add_turns("u", turns(4))
    m2.flush("u")
    assert covered(m2, "u") == {f"s1:{i}" for i in range(4)}  # the extractive fallback wrote them
    m.close()
    m2.close()


# -- hostile input ---------------------------------------------------------------------------
def test_empty_turns_are_refused_and_nothing_is_written(tmp_path, embedder):
    m = open_memory(tmp_path / "s", embedder, make_path(embedder))
    for bad in ("", "   ", [{"text": "fine"}, {"text": ""}]):
        with pytest.raises(InvalidInputError):
            m.add(bad, user_id="u")
    assert m.stats() == {}
    m.close()


def test_emoji_non_english_huge_and_dateless_turns(tmp_path, embedder):
    m = open_memory(tmp_path / "s", embedder, make_path(embedder, stm_threshold=0))
    huge = " ".join(f"word{i % 97}" for i in range(10_000))
    msgs = [
        {"id": "e", "text": "🎉🎉🎉 😀", "speaker": "Caroline"},
        {"id": "zh", "text": "我昨天去了北京，天气很好。", "speaker": "Melanie"},
        {"id": "de", "text": "Gestern war ich mit meinem Hund im Park.", "speaker": "Caroline"},
        {"id": "big", "text": huge, "speaker": "Melanie"},
    ]
    m.add(msgs, user_id="u")  # no timestamp: the session date is now
    m.add({"id": "late", "text": "last Blursday I saw her"}, user_id="u", timestamp="2023-05-08")
    with pytest.raises(InvalidInputError):
        m.add({"id": "x", "text": "hi"}, user_id="u", timestamp="31 Februaryy 2023")
    m.flush("u")
    items = m.get_all("u")
    assert covered(m, "u") == {"e", "zh", "de", "big", "late"}
    by = {p: it for it in items for p in it.provenance}
    assert "🎉" in by["e"].text and "北京" in by["zh"].text
    big = [it for it in items if it.provenance == ["big"]]
    assert len(big) > 1 and all(it.n_tokens <= 400 for it in big)  # split to the embedder's reach
    assert sum(len(it.text.split()) for it in big) < 10_000  # compressed
    assert "last Blursday I saw her" not in by["late"].text or "Blursday" in by["late"].text
    m.close()


def test_delete_user_clears_the_buffers(tmp_path, embedder):
    m = open_memory(tmp_path / "s", embedder, make_path(embedder))
    m.add_turns("u", turns(3))
    m.delete_user("u")
    assert m.pending("u") == [] and m.sensory_stage.pending("u") == []
    assert m.flush("u") == []
    m.close()


def test_write_path_needs_its_parts(embedder):
    with pytest.raises(ValueError, match="compressor"):
        SensoryStage(SensorySpec(), embedder)
    with pytest.raises(ValueError, match="segmenter"):
        SensoryStage(SensorySpec(), embedder, LengthCompressor())
    with pytest.raises(ValueError, match="encoder"):
        TopicSegmenter(method="hybrid")


def test_vectors_are_finite_for_every_processed_turn(embedder):
    wp = make_path(embedder, stm_threshold=0)
    out = wp.push("u", turns(5))
    assert out.segments and all(np.isfinite(p.vector).all() for s in out.segments for p in s.turns)
