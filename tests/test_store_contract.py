"""The store contract: what every ``MemoryStore`` backend must do, checked through its public methods only.

A new backend is one entry in ``BACKENDS`` plus a branch of ``_open`` that opens it (fresh per test,
the same one again on reopen). The PostgreSQL backend runs on a server the tests start themselves
(``pg_server`` in conftest.py), a fresh database per test.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pytest

from lightmem.errors import InvalidInputError, ItemNotFoundError, StoreError
from lightmem.stores.base import GraphTransaction, MemoryStore, OfflineChanges
from lightmem.types import EdgeType, Filters, ItemKind, MemoryItem, NodeKind, Turn

BACKENDS = ["sqlite", "postgres"]
DIM = 16
T0 = 1_700_000_000.0
DAY = 86_400.0


def _open(backend: str, where, dim: int = DIM, capacity: int = 10_000) -> MemoryStore:
    if backend == "sqlite":
        from lightmem.stores.embedded.store import SQLiteStore

        return SQLiteStore(where, dim=dim, embedder="contract-test", capacity=capacity, synchronous="NORMAL")
    if backend == "postgres":
        from lightmem.stores.postgres.store import PostgresStore

        return PostgresStore(where, dim=dim, embedder="contract-test", capacity=capacity)
    raise ValueError(f"no such backend {backend!r}")


@pytest.fixture(params=BACKENDS)
def open_store(request, tmp_path) -> Iterator[Callable[..., MemoryStore]]:
    """Opens the test's store (again after a close: same location); closes what is left open."""
    opened: list[MemoryStore] = []
    where = request.getfixturevalue("pg_uri") if request.param == "postgres" else tmp_path / "store"

    def make(**kw) -> MemoryStore:
        store = _open(request.param, where, **kw)
        opened.append(store)
        return store

    yield make
    for s in opened:
        try:
            s.close()
        except Exception:  # closed by the test already
            pass


@pytest.fixture
def store(open_store) -> MemoryStore:
    return open_store()


