"""Session-diverse ordering before packing (retrieval/diversity.py) and its engine switch."""
from __future__ import annotations

import pytest

from lightmem.retrieval.diversity import spread_sessions


def test_zero_spread_keeps_the_order():
    assert spread_sessions(["a", "a", "b", None], 0) == [0, 1, 2, 3]


def test_each_earlier_memory_of_a_session_delays_the_next_by_the_spread():
    # a1 waits 1 rank (a0 above it), a2 waits 2: b3 comes before a2.
    assert spread_sessions(["a", "a", "a", "b", "b", "c"], 1) == [0, 1, 3, 2, 4, 5]
    # A large spread gives each session's best first, in rank order, then the second of each.
    assert spread_sessions(["a", "a", "a", "b", "b", "c"], 5) == [0, 3, 5, 1, 4, 2]


def test_memories_without_a_session_are_never_delayed_and_nothing_is_lost():
    order = spread_sessions(["a", None, "a", "a", None, "b"], 3)
    assert sorted(order) == list(range(6))
    assert order.index(1) == 1 and order.index(4) <= 4


def test_a_negative_spread_is_refused():
    with pytest.raises(ValueError, match="spread must be >= 0"):
        spread_sessions(["a"], -1)


def test_the_engine_spreads_sessions_only_when_asked(tmp_path):
    from lightmem.memory import Memory
    from lightmem.models.embedder import HashingEmbedder
    from lightmem.retrieval.stage2 import Stage1Selector

    turns = [{"speaker": "A", "text": f"I like green tea number {i}", "id": f"s1-{i}", "session_id": "s1"} for i in range(4)]
    turns += [{"speaker": "A", "text": "some green leaves in a cup, my usual", "id": "s2-0", "session_id": "s2"}]
    sessions = {}
    for spread in (0, 10):
        m = Memory.open(str(tmp_path / f"m{spread}"), embedder=HashingEmbedder(64), selector=Stage1Selector(),
                        retrieval={"session_spread": spread})
        try:
            m.add(turns, user_id="u")
            hits = m.search("green tea", "u", k=5, budget=400)
            sessions[spread] = [h.item.metadata.get("session_id") for h in hits]
        finally:
            m.close()
    assert sorted(sessions[0]) == sorted(sessions[10]) == ["s1"] * 4 + ["s2"]
    assert sessions[0].index("s2") > 1  # ranked below two memories of s1 ...
    assert sessions[10][:2] == ["s1", "s2"]  # ... and moved up to second by the spread
    with pytest.raises(ValueError, match="session_spread"):
        Memory.open(str(tmp_path / "bad"), embedder=HashingEmbedder(64), selector=Stage1Selector(),
                    retrieval={"session_spread": -1})
