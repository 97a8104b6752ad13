"""Fact keys: an offline cycle's SLM-3 facts become extra search keys of the memories they cite, a prompt still
shows the memories' own text, and deleting or rewriting a memory deletes every fact that cites it (the other
memories those facts keyed are embedded again without them). Each test runs on both backends."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from fakes import ScriptedLLM

from lightmem.errors import InvalidInputError
from lightmem.ltm import ConsolidationSpec, LTMOptions
from lightmem.ltm.fact_keys import SLMFactKeyer, plan_rekey
from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.stores import is_server
from lightmem.types import MemoryItem

T0 = 1_680_000_000.0
TURNS = [
    ("Alice", "I finally bought the boat I kept talking about, a red one."),
    ("Alice", "We took it out on the lake with Bob on Sunday."),
    ("Alice", "My sister moved away last spring and I miss her."),
]
# What the scripted SLM-3 says of the memories, by a word of each: (fact, words of the memories it cites).
FACTS = [("Alice owns a red kayak called Zephyrine", ("boat", "lake")), ("Alice's sister lives in Oslo", ("sister",))]


def _respond(prompt: str) -> str:
    """SLM-3's JSON for a fact-key prompt: FACTS citing the ids of the lines that hold their words, one fact
    citing an id the prompt never gave (dropped)."""
    lines = dict(re.findall(r"^(m\d+): (.*)$", prompt, flags=re.M))
    facts = [{"text": text, "sources": [i for i, line in lines.items() if any(w in line for w in words)]}
             for text, words in FACTS]
    facts.append({"text": "Bob is Alice's brother", "sources": ["m99"]})
    return json.dumps({"facts": [f for f in facts if f["sources"]]})


@pytest.fixture(params=["sqlite", "postgres"])
def location(request, tmp_path) -> str:
    return request.getfixturevalue("pg_uri") if request.param == "postgres" else str(tmp_path / "s")


@pytest.fixture
def open_memory(location):
    """Opens a Memory with fact keys on the test's store (``_memory``); closes every one it opened."""
    opened: list[Memory] = []

    def make(**kw) -> Memory:
        opened.append(_memory(location, **kw))
        return opened[-1]

    yield make
    for m in opened:
        m.close()


def _memory(location: str, llm=None, crash_hook=None) -> Memory:
    spec = ConsolidationSpec(ltm=False, sleep_update=False, recursive=False, fact_keys=True)
    ltm = LTMOptions(background=False, routing="mtm_only", consolidation=spec, llm=llm or ScriptedLLM(respond=_respond))
    fast = {} if is_server(location) else {"synchronous": "NORMAL"}
    m = Memory.open(location, embedder=HashingEmbedder(dim=64), selector=Stage1Selector(), ltm=ltm,
                    background_index=False, **fast)
    if crash_hook is not None:
        m.ltm.consolidator.crash_hook = crash_hook
    return m


def _keyed(m: Memory) -> dict[str, MemoryItem]:
    """Alice's memories by a word of their text, after one consolidation."""
    m.add([{"speaker": s, "text": t, "id": f"T{i}"} for i, (s, t) in enumerate(TURNS)], user_id="alice", timestamp=T0)
    m.consolidate("alice")
    items = m.get_all("alice")
    return {w: next(it for it in items if w in it.text) for w in ("boat", "lake", "sister")}


def _facts(location: str) -> list[str]:
    """Every fact row's text in the store (either backend)."""
    if is_server(location):
        import psycopg

        with psycopg.connect(location) as c:
            return [r[0] for r in c.execute("SELECT text FROM item_facts")]
    import sqlite3

    con = sqlite3.connect(Path(location) / "lightmem.sqlite")
    try:
        return [r[0] for r in con.execute("SELECT text FROM item_facts")]
    finally:
        con.close()


def test_a_cycle_keys_memories_by_their_facts_and_the_prompt_shows_their_text(location, open_memory):
    m = open_memory()
    by = _keyed(m)
    assert by["boat"].keys == by["lake"].keys == "Alice owns a red kayak called Zephyrine"
    assert by["sister"].keys == "Alice's sister lives in Oslo"
    assert sorted(_facts(location)) == sorted(f for f, _ in FACTS)  # the fact citing no memory was dropped
    # Found by a word only the facts hold; the vector is the one of text and keys.
    assert _matched(m, "Zephyrine") == {by["boat"].id, by["lake"].id}
    assert np.allclose(_vector(m, by["sister"].id), m.embedder.encode([by["sister"].index_text])[0], atol=1e-6)
    ctx = m.build_context("Where does Alice's sister live?", "alice", budget=300)
    assert "sister moved away" in ctx.prompt and "Oslo" not in ctx.prompt and "Zephyrine" not in ctx.prompt


def _facts_of(m: Memory) -> dict[str, str | None]:
    """Alice's memories' keys by a word of their text (None: no current memory has that word)."""
    items = m.get_all("alice")
    return {w: next((it.keys for it in items if w in it.text), None) for w in ("boat", "lake", "sister")}


