"""Memory facade semantics: add/get/update/history/delete, bad input, capacity, budgets."""
from __future__ import annotations

import pytest

from lightmem.errors import InvalidInputError, ItemNotFoundError
from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.types import Filters


def _count(m: Memory, user: str = "u") -> tuple[int, int]:
    return len(m.store.turns(user)), len(m.get_all(user, include_archived=True))


def test_add_writes_one_item_per_turn_with_provenance_and_caption(memory):
    items = memory.add(
        [{"speaker": "Ava", "text": "I got a puppy", "id": "D1:1"},
         {"role": "Ben", "content": "Look at this", "blip_caption": "a dog on grass", "id": "D1:2"}],
        user_id="u", timestamp="9:00 am on 3 March, 2023",
    )
    assert [i.text for i in items] == ["Ava: I got a puppy", "Ben: Look at this [image: a dog on grass]"]  # compact default writer
    assert [i.provenance for i in items] == [["D1:1"], ["D1:2"]]
    assert items[0].event_time == pytest.approx(1677834000.0)
    assert memory.get(items[0].id, "u").text == items[0].text


@pytest.mark.parametrize(
    "messages, kwargs",
    [
        ("", {}),
        ("   ", {}),
        ([], {}),
        (None, {}),
        (42, {}),
        ([{"text": "ok"}, {"text": ""}], {}),  # one bad message: nothing written
        ([{"text": "ok"}, {"text": 3}], {}),
        ({"text": "ok", "speaker": 7}, {}),
        ({"text": "ok", "metadata": {"f": object()}}, {}),
        ({"text": "ok", "metadata": "not a dict"}, {}),
        ({"text": "ok", "metadata": {"x": float("nan")}}, {}),
        ({"text": "ok", "metadata": {"x": [1, float("-inf")]}}, {}),
        ({"text": "ok", "score": float("inf")}, {}),  # an extra key is metadata too
        ([{"text": "a", "id": "x"}, {"text": "b", "id": "x"}], {}),
        ("ok", {"timestamp": "the day after never"}),
        ("ok", {"timestamp": float("nan")}),
        ("ok", {"timestamp": True}),
        ({"text": "ok", "timestamp": False}, {}),
        ([{"text": "ok", "timestamp": True}], {"timestamp": 1_700_000_000}),
        ("ok", {"user_id": ""}),
        ("ok", {"user_id": "   "}),
        ("ok", {"user_id": "\t\n"}),
        ("ok", {"user_id": 5}),
        ("ok", {"user_id": None}),
    ],
)
def test_bad_input_raises_and_writes_nothing(memory, messages, kwargs):
    memory.add("an existing memory", user_id="u")
    before = _count(memory)
    kwargs = {"user_id": "u", **kwargs}
    with pytest.raises(InvalidInputError):
        memory.add(messages, **kwargs)
    assert _count(memory) == before


@pytest.mark.parametrize("user_id", ["", "   ", "\t"])
def test_blank_user_id_is_refused_with_what_to_do(memory, user_id):
    memory.add("an existing memory", user_id="u")
    for call in (lambda: memory.add("hello", user_id=user_id), lambda: memory.search("memory", user_id),
                 lambda: memory.get_all(user_id), lambda: memory.delete_user(user_id)):
        with pytest.raises(InvalidInputError, match=r"user_id is empty or only whitespace.*user_id='alice'"):
            call()
    assert memory.store.users() == ["u"] and _count(memory) == (1, 1)


@pytest.mark.parametrize("k", [0, -1, 2.5, True, "3", 10_001, pytest.param(10**400, id="10**400")])
def test_bad_k_is_refused(memory, k):
    memory.add("something", user_id="u")
    with pytest.raises(InvalidInputError):
        memory.search("something", "u", k=k)


@pytest.mark.parametrize("filters", [
    {"user_id": "v"}, {"time_from": "not a date"}, {"kinds": ["nope"]}, {"tags": "solo"}, "x",
    {"time_from": 10**400}, {"time_to": float("-inf")}, {"time_from": True}, {"kinds": 3}, {"kinds": "episodic"},
    {"tags": 7}, {"tags": ["a", 1]}, {1: "x", "a": 2}, {"include_superseded": "yes"},
    {"time_from": "2024-01-01", "time_to": "2023-01-01"}, Filters(time_from=float("nan")),
])
def test_bad_filters_and_queries_are_refused(memory, filters):
    memory.add("something", user_id="u")
    with pytest.raises(InvalidInputError):
        memory.search("something", "u", filters=filters)
    with pytest.raises(InvalidInputError):
        memory.search("   ", "u")