def _vec(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
    return v / np.linalg.norm(v)


@dataclass
class Written:
    turns: list[Turn]
    items: list[MemoryItem]
    vectors: np.ndarray


def _write(store: MemoryStore, user: str, texts: list[str], seed: int = 0, t: float = T0, prefix: str = "t",
           pending: list[str] | None = None, **item_fields) -> Written:
    turns = [Turn(f"{prefix}{i}", "user", x, t + i) for i, x in enumerate(texts)]
    items = [MemoryItem(id=store.new_id(), user_id=user, text=x, provenance=[f"{prefix}{i}"], created_at=t + i,
                        event_time=t + i, last_access=t + i, n_tokens=len(x.split()), **item_fields)
             for i, x in enumerate(texts)]
    vecs = np.stack([_vec(seed + i) for i in range(len(texts))])
    written = store.write(user, turns, items, vecs, t + len(texts), pending=pending)
    return Written(turns, written, vecs)


def _rid(store: MemoryStore, user: str, vec: np.ndarray, item_id: str) -> int:
    """An item's row id, found the way callers find it: by searching."""
    ids, _ = store.search_dense(user, vec, 50, Filters(include_superseded=True))
    found = [r for r, it in store.fetch(user, [int(i) for i in ids]).items() if it.id == item_id]
    assert found, f"{item_id} not found by search"
    return found[0]


def _snapshot(store: MemoryStore, user: str) -> dict:
    """Everything a user can observe of a store."""
    return {"items": store.list(user, include_archived=True), "turns": store.turns(user),
            "pending": store.pending_turns(user), "users": store.users(), "counts": store.counts(),
            "state": store.consolidation_state(user), "graph": store.graph.stats(), "nodes": store.graph.nodes(True),
            "edges": store.graph.edges(True), "size": store.size(user)}


# -- write / get / list / update / delete ---------------------------------------------------------------
def test_the_backend_implements_the_protocol(store):
    assert isinstance(store, MemoryStore)


def test_the_protocol_is_four_parts_and_the_backend_is_each(store):
    import inspect

    from lightmem.stores.base import ItemStore, OfflineStore, SearchIndex, StoreAdmin

    parts = (StoreAdmin, ItemStore, SearchIndex, OfflineStore)
    assert all(isinstance(store, part) for part in parts)
    own = [{n for n, _ in inspect.getmembers(part) if not n.startswith("_")} - {"register"} for part in parts]
    assert sum(len(o) for o in own) == len(set().union(*own))  # no method in two parts
    assert set().union(*own) >= {"write", "search_dense", "commit_offline", "users", "lock", "graph"}


def test_write_then_read_back(store):
    w = _write(store, "u", ["alpha beta", "gamma delta", "epsilon"], topic="greek", entities=["Ava"])
    assert [it.text for it in w.items] == ["alpha beta", "gamma delta", "epsilon"]
    assert store.get("u", w.items[1].id) == w.items[1]
    assert store.list("u") == w.items
    assert store.list("u", limit=2, offset=1) == w.items[1:]
    assert [t.turn_id for t in store.turns("u")] == ["t0", "t1", "t2"]
    assert store.known_turns("u", ["t0", "t2", "t9"]) == {"t0", "t2"}
    assert store.size("u") == 3 and store.users() == ["u"]
    assert store.counts() == {"u": {"turns": 3, "items": 3, "archived": 0, "pending": 0, "unembedded": 0}}
    assert [e.event for e in store.history("u", w.items[0].id)] == ["ADD"]
    assert store.info()["dim"] == str(DIM) and store.info()["embedder"] == "contract-test"
    assert store.info()["schema_version"]


def test_a_rewritten_turn_is_skipped_with_its_items(store):
    _write(store, "u", ["alpha", "beta"])
    again = _write(store, "u", ["alpha", "beta", "gamma"])
    assert [it.text for it in again.items] == ["gamma"]
    assert [it.text for it in store.list("u")] == ["alpha", "beta", "gamma"] and len(store.turns("u")) == 3


def test_pending_turns_are_replaced_by_each_write(store):
    store.write("u", [Turn("a", "user", "first", T0), Turn("b", "user", "second", T0 + 1)], [],
                np.zeros((0, DIM), np.float32), T0, pending=["a", "b"])
    assert [t.text for t in store.pending_turns("u")] == ["first", "second"]
    store.write("u", [], [], np.zeros((0, DIM), np.float32), T0, pending=["b"])
    assert [t.turn_id for t in store.pending_turns("u")] == ["b"]
    assert store.counts()["u"]["pending"] == 1


def test_bad_writes_are_refused(store):
    w = _write(store, "u", ["alpha"])
    item = w.items[0]
    with pytest.raises(InvalidInputError):
        store.write("u", [], [item], np.zeros((2, DIM), np.float32), T0)
    with pytest.raises(InvalidInputError):
        store.write("u", [], [item], np.zeros((1, DIM + 1), np.float32), T0)


def test_update_changes_fields_and_keeps_history(store):
    w = _write(store, "u", ["the cat sleeps", "a dog barks"])
    target = w.items[0]
    new = store.update("u", target.id, T0 + 10, vector=_vec(99), text="the cat wakes up", utility=2.0, keep_history=True)
    assert new.text == "the cat wakes up" and new.utility == 2.0
    assert store.get("u", target.id) == new
    ids, cos = store.search_dense("u", _vec(99), 1, Filters())
    assert store.fetch("u", ids.tolist())[int(ids[0])].id == target.id and cos[0] == pytest.approx(1.0, abs=1e-5)
    assert int(store.search_lexical("u", "wakes", 1, Filters())[0][0]) == int(ids[0])
    events = store.history("u", target.id)
    assert [(e.event, e.old_text, e.new_text) for e in events][-1] == ("UPDATE", "the cat sleeps", "the cat wakes up")
    store.update("u", target.id, T0 + 11, vector=_vec(98), text="the cat is out")  # no history asked: no text kept
    assert [(e.event, e.old_text, e.new_text) for e in store.history("u", target.id)] == [
        ("ADD", None, None), ("UPDATE", None, None), ("UPDATE", None, None)]
    with pytest.raises(InvalidInputError):
        store.update("u", target.id, T0, text="no vector")
    with pytest.raises(InvalidInputError):
        store.update("u", target.id, T0, archived=True)  # archiving has its own method
    with pytest.raises(ItemNotFoundError):
        store.update("u", "missing", T0, utility=1.0)


def test_delete_and_delete_user(store):
    w = _write(store, "u", ["alpha", "beta"])
    _write(store, "v", ["alpha"], seed=50)
    gone = w.items[0]
    assert store.delete("u", gone.id, T0 + 5) == {"items": 1, "turns": 1, "facts": 0}  # its turn t0: cited by no other item
    with pytest.raises(ItemNotFoundError):
        store.get("u", gone.id, include_archived=True)
    with pytest.raises(ItemNotFoundError):
        store.delete("u", gone.id, T0 + 6)
    ids, _ = store.search_dense("u", w.vectors[0], 5, Filters())
    assert gone.id not in {it.id for it in store.fetch("u", ids.tolist()).values()}
    assert [(e.event, e.old_text, e.new_text) for e in store.history("u", gone.id)] == [("ADD", None, None),
                                                                                      ("DELETE", None, None)]
    assert [t.turn_id for t in store.turns("u")] == ["t1"]
    removed = store.delete_user("u")
    assert removed["items"] == 1 and removed["turns"] == 1
    assert store.users() == ["v"] and store.list("u", include_archived=True) == [] and store.size("u") == 0
    assert store.turns("u") == [] and store.history("u", w.items[1].id) == []
    assert [it.text for it in store.list("v")] == ["alpha"]


# -- per-user isolation ---------------------------------------------------------------------------
def test_a_user_never_sees_another_users_rows(store):
    a = _write(store, "a", ["shared words here", "more shared words"], seed=0, pending=["t1"])
    b = _write(store, "b", ["shared words here"], seed=0)  # same text, same vector
    a_rids = {_rid(store, "a", v, it.id) for it, v in zip(a.items, a.vectors)}
    b_rid = _rid(store, "b", b.vectors[0], b.items[0].id)
    assert b_rid not in a_rids
    for user, mine, other_item, other_rids in (("a", a_rids, b.items[0], {b_rid}), ("b", {b_rid}, a.items[0], a_rids)):
        ids, _ = store.search_dense(user, a.vectors[0], 10, Filters(include_superseded=True))
        assert set(ids.tolist()) <= mine
        assert set(store.search_lexical(user, "shared words", 10, Filters())[0].tolist()) <= mine
        assert store.fetch(user, sorted(other_rids)) == {}
        assert store.indexed(user, sorted(other_rids)) == set()
        assert all(it.user_id == user for it in store.list(user, include_archived=True))
        assert all(it.user_id == user for _, it, _ in store.consolidation_candidates(user, 10))
        with pytest.raises(ItemNotFoundError):
            store.get(user, other_item.id, include_archived=True)
        with pytest.raises(ItemNotFoundError):
            store.update(user, other_item.id, T0, utility=0.5)
        with pytest.raises(ItemNotFoundError):
            store.set_archived(user, other_item.id, True, T0)
        with pytest.raises(ItemNotFoundError):
            store.delete(user, other_item.id, T0)
        assert store.history(user, other_item.id) == []
    assert store.known_turns("b", ["t0", "t1"]) == {"t0"}  # a's t1 is not b's
    assert [t.turn_id for t in store.pending_turns("a")] == ["t1"] and store.pending_turns("b") == []
    store.touch("b", sorted(a_rids), T0 + 100)  # row ids of someone else count nothing
    store.flush()
    assert all(it.access_count == 0 for it in store.list("a"))
    store.delete_user("b")
    assert store.list("a") == a.items and [t.turn_id for t in store.turns("a")] == ["t0", "t1"]


# -- archived rows ------------------------------------------------------------------------------------
def test_archived_items_leave_search_and_come_back(store):
    w = _write(store, "u", ["orchids need shade", "cacti need sun"])
    rid = _rid(store, "u", w.vectors[0], w.items[0].id)
    archived = store.set_archived("u", w.items[0].id, True, T0 + 10)
    assert archived.archived and store.size("u") == 1
    assert [it.id for it in store.list("u")] == [w.items[1].id]
    assert len(store.list("u", include_archived=True)) == 2
    with pytest.raises(ItemNotFoundError):
        store.get("u", w.items[0].id)
    assert store.get("u", w.items[0].id, include_archived=True).archived
    assert rid not in store.search_dense("u", w.vectors[0], 5, Filters())[0].tolist()
    assert rid not in store.search_lexical("u", "orchids", 5, Filters())[0].tolist()
    assert store.indexed("u", [rid]) == set()
    assert store.counts()["u"] == {"turns": 2, "items": 1, "archived": 1, "pending": 0, "unembedded": 0}
    store.set_archived("u", w.items[0].id, False, T0 + 20)
    assert rid in store.search_dense("u", w.vectors[0], 5, Filters())[0].tolist()
    assert [e.event for e in store.history("u", w.items[0].id)] == ["ADD", "ARCHIVE", "RESTORE"]


def test_capacity_archives_the_least_retained(open_store):
    store = open_store(capacity=3)
    w = _write(store, "u", [f"note {i}" for i in range(5)])
    assert store.size("u") == 3
    assert len(store.list("u")) == 3 and len(store.list("u", include_archived=True)) == 5
    assert {it.id for it in store.list("u")} == {it.id for it in w.items[2:]}  # the oldest go first


def test_a_user_past_a_large_capacity_is_archived_to_1_percent_under_it(open_store):
    """So that the writes after it archive nothing (each archiving reads all the user's active rows)."""
    store = open_store(capacity=200)
    _write(store, "u", [f"note {i}" for i in range(201)])
    assert store.size("u") == 198 and len(store.list("u", include_archived=True)) == 201
    _write(store, "u", ["one more", "and another"], seed=7, prefix="later")
    assert store.size("u") == 200  # within capacity: nothing archived, no read of the user's rows
    _write(store, "u", ["past it again"], seed=8, prefix="last")
    assert store.size("u") == 198


# -- search -----------------------------------------------------------------------------------------
def test_search_dense_lexical_cosine_fetch_signals(store):
    w = _write(store, "u", ["Ava moved to Lisbon", "Ava likes green tea", "the weather is mild"],
               topic="life", entities=["Ava"])
    rids = [_rid(store, "u", v, it.id) for it, v in zip(w.items, w.vectors)]
    ids, cos = store.search_dense("u", w.vectors[1], 3, Filters())
    assert int(ids[0]) == rids[1] and cos[0] == pytest.approx(1.0, abs=1e-5)
    assert list(cos) == sorted(cos, reverse=True)
    assert np.allclose(store.cosine("u", w.vectors[1], rids), w.vectors @ w.vectors[1], atol=1e-5)
    assert np.allclose(store.vectors("u", rids), w.vectors, atol=1e-6)
    lex_ids, scores, bm25_of = store.search_lexical("u", "green tea", 3, Filters())
    assert int(lex_ids[0]) == rids[1] and scores[0] > 0
    looked = bm25_of(rids)
    assert looked[1] == pytest.approx(scores[0]) and looked[2] == 0
    assert {r: it.id for r, it in store.fetch("u", rids).items()} == dict(zip(rids, [it.id for it in w.items]))
    times, tags = store.signals("u", rids)
    assert times.tolist() == [it.event_time for it in w.items] and tags[0] == frozenset({"ava", "life"})
    assert store.indexed("u", [*rids, 10**9]) == set(rids)


def test_search_filters(store):
    w = _write(store, "u", ["one", "two", "three"], seed=10)
    _write(store, "u", ["four"], seed=20, t=T0 + 10 * DAY, prefix="late", kind=ItemKind.ABSTRACT, topic="garden")
    q = w.vectors[0]
    texts = lambda f: {store.fetch("u", store.search_dense("u", q, 10, f)[0].tolist())[r].text  # noqa: E731
                       for r in store.search_dense("u", q, 10, f)[0].tolist()}
    assert texts(Filters()) == {"one", "two", "three", "four"}
    assert texts(Filters(time_from=T0 + DAY)) == {"four"}
    assert texts(Filters(time_to=T0 + 1)) == {"one", "two"}
    assert texts(Filters(kinds=(ItemKind.ABSTRACT,))) == {"four"}
    assert texts(Filters(tags=("Garden",))) == {"four"}
    assert set(store.search_lexical("u", "four one", 10, Filters(kinds=(ItemKind.EPISODIC,)))[0].tolist()) == {
        _rid(store, "u", q, w.items[0].id)}
    store.update("u", w.items[1].id, T0 + 50, superseded_by=w.items[2].id)
    assert texts(Filters()) == {"one", "three", "four"}
    assert texts(Filters(include_superseded=True)) == {"one", "two", "three", "four"}


# -- access statistics ---------------------------------------------------------------------------------
def test_touch_counts_after_flush_and_survives_reopen(open_store):
    store = open_store()
    w = _write(store, "u", ["alpha", "beta"])
    rid = _rid(store, "u", w.vectors[0], w.items[0].id)
    store.touch("u", [rid], T0 + 100)
    store.touch("u", [rid], T0 + 200)
    store.flush()
    item = store.get("u", w.items[0].id)
    assert item.access_count == 2 and item.last_access == T0 + 200
    assert store.get("u", w.items[1].id).access_count == 0
    store.touch("u", [rid], T0 + 300)
    store.close()  # buffered touches are written on close
    again = open_store()
    assert again.get("u", w.items[0].id).access_count == 3


# -- transactions ------------------------------------------------------------------------------------
def test_a_failed_write_leaves_the_store_unchanged(store):
    _write(store, "u", ["alpha"])
    before = _snapshot(store, "u")
    stranger = MemoryItem(id=store.new_id(), user_id="someone else", text="x", provenance=["new"], created_at=T0,
                          event_time=T0, last_access=T0)
    with pytest.raises(InvalidInputError):
        store.write("u", [Turn("new", "user", "x", T0)], [stranger], _vec(5)[None, :], T0, pending=["new"])
    assert _snapshot(store, "u") == before and store.known_turns("u", ["new"]) == set()


def test_reopen_keeps_everything(open_store):
    store = open_store()
    w = _write(store, "u", ["alpha beta", "gamma"], pending=["t1"])
    store.update("u", w.items[1].id, T0 + 5, utility=3.0)
    _commit_cycle(store, "u", w)
    before = _snapshot(store, "u")
    history = store.history("u", w.items[1].id)
    store.close()
    again = open_store()
    assert _snapshot(again, "u") == before and again.history("u", w.items[1].id) == history
    ids, _ = again.search_dense("u", w.vectors[0], 1, Filters())
    assert again.fetch("u", ids.tolist())[int(ids[0])].id == w.items[0].id
    again.close()
    with pytest.raises(StoreError):
        open_store(dim=DIM * 2)


# -- the offline commit --------------------------------------------------------------------------------
class _Graph:
    """A graph update that exercises every ``GraphTransaction`` method."""

    def __init__(self, fail: bool = False) -> None:
        self.fail, self.ids = fail, {}

    def apply(self, tx: GraphTransaction, cycle: int, now: float) -> dict[str, int]:
        for key in ("ava", "lisbon"):
            node = tx.node_by_key(key)
            if node is None:
                self.ids[key] = tx.insert_node(key, NodeKind.ENTITY, key.title(), [f"fact {cycle}"], 0.5, 1, now, cycle,
                                               _vec(len(key)))
            else:
                node.evidence, node.facts, node.last_seen, node.last_cycle = node.evidence + 1, [f"fact {cycle}"], now, cycle
                tx.save_node(node, _vec(len(key)))
                self.ids[key] = node.id
        a, b = self.ids["ava"], self.ids["lisbon"]
        state = tx.edge_state(a, b, EdgeType.RELATED_TO)
        if state is None:
            assert tx.both_active(a, b) and not tx.both_active(a, a)
            tx.insert_edge(a, b, EdgeType.RELATED_TO, "moved to", 0.5, 1, now, cycle)
        else:
            tx.reinforce_edge(a, b, EdgeType.RELATED_TO, 0.8, 1, now, cycle)
        assert tx.node(a).key == "ava"
        if self.fail:
            raise RuntimeError("graph update failed")
        return {"nodes": 2, "edges": 1}


def _commit_cycle(store: MemoryStore, user: str, w: Written, graph: _Graph | None = None, **kw):
    changes = OfflineChanges(marks=[(it.id, 0) for it in w.items])
    return store.commit_offline(user, changes, T0 + 1000, graph or _Graph(), {"units": 2}, **kw)


def test_commit_offline_writes_graph_and_mtm_together(store):
    w = _write(store, "u", ["Ava lives in Porto", "Ava moved to Lisbon", "Ava likes tea", "tea is green"])
    old, new, m1, m2 = w.items
    assert {why for _, _, why in store.consolidation_candidates("u", 10)} == {"new"}
    abstract = MemoryItem(id=store.new_id(), user_id="u", text="Ava likes green tea", provenance=["t2", "t3"],
                          created_at=T0, event_time=T0 + 3, last_access=T0, kind=ItemKind.ABSTRACT,
                          metadata={"members": [m1.id, m2.id]})
    changes = OfflineChanges(supersede=[(old.id, new.id, "update")], provenance={new.id: ["t0"]},
                             abstracts=[(abstract, _vec(77), [m1.id, m2.id])],
                             marks=[(it.id, 0) for it in w.items])
    graph = _Graph()
    done = store.commit_offline("u", changes, T0 + 1000, graph, {"units": 2})
    assert done.cycle == 1 and done.graph == {"nodes": 2, "edges": 1}
    assert done.mtm == {"superseded": 1, "merged": 0, "abstracts": 1, "archived": 2, "marked": 4, "facts": 0, "keyed": 0, "skipped": 0}
    older = store.get("u", old.id)
    assert older.superseded_by == new.id and older.valid_to == new.event_time
    assert store.get("u", new.id).provenance == ["t1", "t0"]
    assert {it.id for it in store.list("u")} == {old.id, new.id, abstract.id}
    assert store.get("u", m1.id, include_archived=True).archived
    ids, _ = store.search_dense("u", _vec(77), 10, Filters())
    assert {it.id for it in store.fetch("u", ids.tolist()).values()} == {new.id, abstract.id}  # old is superseded
    assert store.consolidation_state("u") == {"consolidated": 3, "unconsolidated": 0}
    assert store.consolidation_candidates("u", 10) == []
    assert store.graph.stats() == {"nodes": 2, "nodes_dropped": 0, "edges": 1, "edges_dropped": 0, "cycles": 1}
    assert store.graph.last_cycle() == 1
    assert [n.key for n in store.graph.nodes()] == ["ava", "lisbon"]
    assert [(e.type, e.label) for e in store.graph.edges()] == [(EdgeType.RELATED_TO, "moved to")]
    assert store.graph.node(graph.ids["ava"]).text == "Ava" and store.graph.node(10**6) is None
    nodes, vecs = store.graph.active_nodes()
    assert [n.key for n in nodes] == ["ava", "lisbon"] and vecs.shape == (2, DIM)
    assert np.allclose(vecs[0], _vec(3), atol=1e-6)
    assert any('"units": 2' in t and '"mtm_abstracts": 1' in t for t in store.graph.texts())
    assert "Lisbon" in store.graph.texts()
    # a second cycle reinforces what is there
    done = _commit_cycle(store, "u", Written([], [new], w.vectors[1:2]))
    assert done.cycle == 2 and store.graph.node_by_key("ava").evidence == 2
    assert store.graph.active_edges()[0].confidence == pytest.approx(0.8)


def test_commit_offline_skips_what_the_user_removed_meanwhile(store):
    w = _write(store, "u", ["alpha", "beta", "gamma"])
    store.delete("u", w.items[1].id, T0 + 10)
    abstract = MemoryItem(id=store.new_id(), user_id="u", text="alpha beta", provenance=["t0", "t1"], created_at=T0,
                          event_time=T0, last_access=T0, kind=ItemKind.ABSTRACT)
    changes = OfflineChanges(supersede=[(w.items[0].id, w.items[1].id, "merge")],
                             abstracts=[(abstract, _vec(5), [w.items[0].id, w.items[1].id])],
                             marks=[(it.id, 0) for it in w.items])
    done = store.commit_offline("u", changes, T0 + 1000)
    assert done.mtm["skipped"] == 2 and done.mtm["marked"] == 2 and done.graph == {}
    assert store.get("u", w.items[0].id).superseded_by is None
    with pytest.raises(ItemNotFoundError):
        store.get("u", abstract.id, include_archived=True)


@pytest.mark.parametrize("fail_in", ["graph", "before_commit"])
def test_a_failed_offline_commit_changes_nothing(store, fail_in):
    w = _write(store, "u", ["Ava lives in Porto", "Ava moved to Lisbon"])
    before = _snapshot(store, "u")

    def boom() -> None:
        raise RuntimeError("crash before commit")

    changes = OfflineChanges(supersede=[(w.items[0].id, w.items[1].id, "update")], marks=[(w.items[0].id, 0)])
    with pytest.raises(RuntimeError):
        store.commit_offline("u", changes, T0 + 1000, _Graph(fail=fail_in == "graph"),
                             before_commit=boom if fail_in == "before_commit" else None)
    assert _snapshot(store, "u") == before
    assert store.get("u", w.items[0].id).superseded_by is None and store.graph.last_cycle() == 0


def test_retrievals_reactivate_consolidated_items(store):
    w = _write(store, "u", ["alpha", "beta"])
    _commit_cycle(store, "u", w)
    rid = _rid(store, "u", w.vectors[0], w.items[0].id)
    store.touch("u", [rid], T0 + 5)
    store.touch("u", [rid], T0 + 6)  # flushed by consolidation_candidates itself
    assert [(it.id, why) for _, it, why in store.consolidation_candidates("u", 10, reactivation=2)] == [
        (w.items[0].id, "reactivated")]


def test_new_ids_are_unique(store):
    assert len({store.new_id() for _ in range(1000)}) == 1000
