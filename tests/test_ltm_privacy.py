"""The LTM is per user unless the operator asks otherwise, and ``delete_user`` reaches it.

The attack this guards against (found on main): with LTM on, a user's facts were consolidated, the
items and then the user deleted, and a search by another user with no items of their own returned
``bank password: My bank password is [PERSON] and my account is at Glimmerbank`` and ``I was
diagnosed with Frobnitz syndrome last year at Saint Plumbus hospital.``. Each test runs on both
backends: the embedded SQLite store (its file bytes are searched) and PostgreSQL (its rows are).
"""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from lightmem.errors import InvalidInputError
from lightmem.ltm import ConsolidationSpec, LTMOptions
from lightmem.ltm.deidentify import Deidentifier
from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.stores import is_server
from lightmem.stores.rows import fact_digest, shared_erasure
from lightmem.types import ItemKind

T0 = 1_680_000_000.0
ALICE = [  # the attacker's corpus: a credential, an account, a diagnosis, a place
    "My bank password is hunter2 and my account is at Glimmerbank",
    "I was diagnosed with Frobnitz syndrome last year at Saint Plumbus hospital.",
]
UNIQUE = ("glimmerbank", "frobnitz", "plumbus", "hunter2")  # words only Alice ever wrote


def _memory(location, scope: str = "user", nlp=None) -> Memory:
    ltm = LTMOptions(background=False, scope=scope, nlp=nlp,
                     consolidation=ConsolidationSpec(sleep_update=False, recursive=False))
    fast = {} if is_server(location) else {"synchronous": "NORMAL"}
    return Memory.open(location, embedder=HashingEmbedder(dim=64), selector=Stage1Selector(), ltm=ltm, **fast)


@pytest.fixture(params=["sqlite", "postgres"])
def location(request, tmp_path) -> str:
    """A store folder, or a fresh PostgreSQL database (conftest.py: pg_uri)."""
    return request.getfixturevalue("pg_uri") if request.param == "postgres" else str(tmp_path / "s")


@pytest.fixture(scope="module")
def nlp():
    from lightmem.models.registry import ModelRegistry

    return ModelRegistry().spacy()


def _say(m: Memory, user: str, texts: list[str], speaker: str, prefix: str = "T") -> None:
    m.add([{"speaker": speaker, "text": t, "id": f"{prefix}{i}"} for i, t in enumerate(texts)], user_id=user, timestamp=T0)
    m.flush_index()  # a cycle selects items once they have their vectors


def _holders(location: str, words=UNIQUE) -> list[str]:
    """Where any of ``words`` can still be read, case-insensitively: a store file (SQLite: database, WAL,
    anything beside them) or a table with a row that holds it (PostgreSQL)."""
    if is_server(location):
        import psycopg

        with psycopg.connect(location) as c:
            tables = [r[0] for r in c.execute("SELECT table_name FROM information_schema.tables "
                                              "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'")]
            return [f"{t}:{w}" for t in tables for w in words
                    if c.execute(f'SELECT count(*) FROM "{t}" AS r WHERE r::text ILIKE %s', (f"%{w}%",)).fetchone()[0]]
    return [f"{p.name}:{w}" for p in Path(location).iterdir() if p.is_file() for w in words
            if w.encode() in p.read_bytes().lower()]


def _rows(location: str, sql: str) -> list[tuple]:
    """Rows of a query on the store's database (either backend; ``?`` placeholders are not used)."""
    if is_server(location):
        import psycopg

        with psycopg.connect(location) as c:
            return c.execute(sql).fetchall()
    con = sqlite3.connect(Path(location) / "lightmem.sqlite")
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _knowledge(m: Memory, query: str, user: str) -> list[str]:
    return [h.item.text for h in m.search(query, user, k=10) if h.item.kind is ItemKind.KNOWLEDGE]


# -- the attack, with the default (per-user) LTM ---------------------------------------------------------
def test_another_user_with_no_items_gets_nothing_of_a_users_ltm_and_delete_user_erases_it(location, nlp):
    m = _memory(location, nlp=nlp)
    other = _memory(location, nlp=nlp)  # another process's view of the same store
    try:
        _say(m, "alice", ALICE, "Alice")
        assert [r.cycle for r in m.consolidate("alice")] == [1]
        assert _knowledge(m, "bank password Glimmerbank", "alice")  # the owner's LTM works
        assert _knowledge(other, "Frobnitz syndrome", "alice")
        for it in m.get_all("alice"):
            m.delete(it.id, "alice")
        for mem in (m, other):  # bob has no items at all: nothing comes back, from either tier
            for q in ("bank password Glimmerbank", "Frobnitz syndrome diagnosis hospital", "password", "diagnosed"):
                assert mem.search(q, "bob", k=10) == []
        removed = m.delete_user("alice")
        assert removed["ltm_nodes"] > 0 and removed["ltm_edges"] >= 0 and removed["ltm_facts"] == 0
        assert m.ltm.graph.nodes(include_dropped=True) == [] and m.ltm.graph.edges(include_dropped=True) == []
        assert _knowledge(m, "bank password Glimmerbank", "alice") == []
        assert _knowledge(other, "Frobnitz syndrome", "alice") == []  # the other process sees the erasure
        assert _rows(location, "SELECT COUNT(*) FROM ltm_nodes WHERE scope = 'alice'") == [(0,)]
        assert _holders(location) == []
    finally:
        other.close()
        m.close()
    assert _holders(location) == []