@pytest.mark.parametrize("kwargs, says", [
    ({"budget": 10**400}, "budget"), ({"budget": 10_000_001}, "budget"), ({"budget": 0}, "budget"), ({"budget": True}, "budget"),
    ({"now": 10**309}, "outside the years 1900-3000"), ({"now": True}, "timestamp"),
    ({"stm": "one line"}, "stm"), ({"stm": [1, 2]}, "stm"),
])
def test_search_numbers_out_of_range_are_refused_not_crashes(memory, kwargs, says):
    memory.add("something", user_id="u")
    with pytest.raises(InvalidInputError, match=says):
        memory.search("something", "u", **kwargs)
    if "now" not in kwargs:  # build_context checks its budget and stm also when k is given (no Stage-2 fill)
        with pytest.raises(InvalidInputError, match=says):
            memory.build_context("something", "u", k=3, **kwargs)


def test_filters_keep_their_meaning_and_name_the_bad_field(memory):
    assert Filters.from_mapping({"kinds": ["episodic"], "tags": ["rome"], "time_from": None}) == Filters(
        kinds=(Filters.from_mapping({"kinds": ["episodic"]}).kinds[0],), tags=("rome",))
    assert Filters.from_mapping({"kinds": [], "tags": []}).is_trivial
    with pytest.raises(InvalidInputError, match=r"filters\.time_from: timestamp .* outside the years 1900-3000"):
        Filters.from_mapping({"time_from": 10**400})
    with pytest.raises(InvalidInputError, match="swap them"):
        Filters.from_mapping({"time_from": "2024-01-01", "time_to": "2023-01-01"})


def test_readding_the_same_turn_ids_is_idempotent(memory):
    msgs = [{"text": f"fact {i}", "id": f"T{i}"} for i in range(3)]
    assert len(memory.add(msgs, user_id="u", timestamp=1_600_000_000)) == 3
    assert memory.add(msgs, user_id="u", timestamp=1_600_000_000) == []
    assert _count(memory) == (3, 3)


def test_update_reembeds_and_keeps_history_when_asked(memory):
    item = memory.add("Ava lives in Porto", user_id="u")[0]
    memory.update(item.id, "u", text="Ava lives in Lisbon", keep_history=True)
    assert memory.search("Lisbon", "u", k=1)[0].item.id == item.id
    assert memory.search("Lisbon", "u", k=1)[0].scores["bm25"] > 0
    events = [(e.event, e.old_text, e.new_text) for e in memory.history(item.id, "u")]
    assert events == [("ADD", None, "user: Ava lives in Porto"), ("UPDATE", "user: Ava lives in Porto", "Ava lives in Lisbon")]
    with pytest.raises(InvalidInputError):
        memory.update(item.id, "u", colour="blue")
    with pytest.raises(InvalidInputError):
        memory.update(item.id, "u", text="Ava lives in Faro", keep_history="yes")


def test_update_without_history_keeps_no_earlier_text(memory):
    item = memory.add("Ava lives in Porto", user_id="u")[0]
    memory.update(item.id, "u", text="Ava lives in Lisbon")
    assert memory.get(item.id, "u").text == "Ava lives in Lisbon"
    assert [(e.event, e.old_text, e.new_text) for e in memory.history(item.id, "u")] == [("ADD", None, None),
                                                                                       ("UPDATE", None, None)]


@pytest.mark.parametrize("fields, says", [
    ({"metadata": {"x": float("nan")}}, "finite numbers"),
    ({"metadata": {"x": {"y": float("inf")}}}, "finite numbers"),
    ({"metadata": "not a dict"}, "metadata"),
    ({"metadata": {"x": object()}}, "JSON-serialisable"),
    ({"topic": 5}, "topic"),
    ({"entities": "Ava"}, "entities"),
    ({"utility": float("nan")}, "utility"),
    ({"utility": 10**400}, "utility"),
    ({"n_tokens": -1}, "n_tokens"),
    ({"event_time": True}, "event_time"),
    ({"valid_to": 10**309}, "valid_to"),
    ({"nonsense": 1}, "cannot update"),
])
def test_bad_update_fields_are_refused_and_change_nothing(memory, fields, says):
    item = memory.add("Ava lives in Porto", user_id="u")[0]
    with pytest.raises(InvalidInputError, match=says):
        memory.update(item.id, "u", **fields)
    with pytest.raises(InvalidInputError, match=says):  # also together with a new text: nothing re-embedded
        memory.update(item.id, "u", text="Ava lives in Lisbon", **fields)
    assert memory.get(item.id, "u") == item and [e.event for e in memory.history(item.id, "u")] == ["ADD"]