def _matched(m: Memory, query: str) -> set[str]:
    """Ids of Alice's memories that ``query`` matches by its words or its vector (a search also returns
    candidates that score nothing)."""
    return {h.item.id for h in m.search(query, "alice", k=5) if h.scores["bm25"] > 0 or h.scores["dense"] > 0}


def _vector(m: Memory, item_id: str) -> np.ndarray:
    """The stored vector of one of Alice's memories (its row, found by searching its own text)."""
    hits = {h.item.id: h for h in m.search(m.get(item_id, "alice").text, "alice", k=10)}
    return m.store.vectors("alice", [int(hits[item_id].row)])[0]


def test_deleting_a_memory_deletes_the_facts_citing_it_and_rekeys_the_others(location, open_memory):
    m = open_memory()
    by = _keyed(m)
    assert m.delete(by["lake"].id, "alice")["facts"] == 1
    boat = m.get(by["boat"].id, "alice")
    assert boat.keys == "" and _facts(location) == ["Alice's sister lives in Oslo"]
    assert np.allclose(_vector(m, boat.id), m.embedder.encode([boat.text])[0], atol=1e-6)
    assert _matched(m, "Zephyrine") == set()  # neither its BM25 terms nor any view keep the fact
    m.close()
    m = open_memory()  # nor does the store, reopened
    assert _matched(m, "Zephyrine") == set() and m.get(by["boat"].id, "alice").keys == ""


def test_a_new_text_drops_the_memorys_facts_and_erasing_the_user_drops_them_all(location, open_memory):
    m = open_memory()
    by = _keyed(m)
    updated = m.update(by["sister"].id, "alice", text="Alice: My sister visits in June.")
    assert updated.keys == "" and m.get(updated.id, "alice").keys == ""
    assert _facts(location) == ["Alice owns a red kayak called Zephyrine"]
    assert _matched(m, "Oslo") == set()
    assert m.delete_user("alice")["facts"] == 1 and _facts(location) == []


@pytest.mark.parametrize("change", ["delete", "update"])
def test_a_memory_changed_while_the_cycle_ran_is_neither_keyed_nor_cited(open_memory, change):
    """The cycle plans its keys without the store's lock; a deletion, or a new text, that lands before its commit
    wins: the facts were written from what the memory said before."""
    victim: dict[str, str] = {}

    def delete_first(stage: str) -> None:
        if stage == "before_commit" and victim:
            if change == "delete":
                m.delete(victim.pop("id"), "alice")
            else:
                m.update(victim.pop("id"), "alice", text="Alice: We stayed home on Sunday.")

    m = open_memory(crash_hook=delete_first)
    m.add([{"speaker": s, "text": t, "id": f"T{i}"} for i, (s, t) in enumerate(TURNS)], user_id="alice",
          timestamp=T0)
    victim["id"] = next(it.id for it in m.get_all("alice") if "lake" in it.text)
    rep = m.consolidate("alice")[0]
    # The kayak fact came from the boat and the lake: it goes with the lake, and the boat keeps no keys.
    assert rep.mtm["skipped"] == 2 and rep.mtm["keyed"] == 1 and rep.mtm["facts"] == 1
    assert _facts_of(m) == {"boat": "", "lake": None, "sister": "Alice's sister lives in Oslo"}
    assert _matched(m, "Zephyrine") == set()


def test_without_encode_the_embedded_store_leaves_the_vector_to_the_indexer_and_postgres_refuses(location, open_memory):
    m = open_memory()
    by = _keyed(m)
    if is_server(location):
        with pytest.raises(InvalidInputError, match="pass encode"):
            m.store.delete("alice", by["lake"].id, T0 + 10)
        assert m.get(by["lake"].id, "alice").text == by["lake"].text and len(_facts(location)) == 2
    else:
        m.store.delete("alice", by["lake"].id, T0 + 10)
        assert m.store.unembedded() == [("alice", by["boat"].id, by["boat"].text)]
        assert _matched(m, "Zephyrine") == set()


def test_the_slm_keyer_cites_only_memories_of_its_window_and_skips_unusable_output():
    items = [MemoryItem(id=f"i{n}", user_id="u", text=f"Alice: {t}", provenance=[f"T{n}"], created_at=T0,
                        event_time=T0 + n, last_access=T0) for n, (_, t) in enumerate(TURNS)]
    llm = ScriptedLLM(respond=_respond)
    facts = SLMFactKeyer(llm, window=2).facts(items)
    assert len(llm.prompts) == 2 and "m1: Alice: I finally bought" in llm.prompts[0]
    # The first window holds boat and lake, the second the sister: each fact cites within its window.
    assert facts == [("Alice owns a red kayak called Zephyrine", ["i0", "i1"]), ("Alice's sister lives in Oslo", ["i2"])]
    assert SLMFactKeyer(ScriptedLLM(["no json here"]), window=8).facts(items) == []
    with pytest.raises(ValueError):
        SLMFactKeyer(llm, window=0)


