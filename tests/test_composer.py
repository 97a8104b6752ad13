"""The context composer never exceeds its budget and keeps its priorities."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lightmem.models.tokens import WhitespaceTokenCounter
from lightmem.retrieval.composer import ContextComposer, format_memory
from lightmem.timeutil import parse_timestamp
from lightmem.types import MemoryItem

words = st.lists(st.sampled_from("alpha beta gamma delta , . ! tomato basil".split()), min_size=1, max_size=40).map(" ".join)


def _item(i: int, text: str) -> MemoryItem:
    return MemoryItem(id=str(i), user_id="u", text=text, provenance=[str(i)], created_at=0, event_time=0, last_access=0)


@settings(max_examples=150, deadline=None)
@given(query=words, stm=st.lists(words, max_size=6), mems=st.lists(words, max_size=8), budget=st.integers(1, 300))
def test_budget_is_hard(query, stm, mems, budget):
    c = ContextComposer(WhitespaceTokenCounter(), budget=budget)
    ctx = c.compose(query, stm, [_item(i, t) for i, t in enumerate(mems)])
    assert ctx.n_tokens <= budget
    assert ctx.n_tokens == WhitespaceTokenCounter().count([ctx.prompt])[0]
    assert len(ctx.memories) + ctx.dropped_memories == len(mems)
    # kept memories keep their rank order
    ids = [int(m.id) for m in ctx.memories]
    assert ids == sorted(ids)


def test_query_first_then_recent_history_then_memories():
    c = ContextComposer(WhitespaceTokenCounter(), budget=1000)
    ctx = c.compose("my question", ["old turn", "new turn"], [_item(0, "a fact")])
    p = ctx.prompt
    assert p.index("my question") < p.index("old turn") < p.index("new turn") < p.index("a fact")


def test_an_oversized_query_is_truncated_not_dropped():
    c = ContextComposer(WhitespaceTokenCounter(), budget=10)
    ctx = c.compose("word " * 50, ["turn"], [_item(0, "fact")])
    assert ctx.n_tokens <= 10 and ctx.prompt.startswith("### Query\nword") and not ctx.memories


def test_memories_carry_the_date_in_the_words_questions_use():
    ts = parse_timestamp("1:56 pm on 8 May, 2023")
    item = MemoryItem(id="i", user_id="u", text="Caroline: I went to a support group.", provenance=["D1:3"], created_at=ts,
                      event_time=ts, last_access=ts)
    assert format_memory(item) == "- [8 May 2023] Caroline: I went to a support group."


def test_cached_count_makes_its_counter_once_and_stays_bounded():
    from lightmem.models.tokens import CachedCount, WhitespaceTokenCounter

    made = []
    count = CachedCount(lambda: made.append(1) or WhitespaceTokenCounter(), max_size=2)
    assert made == []  # nothing is made before the first count
    assert [count("a b"), count("a b c"), count("a b"), count("x")] == [2, 3, 2, 1]
    assert made == [1] and len(count._counts) == 2  # the oldest text went