def test_update_with_nothing_to_change_is_refused(memory):
    item = memory.add("Ava lives in Porto", user_id="u")[0]
    with pytest.raises(InvalidInputError, match="nothing to update"):
        memory.update(item.id, "u")  # was an SQL syntax error
    assert memory.get(item.id, "u") == item


@pytest.mark.parametrize("call", [
    lambda m: m.add("I live in \ud800 Porto", user_id="u"),
    lambda m: m.add({"text": "hi", "speaker": "A\udfff"}, user_id="u"),
    lambda m: m.add({"text": "hi", "id": "\ud800"}, user_id="u"),
    lambda m: m.add("hi", user_id="u", session_id="s\ud800"),
    lambda m: m.add({"text": "hi", "metadata": {"note": "\udc80"}}, user_id="u"),
    lambda m: m.add("hi", user_id="u\ud800"),
    lambda m: m.get_all("\ud800"),
    lambda m: m.update(m.get_all("u")[0].id, "u", text="new \ud800 text"),
    lambda m: m.update(m.get_all("u")[0].id, "u", topic="\ud800"),
    lambda m: m.update(m.get_all("u")[0].id, "u", entities=["\ud800"]),
], ids=["text", "speaker", "id", "session_id", "metadata", "user_id", "get_all", "update-text", "update-topic",
        "update-entities"])
def test_a_lone_surrogate_is_refused_before_the_store_sees_it(memory, call):
    """JSON's "\\ud800" decodes to half a character no store can encode: InvalidInputError, not UnicodeEncodeError."""
    memory.add("an existing memory", user_id="u")
    before = _count(memory), memory.get_all("u")
    with pytest.raises(InvalidInputError, match="lone surrogate"):
        call(memory)
    assert (_count(memory), memory.get_all("u")) == before


def test_update_keeps_finite_metadata_exactly(memory):
    item = memory.add("Ava lives in Porto", user_id="u")[0]
    meta = {"score": 1e308, "big": 10**30, "nested": {"list": [0.5, -2]}}
    assert memory.update(item.id, "u", metadata=meta).metadata == meta
    assert memory.get(item.id, "u").metadata == meta


def test_delete_removes_from_the_vectors_and_bm25(memory):
    keep = memory.add("Ava likes tea", user_id="u")[0]
    gone = memory.add("Ava likes coffee", user_id="u")[0]
    memory.delete(gone.id, "u")
    with pytest.raises(ItemNotFoundError):
        memory.get(gone.id, "u", include_archived=True)
    assert gone.id not in [h.item.id for h in memory.search("coffee", "u", k=10)]
    with pytest.raises(ItemNotFoundError):  # the row itself is gone, archived or not
        memory.store.get("u", gone.id, include_archived=True)
    assert [i.id for i in memory.store.list("u", include_archived=True)] == [keep.id]
    # the turn only the deleted item came from is erased with it
    memory.flush_index()
    assert memory.store.counts()["u"] == {"turns": 1, "items": 1, "archived": 0, "pending": 0, "unembedded": 0}
    assert [t.turn_id for t in memory.store.turns("u")] == keep.provenance
    # the vector and BM25 indexes hold the one item left
    assert len(memory.store.search_dense("u", memory.embedder.encode(["Ava likes coffee"])[0], 10, Filters())[0]) == 1
    assert len(memory.store.search_lexical("u", "Ava likes coffee tea", 10, Filters())[0]) == 1
    assert [e.event for e in memory.history(gone.id, "u")] == ["ADD", "DELETE"]
    assert memory.search("tea", "u", k=1)[0].item.id == keep.id
    with pytest.raises(ItemNotFoundError):
        memory.delete(gone.id, "u")


def test_delete_user_erases_everything_of_that_user_only(memory):
    ava = memory.add("Ava's phone is 555-0100", user_id="ava")[0]
    memory.add("Ben's phone is 555-0199", user_id="ben")
    removed = memory.delete_user("ava")
    assert removed == {"items": 1, "turns": 1, "history": 1, "pending": 0, "consolidated": 0, "facts": 0, "ltm_nodes": 0, "ltm_edges": 0,
                       "ltm_facts": 0}
    assert memory.search("phone", "ava", k=5) == [] and memory.get_all("ava") == []
    assert memory.store.history("ava", ava.id) == [] and "ava" not in memory.store.users()
    assert len(memory.search("phone", "ben", k=5)) == 1