def test_plan_rekey_appends_new_facts_to_earlier_keys():
    old = MemoryItem(id="a", user_id="u", text="Alice: hi", provenance=["T0"], created_at=T0, event_time=T0,
                     last_access=T0, keys="Alice greets Bob")
    plan = plan_rekey([old], [("Alice likes tea", ["a", "gone"])], lambda texts: np.ones((len(texts), 4)))
    assert list(plan) == ["a"] and plan["a"][:3] == ("Alice: hi", "Alice greets Bob", "Alice greets Bob Alice likes tea")
    assert plan_rekey([old], [("x y z", ["gone"])], lambda texts: np.ones((len(texts), 4))) == {}


def test_fact_keys_need_an_llm_or_a_keyer(tmp_path):
    spec = ConsolidationSpec(ltm=False, sleep_update=False, recursive=False, fact_keys=True)
    with pytest.raises(ValueError, match="fact keys"):
        Memory.open(tmp_path / "s", embedder=HashingEmbedder(dim=64), ltm=LTMOptions(background=False, consolidation=spec))


def test_a_deleted_memorys_facts_leave_no_trace_in_the_store(location, open_memory):
    """The erasure check of tests/test_erasure.py, for a secret that only a fact holds: gone from every file
    (SQLite) and every row (PostgreSQL) once a memory the fact cites is deleted, though another memory it keyed
    stays."""
    from test_erasure import SECRET, _holders

    def respond(prompt: str) -> str:
        ids = re.findall(r"^(m\d+): ", prompt, flags=re.M)
        return json.dumps({"facts": [{"text": f"Alice's bank password is {SECRET}", "sources": ids[:2]}]})

    m = open_memory(llm=ScriptedLLM(respond=respond))
    by = _keyed(m)
    assert SECRET in by["boat"].keys and _holders(location)
    m.delete(by["lake"].id, "alice")
    assert _holders(location) == [] and m.get(by["boat"].id, "alice").keys == ""


def test_an_update_that_keeps_the_text_keeps_the_keys_and_their_vector(location, open_memory):
    m = open_memory()
    by = _keyed(m)
    same = m.update(by["boat"].id, "alice", text=by["boat"].text, metadata={"tag": "boat"})
    assert same.keys == by["boat"].keys and len(_facts(location)) == 2
    assert np.allclose(_vector(m, same.id), m.embedder.encode([by["boat"].index_text])[0], atol=1e-6)


def test_the_annotated_keyer_gives_each_conversations_observations_to_the_memories_of_their_turns():
    from conftest import TINY_LOCOMO

    from experiments.fact_keys.ceiling import AnnotatedFactKeyer

    keyer = AnnotatedFactKeyer(str(TINY_LOCOMO))
    first, second = list(keyer.facts_of)
    item = lambda i, user, turns: MemoryItem(id=i, user_id=user, text="x", provenance=turns, created_at=T0,  # noqa: E731
                                             event_time=T0, last_access=T0)
    facts = keyer.facts([item("a", first, ["D1:1"]), item("b", first, ["D1:2", "D1:3"]), item("c", second, ["D1:9"]),
                         item("d", "nobody", ["D1:1"])])
    assert facts == [("Ava said: Hi Ben! I adopted a", ["a"]), ("Ben said: Congrats! What breed is Biscuit?", ["b"])]


def test_a_schema_4_store_gains_keys_and_a_second_process_sees_them(tmp_path):
    """An embedded store written before fact keys (schema 4: no keys column, a change trigger that ignores it)
    is upgraded in place on open, and a change of keys reaches another open Memory's views."""
    import sqlite3

    location = str(tmp_path / "old")
    _memory(location).close()
    con = sqlite3.connect(Path(location) / "lightmem.sqlite")
    con.executescript("""
        DROP TRIGGER items_changes_update; DROP TABLE item_fact_sources; DROP TABLE item_facts;
        ALTER TABLE items DROP COLUMN keys;
        CREATE TRIGGER items_changes_update
        AFTER UPDATE OF text, embedding, archived, superseded_by, valid_to, event_time, kind, topic, entities ON items
        BEGIN INSERT INTO item_changes (user_id, rid) VALUES (NEW.user_id, NEW.rid); END;
        UPDATE meta SET value = '4' WHERE key = 'schema_version';
    """)
    con.close()
    reader, writer = _memory(location), _memory(location)
    try:
        assert writer.store.info()["schema_version"] == "5"
        writer.add([{"speaker": s, "text": t, "id": f"T{i}"} for i, (s, t) in enumerate(TURNS)], user_id="alice",
                   timestamp=T0)
        assert _matched(reader, "Zephyrine") == set()  # the reader's views are built before the keys exist
        writer.consolidate("alice")
        assert len(_matched(reader, "Zephyrine")) == 2  # replayed from the change log the upgraded trigger wrote
    finally:
        reader.close()
        writer.close()