def test_per_user_search_never_reads_another_users_graph(location):
    m = _memory(location)
    try:
        _say(m, "alice", ALICE, "Alice")
        _say(m, "bob", ["The Chess Club at Glimmerbank meets on Fridays."], "Bob")
        m.consolidate()
        qvec = m.embedder.encode(["Glimmerbank"], is_query=True)[0]
        for user, own in (("alice", "password"), ("bob", "chess")):
            nodes = m.ltm.graph.search(qvec, "Glimmerbank", 20, hops=2, user_id=user)
            texts = " ".join(text.lower() for _, _, text in nodes)
            assert nodes and own in texts
            assert ("chess" in texts) == (user == "bob") and ("password" in texts) == (user == "alice")
        assert _knowledge(m, "Glimmerbank", "carol") == []  # a user with no items
        m.delete_user("bob")
        assert any("password" in t.lower() for t in _knowledge(m, "Glimmerbank password", "alice"))
        assert not [n for n in m.store.graph.nodes(include_dropped=True) if "chess" in n.key]
    finally:
        m.close()


# -- the shared graph: an explicit option, erasable per contributor --------------------------------------
def test_shared_graph_is_de_identified_and_delete_user_removes_what_only_that_user_said(location):
    m = _memory(location, scope="shared")
    other = _memory(location, scope="shared")
    try:
        _say(m, "alice", [*ALICE, "The Pottery Class on Mondays is relaxing.",
                          "The Pottery Class is funded by Glimmerbank donors."], "Alice")
        _say(m, "bob", ["The Pottery Class on Mondays is relaxing.", "The Chess Club meets on Fridays."], "Bob")
        m.consolidate()
        shared = " ".join(_knowledge(other, "bank password Glimmerbank", "carol"))
        assert "Glimmerbank" in shared and "hunter2" not in shared and "[SECRET]" in shared  # what sharing exposes
        pottery = m.store.graph.node_by_key("pottery class", "")
        assert pottery.evidence == 3 and len(pottery.facts) == 2
        removed = m.delete_user("alice")
        assert removed["ltm_nodes"] > 0 and removed["ltm_facts"] == 1  # the funding sentence, from a node bob keeps
        pottery = m.store.graph.node_by_key("pottery class", "")
        assert pottery.facts == ["The Pottery Class on Mondays is relaxing."] and pottery.evidence == 1
        assert m.store.graph.node_by_key("chess club", "") is not None  # bob's own knowledge stays
        assert _rows(location, "SELECT COUNT(*) FROM ltm_sources WHERE user_id = 'alice'") == [(0,)]
        assert _rows(location, "SELECT COUNT(*) FROM ltm_edge_sources WHERE user_id = 'alice'") == [(0,)]
        for mem in (m, other):
            assert not any(w in " ".join(_knowledge(mem, "Glimmerbank Frobnitz password", "carol")).lower()
                           for w in UNIQUE)
            assert any("Pottery Class" in t for t in _knowledge(mem, "Pottery Class", "carol"))
        assert _holders(location) == []
        m.delete_user("bob")  # the last contributor: nothing of the graph is left
        assert m.ltm.graph.nodes(include_dropped=True) == []
        assert _rows(location, "SELECT COUNT(*) FROM ltm_sources") == [(0,)]
    finally:
        other.close()
        m.close()
    assert _holders(location) == []


def test_a_user_deleted_during_a_cycle_teaches_the_ltm_nothing(location):
    m = _memory(location)
    try:
        _say(m, "alice", ALICE, "Alice")
        m.ltm.consolidator.crash_hook = lambda point: m.delete_user("alice") if point == "before_commit" else None
        rep = m.ltm.consolidator.run("alice")
        assert rep.cycle == 1 and rep.graph == {}
        assert m.ltm_stats()["nodes"] == 0 and _holders(location) == []
    finally:
        m.close()