def test_capacity_archives_least_retained_and_never_deletes(tmp_path):
    clock = iter(range(10_000, 20_000, 10))
    m = Memory.open(tmp_path, embedder=HashingEmbedder(64), capacity=5)
    m.clock = lambda: float(next(clock))
    first = [m.add(f"old fact {i}", user_id="u", timestamp=1_600_000_000)[0] for i in range(5)]
    m.flush_index()  # "old fact 2" is told apart from the others by its vector
    for _ in range(3):  # first[2] is used often, so it is retained
        assert any(h.item.id == first[2].id for h in m.search("old fact 2", "u", k=1))
    new = m.add([f"new fact {i}" for i in range(3)], user_id="u", timestamp=1_600_000_000)
    active = {i.id for i in m.get_all("u")}
    archived = {i.id for i in m.get_all("u", include_archived=True)} - active
    assert len(active) == 5 and len(archived) == 3
    assert {n.id for n in new} <= active and first[2].id in active
    assert all(m.get(a, "u", include_archived=True).archived for a in archived)
    assert not {h.item.id for h in m.search("old fact", "u", k=20)} & archived
    restored = m.restore(next(iter(archived)), "u")
    assert not restored.archived and restored.id in {h.item.id for h in m.search(restored.text, "u", k=10)}
    m.close()


def test_superseded_items_are_hidden_unless_asked(memory):
    old = memory.add("Ava lives in Porto", user_id="u", timestamp=1_600_000_000)[0]
    new = memory.add("Ava moved to Lisbon", user_id="u", timestamp=1_700_000_000)[0]
    memory.update(old.id, "u", valid_to=1_700_000_000.0, superseded_by=new.id)
    assert old.id not in [h.item.id for h in memory.search("Ava lives", "u", k=5)]
    assert old.id in [h.item.id for h in memory.search("Ava lives", "u", k=5, filters={"include_superseded": True})]


def test_time_window_and_tag_filters(memory):
    memory.add("trip to Rome", user_id="u", timestamp="2023-01-10")
    memory.add("trip to Oslo", user_id="u", timestamp="2023-06-10")
    hits = memory.search("trip", "u", k=5, filters={"time_from": "2023-05-01", "time_to": "2023-12-31"})
    assert [h.item.text for h in hits] == ["user: trip to Oslo"]
    assert memory.search("trip", "u", k=5, filters={"tags": ["nonexistent"]}) == []


def test_build_context_respects_the_budget_and_priorities(memory):
    for i in range(30):
        memory.add(f"memory number {i} about gardening tomatoes and basil", user_id="u", timestamp=1_600_000_000 + i)
    stm = [f"turn {i}: talking about tomatoes" for i in range(10)]
    for budget in (5, 20, 60, 200, 2000):
        ctx = memory.build_context("What do I grow in the garden?", "u", stm=stm, budget=budget, k=10)
        assert ctx.n_tokens <= budget
        assert "What" in ctx.prompt.split("### Question\n")[-1]  # the question is never dropped
    big = memory.build_context("What do I grow?", "u", stm=stm, budget=2000, k=10)
    assert big.stm_turns_kept == 10 and len(big.memories) == 10 and big.dropped_memories == 0
    small = memory.build_context("What do I grow?", "u", stm=stm, budget=60, k=10)
    assert small.stm_turns_kept < 10 and "turn 9" in small.prompt  # the newest STM turns survive
    # without k, Stage 2 fills the budget from its 3K candidates: more than K short memories
    filled = memory.build_context("What do I grow?", "u", budget=2000)
    assert len(filled.memories) > memory.k and filled.n_tokens <= 2000
    assert filled.dropped_memories == 0  # Stage 2 packed the rendered lines: the composer drops nothing


def test_memories_in_scripts_without_spaces_are_found_by_their_words(memory):
    texts = ["我昨天去了北京大学看朋友", "東京で寿司を食べました", "서울에서 친구를 만났어요", "ฉันไปตลาดเมื่อวาน",
             "אני גר בתל אביב", "I went to the market yesterday"]
    for t in texts:
        memory.add(t, user_id="u")
    for query, want in (("北京大学", 0), ("寿司", 1), ("서울 친구", 2), ("ตลาด", 3), ("תל אביב", 4), ("market", 5)):
        hits = memory.search(query, "u", k=1)
        assert hits and hits[0].item.text == f"user: {texts[want]}", query


def test_closing_twice_does_nothing_the_second_time(tmp_path, embedder):
    from lightmem.memory import Memory

    m = Memory.open(tmp_path / "s", embedder=embedder, synchronous="NORMAL", background_index=False)
    m.add("Ava's phone is 555-0100", user_id="ava")
    m.close()
    m.close()  # no error: the store is closed once
    with Memory.open(tmp_path / "s", embedder=embedder, synchronous="NORMAL", background_index=False) as again:
        assert len(again.get_all("ava")) == 1
