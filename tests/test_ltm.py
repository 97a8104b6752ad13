"""LTM: graph merge / evidence / decay, privacy, consolidation steps, routing, scheduler, crashes."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import fields

import numpy as np
import pytest
from conftest import FIXTURES
from fakes import ScriptedLLM

from lightmem.ltm import ConsolidationSpec, GraphSpec, LTMOptions
from lightmem.ltm.abstraction import ExtractiveAbstractor, GenerativeAbstractor
from lightmem.ltm.deidentify import Deidentifier
from lightmem.ltm.recursive import ClusterSpec, affinity, dense_clusters, extractive_abstract
from lightmem.ltm.sleep import Decision, QueueSpec, resolve, rule_decision, update_queues
from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.stores import is_server
from lightmem.types import Edge, ItemKind, KnowledgeNode, NodeKind

DAY = 86_400.0
T0 = 1_680_000_000.0


def _memory(path, spec: ConsolidationSpec | None = None, graph: GraphSpec | None = None, **opts) -> Memory:
    opts.setdefault("background", False)
    ltm = LTMOptions(consolidation=spec or ConsolidationSpec(), graph=graph or GraphSpec(), **opts)
    fast = {} if is_server(path) else {"synchronous": "NORMAL"}  # a server keeps its own durability
    return Memory.open(path, embedder=HashingEmbedder(dim=64), selector=Stage1Selector(), ltm=ltm, **fast)


def _say(m: Memory, user: str, texts: list[str], speaker: str = "Caroline", t: float = T0, prefix: str = "D") -> None:
    m.add([{"speaker": speaker, "text": x, "id": f"{prefix}{i}"} for i, x in enumerate(texts)], user_id=user, timestamp=t)
    m.flush_index()  # a cycle selects items once they have their vectors


@pytest.fixture(params=["sqlite", "postgres"])
def store_at(request, tmp_path):
    """A store folder, or a fresh PostgreSQL database (conftest.py: pg_server): the cycle runs on both backends."""
    return request.getfixturevalue("pg_uri") if request.param == "postgres" else tmp_path / "s"


# -- pure functions -----------------------------------------------------------------------------
def test_update_queues_only_look_forward_in_time():
    v = np.eye(4, dtype=np.float32)
    v[1] = v[0]
    v[2] = (v[0] + v[3]) / np.sqrt(2)
    order = np.asarray([0, 1, 2, 3])
    q = update_queues(v, order, [0, 1, 3], k=2, min_similarity=0.5)
    assert q[0] == [(1, pytest.approx(1.0)), (2, pytest.approx(0.7071, abs=1e-3))]
    assert 1 in q and all(j > 1 for j, _ in q[1])  # never an earlier or equal entry
    assert 3 not in q  # the last entry has nothing later
    decisions = {(0, 1): Decision.IGNORE, (0, 2): Decision.UPDATE, (1, 2): Decision.MERGE}
    changes = resolve(q, decisions, order)
    assert [(c.target, c.by, c.decision) for c in changes] == [(0, 2, Decision.UPDATE), (1, 2, Decision.MERGE)]


def test_rule_decisions():
    assert rule_decision("a", "b", 0.95, 0.9) is Decision.MERGE
    assert rule_decision("Ava lives in Porto.", "Ava moved to Lisbon.", 0.6, 0.9) is Decision.UPDATE
    assert rule_decision("Ava lives in Porto.", "Ava likes tea.", 0.6, 0.9) is Decision.IGNORE


def test_affinity_and_dense_clusters():
    v = np.asarray([[1, 0], [1, 0], [0.99, 0.14], [0, 1]], dtype=np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    t = np.asarray([0, 0, DAY, 0])
    om = affinity(v, t, beta=0.8, lam=0.05)
    assert om[0, 1] == pytest.approx(1.0) and om[0, 3] == pytest.approx(0.2)
    assert om[0, 2] < om[0, 1]  # a day apart and slightly different
    assert dense_clusters(om, [0, 3], tau=0.85, min_size=3, max_size=6) == [[0, 1, 2]]
    assert dense_clusters(om, [3], tau=0.85, min_size=2, max_size=6) == []


def test_extractive_abstract_keeps_everything_or_nothing():
    assert extractive_abstract(["A cat. A dog.", "a cat.", "A bird!"], 50) == "A cat. A dog. A bird!"
    assert extractive_abstract(["one two three", "four five six"], 4) is None


def test_extractive_units_have_typed_nodes_and_edges():
    from lightmem.models.registry import ModelRegistry

    units = ExtractiveAbstractor(ModelRegistry().spacy()).abstract(
        ["The pottery class is a creative hobby. The pottery class was very relaxing. What do you think?"])[0]
    edges = {(e.src, e.type.value, e.dst) for u in units for e in u.edges}
    kinds = {n.key: n.kind for u in units for n in u.nodes}
    assert ("pottery class", "IsA", "creative hobby") in edges
    assert ("pottery class", "HasProperty", "relaxing") in edges
    assert kinds["pottery class"] is NodeKind.ENTITY and kinds["relaxing"] is NodeKind.CONCEPT
    assert all(not u.statement.endswith("?") for u in units)  # questions carry no fact


def test_generative_abstractor_scrubs_and_falls_back():
    good = ('{"units": [{"statement": "Caroline says pottery is relaxing", "nodes": [{"name": "pottery", "type": "entity"},'
            ' {"name": "relaxing", "type": "concept"}], "edges": [{"src": "pottery", "type": "HasProperty", "dst": "relaxing"}]}]}')
    ab = GenerativeAbstractor(ScriptedLLM([good]), deidentifier=Deidentifier(names=["Caroline"]))
    units = ab.abstract(["[PERSON] took a Pottery Class", "It was relaxing"])
    assert units[0][0].statement == "[PERSON] says pottery is relaxing" and units[1] == []
    assert [(e.src, e.type.value, e.dst) for e in units[0][0].edges] == [("pottery", "HasProperty", "relaxing")]
    bad = GenerativeAbstractor(ScriptedLLM(["not json", "still not"]), ExtractiveAbstractor(None))
    units = bad.abstract(["We visited the Louvre Museum in spring."])
    assert [n.key for n in units[0][0].nodes] == ["louvre museum"]  # the extractive fallback
    assert bad.llm.meter.summary()["consolidator"]["failures"] >= 1


# -- graph ------------------------------------------------------------------------------------------
def test_units_merge_across_users_and_accumulate_evidence_in_the_shared_graph(store_at):
    m = _memory(store_at, ConsolidationSpec(sleep_update=False, recursive=False), scope="shared")
    _say(m, "u1", ["I joined a Pottery Class downtown last week."])
    _say(m, "u2", ["My sister loves her Pottery Class on Mondays."], speaker="Ben")
    m.consolidate()
    node = next(n for n in m.ltm.graph.nodes() if n.key == "pottery class")
    assert node.evidence == 2 and node.confidence > GraphSpec().initial_confidence
    assert len(node.facts) == 2 and sum(n.key == "pottery class" for n in m.ltm.graph.nodes()) == 1
    assert m.ltm_stats()["cycles"] == 2
    m.close()


def test_by_default_each_user_has_a_graph_of_their_own(store_at):
    m = _memory(store_at, ConsolidationSpec(sleep_update=False, recursive=False))
    assert m.ltm.graph.scope == "user"
    _say(m, "u1", ["I joined a Pottery Class downtown last week."])
    _say(m, "u2", ["My sister loves her Pottery Class on Mondays."], speaker="Ben")
    m.consolidate()
    mine = {u: [n for n in m.ltm.graph.nodes(user_id=u) if n.key == "pottery class"] for u in ("u1", "u2")}
    assert [n.evidence for n in mine["u1"]] == [1] and [n.evidence for n in mine["u2"]] == [1]
    assert mine["u1"][0].id != mine["u2"][0].id and mine["u1"][0].facts != mine["u2"][0].facts
    for user, other in (("u1", "u2"), ("u2", "u1")):
        knowledge = [h.item for h in m.search("Pottery Class", user, k=6) if h.item.kind is ItemKind.KNOWLEDGE]
        assert knowledge and all(h.metadata["ltm_node"] != mine[other][0].id for h in knowledge)
    m.close()


def test_decay_drops_weak_units_keeps_strong_ones_and_rows(store_at):
    spec = GraphSpec(decay=0.5, drop_below=0.3, strong_evidence=3)
    m = _memory(store_at, ConsolidationSpec(sleep_update=False, recursive=False, batch_size=3), graph=spec)
    _say(m, "u", ["We love the Jazz Festival.", "The Jazz Festival was great.", "Another Jazz Festival soon."], prefix="A")
    _say(m, "u", ["I bought a Red Bicycle yesterday."], prefix="B")
    m.consolidate("u")  # cycle 1: jazz festival (3 pieces of evidence); cycle 2: red bicycle (1)
    for i in range(3):  # later cycles support neither
        _say(m, "u", [f"Unrelated Topic {i} appeared in the news."], prefix=f"C{i}")
        m.consolidate("u")
    nodes = {n.key: n for n in m.ltm.graph.nodes(include_dropped=True)}
    assert nodes["jazz festival"].active and nodes["jazz festival"].evidence == 3
    assert not nodes["red bicycle"].active  # decayed below drop_below: out of the index
    assert "red bicycle" not in {n.key for n in m.ltm.graph.nodes()}  # but its row is kept
    hits = m.search("Red Bicycle", "u", k=5)
    assert all(h.item.metadata.get("ltm_node") != nodes["red bicycle"].id for h in hits)
    m.close()


def test_ltm_holds_no_user_id_name_or_identifier(tmp_path):
    m = _memory(tmp_path / "s", nlp=_spacy())
    secrets = {"user": "alice@example.com", "names": ["Caroline", "Melanie"]}
    m.add([{"speaker": "Caroline", "text": "Melanie and I joined the Photography Club; mail me at caro@mail.com or call 555-123-4567.", "id": "1"},
           {"speaker": "Melanie", "text": "Caroline showed me the Photography Club darkroom at 12 Oak Street.", "id": "2"},
           {"speaker": "Caroline", "text": "The Photography Club is a friendly community for alice@example.com.", "id": "3"}],
          user_id=secrets["user"], timestamp=T0)
    m.consolidate()
    texts = m.ltm.graph.texts()
    assert any("photography club" in t.lower() for t in texts)
    identifiers = [*secrets["names"], secrets["user"], "caro@mail.com", "555-123-4567"]
    assert [(s, t) for t in texts for s in identifiers if s.lower() in t.lower()] == []
    assert not any("Oak Street" in t for t in texts)
    # what the graph returns carries no user either: its records have no user field
    assert not {f.name for rec in (KnowledgeNode, Edge) for f in fields(rec)} & {"user", "user_id"}
    assert all(secrets["user"] not in repr(n) for n in m.store.graph.nodes(include_dropped=True))
    m.close()


def test_a_store_written_before_the_graph_was_versioned_opens_with_its_graph(tmp_path):
    """tests/fixtures/store_schema2.sqlite: written by lightmem's schema-2 code (LTM tables made by the
    graph itself, unversioned): 3 turns of u consolidated into 4 nodes and 3 edges, 1 turn of ava."""
    db = tmp_path / "old.sqlite"
    shutil.copy(FIXTURES / "store_schema2.sqlite", db)
    m = _memory(db, ConsolidationSpec(sleep_update=False, recursive=False))
    assert m.store.info()["schema_version"] == "5"
    assert m.stats() == {"ava": {"turns": 1, "items": 1, "archived": 0, "pending": 0, "unembedded": 0},
                         "u": {"turns": 3, "items": 3, "archived": 0, "pending": 0, "unembedded": 0}}
    assert m.ltm_stats() == {"nodes": 4, "nodes_dropped": 0, "edges": 3, "edges_dropped": 0, "cycles": 1}
    assert any("photography club" in t.lower() for t in m.ltm.graph.texts())
    # the old graph was everyone's: it is kept whole in the shared scope, out of the per-user default's reach
    kinds = {h.item.kind for h in m.search("Biscuit the dog", "u", k=4) if "Biscuit" in h.item.text}
    assert kinds == {ItemKind.EPISODIC}
    assert m.ltm.graph.nodes(user_id="u") == [] and len(m.store.graph.nodes(scope="")) == 4
    assert m.store.consolidation_state("u") == {"consolidated": 3, "unconsolidated": 0}
    _say(m, "u", ["The Photography Club moved to Tuesday evenings."], prefix="N")
    assert [r.cycle for r in m.consolidate("u")] == [2]
    assert m.ltm.graph.nodes(user_id="u") and len(m.store.graph.nodes(scope="")) == 4  # the new knowledge is u's own
    m.close()
    shared = _memory(db, ConsolidationSpec(sleep_update=False, recursive=False), scope="shared")  # the operator opts in
    kinds = {h.item.kind for h in shared.search("Biscuit the dog", "u", k=4) if "Biscuit" in h.item.text}
    assert kinds == {ItemKind.EPISODIC, ItemKind.KNOWLEDGE}  # the old turn and the old graph's node
    shared.close()


# -- consolidation steps over MTM -----------------------------------------------------------------------
def test_incremental_batches_resume_where_they_stopped(tmp_path):
    m = _memory(tmp_path / "s", ConsolidationSpec(batch_size=2, sleep_update=False, recursive=False))
    _say(m, "u", [f"Fact number {i} about the Garden Project." for i in range(5)])
    rep = m.ltm.consolidator.run("u")
    assert rep.selected == {"new": 2} and m.store.consolidation_state("u") == {"consolidated": 2, "unconsolidated": 3}
    assert len(m.consolidate("u")) == 2  # 2 + 1 remaining
    assert m.store.consolidation_state("u")["unconsolidated"] == 0
    assert m.ltm.consolidator.run("u").cycle == 0  # nothing left: no cycle
    hits = m.search("Garden Project", "u", k=3)  # retrievals reactivate items
    m.search("Garden Project", "u", k=3)
    m.store.flush()
    rep = m.ltm.consolidator.run("u")
    assert rep.selected.get("reactivated", 0) >= 1 and hits
    m.close()


def test_sleep_time_update_supersedes_and_merges_never_deletes(store_at):
    spec = ConsolidationSpec(ltm=False, recursive=False, queue=QueueSpec(k=3, min_similarity=0.0, merge_similarity=0.95))
    m = _memory(store_at, spec)
    m.add({"speaker": "Ava", "text": "Ava lives in Porto.", "id": "a1"}, user_id="u", timestamp=T0)
    m.add({"speaker": "Ava", "text": "I adopted a cat named Tom", "id": "a2"}, user_id="u", timestamp=T0)
    m.add({"speaker": "Ava", "text": "Ava moved to Lisbon.", "id": "b1"}, user_id="u", timestamp=T0 + 30 * DAY)
    m.add({"speaker": "Ava", "text": "I adopted a cat named Tom", "id": "b2"}, user_id="u", timestamp=T0 + 30 * DAY)
    rep = m.consolidate("u")[0]
    assert rep.mtm["superseded"] == 1 and rep.mtm["merged"] == 1
    items = {tuple(i.provenance): i for i in m.get_all("u", include_archived=True)}
    porto = next(i for p, i in items.items() if "a1" in p)
    assert porto.superseded_by is not None and porto.valid_to == pytest.approx(T0 + 30 * DAY)
    cat_new = next(i for i in items.values() if "b2" in i.provenance)
    assert set(cat_new.provenance) == {"a2", "b2"} and cat_new.is_current
    assert len(m.get_all("u", include_archived=True)) == 4  # nothing deleted
    texts = [h.item.text for h in m.search("where does Ava live", "u", k=4)]
    assert "Ava: Ava lives in Porto." not in texts
    kept = m.search("where does Ava live", "u", k=4, filters={"include_superseded": True})
    assert "Ava: Ava lives in Porto." in [h.item.text for h in kept]
    assert [e.event for e in m.history(porto.id, "u")][-1] == "UPDATE"
    m.close()


def test_recursive_consolidation_archives_members_and_keeps_them_recoverable(store_at):
    spec = ConsolidationSpec(ltm=False, sleep_update=False, cluster=ClusterSpec(tau=0.85, min_size=3))
    m = _memory(store_at, spec)
    _say(m, "u", ["I drink a latte every morning.", "I drink a latte every morning!", "Every morning I drink a latte."])
    _say(m, "u", ["The quarterly tax report is due."], prefix="X")
    rep = m.consolidate("u")[0]
    assert rep.mtm["abstracts"] == 1 and rep.mtm["archived"] == 3
    active = m.get_all("u")
    abstract = next(i for i in active if i.kind is ItemKind.ABSTRACT)
    assert sorted(abstract.provenance) == ["D0", "D1", "D2"] and len(active) == 2
    members = m.sources(abstract.id, "u")
    assert len(members) == 3 and all(x.archived for x in members)
    m.restore(members[0].id, "u")
    assert members[0].id in {i.id for i in m.get_all("u")}
    assert abstract.id in [h.item.id for h in m.search("latte every morning", "u", k=3)]
    assert "CONSOLIDATE" in [e.event for e in m.history(members[1].id, "u")]
    m.close()


# -- LTM retrieval ------------------------------------------------------------------------------------
def test_routing_and_expansion(store_at):
    m = _memory(store_at, ConsolidationSpec(sleep_update=False, recursive=False), nlp=_spacy())
    _say(m, "u", ["The Volcano Museum is a geology exhibit.", "The geology exhibit is fascinating for kids."])
    m.consolidate("u")
    kinds = [h.item.kind for h in m.search("Volcano Museum", "u", k=6)]
    assert ItemKind.KNOWLEDGE in kinds and ItemKind.EPISODIC in kinds  # concurrent: both tiers
    knowledge = [h for h in m.search("Volcano Museum", "u", k=6) if h.item.kind is ItemKind.KNOWLEDGE]
    assert knowledge[0].item.user_id == "" and knowledge[0].item.provenance == []
    assert "Volcano Museum" in knowledge[0].item.text and "IsA" in knowledge[0].item.text
    m.retriever.routing = "mtm_only"
    assert all(h.item.kind is ItemKind.EPISODIC for h in m.search("Volcano Museum", "u", k=6))
    m.retriever.routing = "ltm_only"
    assert {h.item.kind for h in m.search("Volcano Museum", "u", k=6)} == {ItemKind.KNOWLEDGE}
    m.retriever.routing = "concurrent"
    timed = m.search("Volcano Museum", "u", k=6, filters={"time_from": T0 - DAY})
    assert all(h.item.kind is not ItemKind.KNOWLEDGE for h in timed)  # knowledge has no event time
    # expansion: a neighbour reached through an edge, not only the seed
    qvec = m.embedder.encode(["Volcano Museum"], is_query=True)[0]
    seed_only = m.ltm.graph.search(qvec, "Volcano Museum", 4, hops=0, user_id="u")
    expanded = m.ltm.graph.search(qvec, "Volcano Museum", 4, hops=2, user_id="u")
    assert m.ltm.graph.search(qvec, "Volcano Museum", 4, hops=2, user_id="someone else") == []
    assert {n.key for n, _, _ in expanded} >= {n.key for n, _, _ in seed_only[:1]}
    ctx = m.build_context("Volcano Museum", "u", budget=300)
    assert "[knowledge]" in ctx.prompt
    m.close()


# -- scheduler, concurrency, crashes ----------------------------------------------------------------------
def test_background_cycles_never_block_add_or_search(tmp_path):
    m = _memory(tmp_path / "s", ConsolidationSpec(every_n_turns=3, sleep_update=False, recursive=False), background=True)
    gate, entered = threading.Event(), threading.Event()

    def hold(point: str) -> None:
        if point == "before_commit":
            entered.set()
            gate.wait(30)

    m.ltm.consolidator.crash_hook = hold
    _say(m, "u", ["The Chess Club meets on Fridays.", "I won at the Chess Club.", "Chess Club snacks are good."])
    assert entered.wait(30)  # a cycle is running and holds before its commit
    done = []

    def online() -> None:
        _say(m, "u", ["The Book Fair opens in May."], prefix="B")
        done.append(len(m.search("Chess Club", "u", k=3)))

    t = threading.Thread(target=online)
    t.start()
    t.join(30)
    assert not t.is_alive() and done == [3]  # add() and search() returned while the cycle waits
    gate.set()
    assert m.wait_for_consolidation(60)
    assert m.ltm.scheduler.errors == [] and m.ltm.scheduler.reports[0].cycle == 1
    m.close()


def test_searches_concurrent_with_consolidation(store_at):
    m = _memory(store_at, ConsolidationSpec(batch_size=8), background=True)
    errors: list[BaseException] = []
    stop = threading.Event()

    def searcher() -> None:
        while not stop.is_set():
            try:
                hits = m.search("garden tomatoes", "u", k=5)
                assert len({h.item.id for h in hits}) == len(hits)
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
                return

    _say(m, "u", ["Seed fact about the Garden."], prefix="S")
    threads = [threading.Thread(target=searcher) for _ in range(2)]
    for th in threads:
        th.start()
    for i in range(6):
        _say(m, "u", [f"Day {i}: the Garden Tomatoes grew {i} cm.", f"We watered the Garden on day {i}.",
                      f"Neighbours admired the Garden Tomatoes {i}."], prefix=f"R{i}-", t=T0 + i * DAY)
    assert m.wait_for_consolidation(120)
    stop.set()
    for th in threads:
        th.join(30)
    m.consolidate("u")
    assert errors == [] and m.ltm.scheduler.errors == []
    assert m.store.consolidation_state("u")["unconsolidated"] == 0 and m.ltm_stats()["nodes"] > 0
    m.close()


def test_a_failed_cycle_commits_nothing_and_the_next_one_resumes(store_at):
    m = _memory(store_at)
    _say(m, "u", ["The Robotics Team built a rover.", "The rover climbs stairs."])

    def boom(point: str) -> None:
        if point == "in_transaction":
            raise RuntimeError("crash inside the transaction")

    m.ltm.consolidator.crash_hook = boom
    with pytest.raises(RuntimeError):
        m.ltm.consolidator.run("u")
    assert m.ltm_stats() == {"nodes": 0, "nodes_dropped": 0, "edges": 0, "edges_dropped": 0, "cycles": 0}
    assert m.store.consolidation_state("u") == {"consolidated": 0, "unconsolidated": 2} and len(m.ltm.graph) == 0
    m.ltm.consolidator.crash_hook = None
    assert m.consolidate("u")[0].selected == {"new": 2} and m.ltm_stats()["nodes"] > 0
    m.close()


def test_user_deleted_during_a_cycle_is_not_resurrected(store_at):
    m = _memory(store_at, ConsolidationSpec(ltm=False, sleep_update=False, cluster=ClusterSpec(min_size=2)))
    _say(m, "u", ["I drink a latte every morning.", "I drink a latte every morning!"])
    m.ltm.consolidator.crash_hook = lambda point: m.delete_user("u") if point == "before_commit" else None
    rep = m.ltm.consolidator.run("u")
    assert rep.mtm["abstracts"] == 0 and rep.mtm["skipped"] == 1 and rep.mtm["marked"] == 0
    assert m.get_all("u", include_archived=True) == [] and m.stats() == {}
    m.close()


@pytest.mark.multiprocess
@pytest.mark.parametrize("point", ["before_commit", "in_transaction"])
def test_sigkill_during_consolidation_leaves_mtm_and_ltm_consistent(tmp_path, point):
    store = tmp_path / "s"
    flag = tmp_path / "inside"
    script = textwrap.dedent(f"""
        import time, pathlib
        from lightmem.memory import Memory
        from lightmem.ltm import LTMOptions
        from lightmem.models.embedder import HashingEmbedder
        from lightmem.retrieval.stage2 import Stage1Selector
        m = Memory.open({str(store)!r}, embedder=HashingEmbedder(dim=64), selector=Stage1Selector(),
                        ltm=LTMOptions(background=False))
        m.add([{{"speaker": "Ann", "text": f"The Science Fair project {{i}} won a prize.", "id": str(i)}} for i in range(6)],
              user_id="u", timestamp=1680000000)
        def hook(point):
            if point == {point!r}:
                pathlib.Path({str(flag)!r}).write_text("x")
                time.sleep(60)
        m.ltm.consolidator.crash_hook = hook
        m.consolidate("u")
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": os.getcwd()})
    deadline = time.time() + 120
    while not flag.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert flag.exists(), "the child never reached the crash point"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    m = _memory(store)
    assert len(m.get_all("u")) == 6  # MTM as written
    assert m.ltm_stats()["cycles"] == 0 and m.ltm_stats()["nodes"] == 0  # no half cycle
    assert m.store.consolidation_state("u") == {"consolidated": 0, "unconsolidated": 6}
    reports = m.consolidate("u")  # the next cycle resumes with the same items
    assert reports[0].selected == {"new": 6} and m.store.consolidation_state("u")["unconsolidated"] == 0
    m.close()


def _spacy():
    from lightmem.models.registry import ModelRegistry

    return ModelRegistry().spacy()