def test_the_scope_option_is_checked(tmp_path):
    with pytest.raises(InvalidInputError, match="'user'.*'shared'"):
        _memory(str(tmp_path / "s"), scope="everyone")
    m = _memory(str(tmp_path / "s"))
    try:
        with pytest.raises(InvalidInputError, match="user"):
            m.ltm.graph.search(m.embedder.encode(["x"])[0], "x", 3, user_id="")
    finally:
        m.close()


# -- stores written before scopes --------------------------------------------------------------------------
def _unscope(location: str) -> None:
    """Turn a fresh store's graph back into the layout before scopes (SQLite schema 3, PostgreSQL 1)."""
    if is_server(location):
        import psycopg

        with psycopg.connect(location, autocommit=True) as c:
            c.execute("DROP TABLE ltm_sources, ltm_edge_sources")
            c.execute("ALTER TABLE ltm_nodes DROP COLUMN scope")  # drops ltm_nodes_scope_key with it
            c.execute("ALTER TABLE ltm_nodes ADD CONSTRAINT ltm_nodes_key_key UNIQUE (key)")
            c.execute("ALTER TABLE ltm_edges DROP COLUMN scope")
            c.execute("DELETE FROM schema_version WHERE version > 1")
            c.execute("INSERT INTO schema_version (version) VALUES (1) ON CONFLICT DO NOTHING")
        return
    con = sqlite3.connect(Path(location) / "lightmem.sqlite")
    cols = "id, key, kind, text, facts, confidence, evidence, first_seen, last_seen, last_cycle, active, embedding"
    con.executescript(f"""
        DROP TABLE ltm_sources; DROP TABLE ltm_edge_sources; DROP INDEX ltm_edges_scope; DROP INDEX ltm_nodes_scope_key;
        ALTER TABLE ltm_edges DROP COLUMN scope;
        CREATE TABLE old_nodes (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL UNIQUE, kind TEXT NOT NULL,
          text TEXT NOT NULL, facts TEXT NOT NULL DEFAULT '[]', confidence REAL NOT NULL, evidence INTEGER NOT NULL,
          first_seen REAL NOT NULL, last_seen REAL NOT NULL, last_cycle INTEGER NOT NULL,
          active INTEGER NOT NULL DEFAULT 1, embedding BLOB NOT NULL);
        INSERT INTO old_nodes ({cols}) SELECT {cols} FROM ltm_nodes;
        DROP TABLE ltm_nodes; ALTER TABLE old_nodes RENAME TO ltm_nodes;
        UPDATE meta SET value = '3' WHERE key = 'schema_version';
    """)
    con.close()


def test_a_graph_made_before_scopes_is_kept_and_only_the_shared_option_reads_it(location):
    m = _memory(location, scope="shared")
    _say(m, "alice", ["The Robotics Team built a rover at Glimmerbank."], "Alice")
    m.consolidate()
    before = {(n.key, n.evidence, tuple(n.facts)) for n in m.ltm.graph.nodes(include_dropped=True)}
    m.close()
    _unscope(location)
    m = _memory(location)  # the per-user default: the old graph is out of every user's reach
    try:
        assert m.store.info()["schema_version"] == "5"
        assert {(n.key, n.evidence, tuple(n.facts)) for n in m.store.graph.nodes(True, scope="")} == before
        assert _knowledge(m, "Robotics Team rover", "alice") == [] and _knowledge(m, "rover", "bob") == []
        _say(m, "bob", ["The Robotics Team won the county fair."], "Bob", prefix="B")
        m.consolidate("bob")  # bob's knowledge goes to his own partition, the same key beside the old one
        assert m.store.graph.node_by_key("robotics team", "bob") is not None
        assert len(m.store.graph.nodes(True, scope="")) == len(before)
    finally:
        m.close()
    shared = _memory(location, scope="shared")  # the operator opts in
    try:
        assert any("rover" in t for t in _knowledge(shared, "Robotics Team rover", "carol"))
    finally:
        shared.close()


