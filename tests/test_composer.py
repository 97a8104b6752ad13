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


def test_memories_then_recent_history_then_the_question_last():
    c = ContextComposer(WhitespaceTokenCounter(), budget=1000)
    ctx = c.compose("my question", ["old turn", "new turn"], [_item(0, "a fact")])
    p = ctx.prompt
    assert p.index("a fact") < p.index("old turn") < p.index("new turn") < p.index("my question")
    assert p.endswith("### Question\nmy question")


def test_the_question_has_priority_over_history_and_memories():
    c = ContextComposer(WhitespaceTokenCounter(), budget=14)
    ctx = c.compose("what did I plant", ["an old turn about tomatoes"], [_item(0, "I planted basil")])
    assert ctx.prompt.endswith("what did I plant") and ctx.n_tokens <= 14
    assert not ctx.memories and ctx.dropped_memories == 1


def test_an_oversized_query_is_truncated_not_dropped():
    c = ContextComposer(WhitespaceTokenCounter(), budget=10)
    ctx = c.compose("word " * 50, ["turn"], [_item(0, "fact")])
    assert ctx.n_tokens <= 10 and ctx.prompt.startswith("### Question\nword") and not ctx.memories


@settings(max_examples=300, deadline=None)
@given(query=words, stm=st.lists(words, max_size=4), mems=st.lists(words, max_size=12), budget=st.integers(1, 400))
def test_memories_packed_by_layout_fit_without_dropping(query, stm, mems, budget):
    """What the layout leaves for memories, packed by line cost, is what the composed prompt holds."""
    from lightmem.retrieval.composer import pack_by_budget

    c = ContextComposer(WhitespaceTokenCounter(), budget=budget)
    items = [_item(i, t) for i, t in enumerate(mems)]
    fill = c.layout(query, stm, budget).memory_budget
    chosen = [items[i] for i in pack_by_budget([c.line_cost(m) for m in items], fill)]
    ctx = c.compose(query, stm, chosen, budget)
    assert ctx.n_tokens <= budget and ctx.dropped_memories == 0


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


def test_a_control_of_a_question_without_evidence_is_scored_for_coverage_alone():
    import numpy as np

    from lightmem.evaluation.harnesses.packed import control_contexts, control_scores
    from lightmem.types import Turn

    turns = {f"s:{i}": Turn(f"s:{i}", "user", text, timestamp=1.7e9 + i)
             for i, text in enumerate(["I adopted a cat named Miso.", "The weather was grey all week."])}
    ctxs = control_contexts(ContextComposer(WhitespaceTokenCounter(), budget=100), "u", turns, "What is my cat called?", [],
                            100, np.random.default_rng(0))
    assert "Miso" not in ctxs["gold"].prompt and "Miso" in ctxs["random"].prompt  # no evidence: an empty gold context
    gold, rand = (control_scores(ctxs[n], [], "Miso") for n in ("gold", "random"))
    assert (gold["recall_all"], gold["coverage"]) == (None, 0.0)
    assert (rand["recall_all"], rand["coverage"]) == (None, 1.0)