# -- de-identification of the shared graph, measured -----------------------------------------------------
# (kind, text, secrets, masked): whether the rules remove every secret. The first block is what the rules
# were written against; the second was written apart and not tuned on. ``lightmem.ltm.deidentify``'s
# docstring reports these counts.
DEID_CORPUS = [
    ("name", "Priya Raghunathan told me she is moving.", ["Priya", "Raghunathan"], False),
    ("name", "I had lunch with Tomasz Wierzbicki yesterday.", ["Tomasz", "Wierzbicki"], False),
    ("name", "My neighbour Dr. Okafor fixed the fence.", ["Okafor"], True),
    ("number", "My PIN is 4821.", ["4821"], True),
    ("number", "My passport number is X1234567.", ["X1234567"], True),
    ("number", "My social security number is 078-05-1120.", ["078-05-1120"], True),
    ("number", "My salary is 87,500 a year.", ["87,500"], True),
    ("account", "My bank password is hunter2 and my account is at Glimmerbank", ["hunter2"], True),
    ("account", "My account number is 12345678 at Glimmerbank.", ["12345678"], True),
    ("account", "My IBAN is GB29 NWBK 6016 1331 9268 19.", ["GB29", "NWBK", "6016 1331"], True),
    ("account", "Pay with my card 4111 1111 1111 1111 please.", ["4111"], True),
    ("account", "The wifi passcode is tulip-77-moon.", ["tulip-77-moon"], True),
    ("diagnosis", "I was diagnosed with Frobnitz syndrome last year at Saint Plumbus hospital.", ["Frobnitz"], True),
    ("diagnosis", "My doctor says I have type 2 diabetes.", ["diabetes"], True),
    ("diagnosis", "I am being treated for bipolar disorder.", ["bipolar"], True),
    ("place", "I live in Little Wimbledon near the old mill.", ["Little Wimbledon"], False),
    ("place", "We moved to 17 Larkspur Lane last spring.", ["Larkspur"], True),
    ("place", "My kids go to Hillcrest Elementary in Dunmore.", ["Hillcrest", "Dunmore"], False),
    # written apart
    ("name", "Svetlana Ivanova is my landlord.", ["Svetlana", "Ivanova"], False),
    ("name", "Met Mr Haddad at the gym.", ["Haddad"], True),
    ("name", "My coworker Benedikt keeps stealing my stapler.", ["Benedikt"], False),
    ("number", "My PIN code: 0931", ["0931"], True),
    ("number", "Her date of birth is 14/03/1987.", ["14/03/1987"], False),
    ("number", "I earn $120,000 now.", ["120,000"], True),
    ("number", "The locker combination is 12-34-56.", ["12-34-56"], False),
    ("account", "The routing number 021000021 is on the cheque.", ["021000021"], True),
    ("account", "My Visa ends in 4242.", ["4242"], False),
    ("account", "Account: 55501234.", ["55501234"], True),
    ("account", "My login code is ZX-99.", ["ZX-99"], True),
    ("diagnosis", "She suffers from chronic migraines.", ["migraine"], True),
    ("diagnosis", "I take lithium for my condition.", ["lithium"], False),
    ("diagnosis", "My son has autism.", ["autism"], False),
    ("diagnosis", "I tested positive for COVID last week.", ["COVID"], True),
    ("place", "I work at the Frobozz Tower in Quahog.", ["Frobozz", "Quahog"], False),
    ("place", "We grew up on Maple Court in Ridgefield.", ["Maple Court", "Ridgefield"], False),
]
ORDINARY = ["We ran 5 km in 2023 with 1,000 people.", "The pottery class is a creative hobby.",
            "I have a card from my grandma.", "The account was closed in May.", "Version 3.11.2 fixed the bug."]


@pytest.mark.parametrize("kind, text, secrets, masked", DEID_CORPUS, ids=[f"{k}-{i}" for i, (k, *_) in enumerate(DEID_CORPUS)])
def test_deidentification_removes_what_it_claims_and_what_remains_is_known(kind, text, secrets, masked):
    out = Deidentifier(names=["Alice"], user_ids=["alice"]).scrub(text)
    assert (not [s for s in secrets if s.lower() in out.lower()]) is masked, out


def test_ordinary_text_is_left_alone():
    deid = Deidentifier()
    assert [deid.scrub(t) for t in ORDINARY] == ORDINARY


def test_shared_erasure_rules():
    d = fact_digest
    sources = [(1, "a", d("x"), 2), (2, "a", d("y"), 1), (2, "b", d("z"), 1), (3, "a", d("w"), 1), (3, "b", d("w"), 1)]
    nodes = {1: (["x"], 2), 2: (["y", "z"], 2), 3: (["w"], 2)}
    edges = {(1, 2, "RelatedTo"): 1, (2, 3, "IsA"): 3}
    e_sources = [(1, 2, "RelatedTo", "a", 1), (2, 3, "IsA", "a", 1), (2, 3, "IsA", "b", 2)]
    plan = shared_erasure("a", sources, nodes, e_sources, edges)
    assert plan.nodes == [1]  # only a supported it
    assert plan.kept == {2: (["z"], 1), 3: (["w"], 1)}  # y was a's alone; w was said by b too
    assert plan.facts_removed == 1
    assert plan.edges == [(1, 2, "RelatedTo")] and plan.edge_evidence == {(2, 3, "IsA"): 2}
