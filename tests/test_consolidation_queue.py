"""Consolidation cycles as jobs in PostgreSQL (issue 75, build 1): any process claims a due user, one at a time.

A request is an upsert (a user queued twice runs once); a claim leases users so that two claimers never hold the
same one; a dead holder's user is claimed again once its lease runs out; a user requested again while its cycle runs
is run again after it. A ``Memory`` with LTM in the background on PostgreSQL requests and runs cycles through the
table and ``wait_for_consolidation`` still waits for what it asked for; ``lightmem worker --consolidate`` runs the
cycles that another process requested.
"""
from __future__ import annotations

import re
import subprocess
import sys
import threading
import time

import psycopg
import pytest

from lightmem.ltm import ConsolidationSpec, LTMOptions, QueueScheduler
from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector

DIM = 64
T0 = 1_680_000_000.0
QUICK = ConsolidationSpec(every_n_turns=3, sleep_update=False, recursive=False)


def _memory(uri: str, ltm: LTMOptions | None = None, **kw) -> Memory:
    return Memory.open(uri, embedder=HashingEmbedder(DIM), selector=Stage1Selector(), ltm=ltm, **kw)


def _say(m: Memory, user: str, texts: list[str], prefix: str = "D") -> None:
    m.add([{"speaker": "Caroline", "text": x, "id": f"{prefix}{i}"} for i, x in enumerate(texts)], user_id=user,
          timestamp=T0)


def _rows(uri: str) -> list[tuple]:
    with psycopg.connect(uri) as c:
        return c.execute("SELECT user_id, requested_at, holder FROM consolidation_jobs ORDER BY user_id").fetchall()


# -- the queue's statements ---------------------------------------------------------------------------------
def test_a_request_is_idempotent_and_keeps_the_first_requests_time(pg_uri):
    with _memory(pg_uri) as m:
        queue = m.store.consolidation_queue
        queue.request("ann")
        (_, first, _), = _rows(pg_uri)
        queue.request("ann")
        queue.request("ann")
        assert _rows(pg_uri) == [("ann", first, None)]  # once, and its wait counts from the first request
        status = queue.status()
        assert status["waiting"] == 1 and status["leased"] == 0 and status["oldest_wait_s"] >= 0


def test_two_claimers_never_hold_the_same_user(pg_uri):
    with _memory(pg_uri) as m:
        queue = m.store.consolidation_queue
        users = [f"user{i}" for i in range(24)]
        for u in users:
            queue.request(u)
        held: dict[str, list[str]] = {}

        def claimer(name: str) -> None:
            got = held.setdefault(name, [])
            while claimed := queue.claim(name, 2, lease_s=60):
                got.extend(claimed)

        threads = [threading.Thread(target=claimer, args=(f"h{i}",)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        taken = [u for got in held.values() for u in got]
        assert sorted(taken) == sorted(users)  # every user once: no two holders took the same one
        assert queue.claim("late", 5) == [] and queue.status()["leased"] == 24


def test_a_dead_holders_user_is_claimed_again_after_its_lease(pg_uri):
    with _memory(pg_uri) as m:
        queue = m.store.consolidation_queue
        queue.request("bea")
        assert queue.claim("dead-holder", 1, lease_s=0.5) == ["bea"]
        assert queue.claim("live-holder", 1) == []
        time.sleep(0.7)
        assert queue.claim("live-holder", 1, lease_s=60) == ["bea"]
        assert queue.done("dead-holder", "bea") is False  # the late one's word does not end the new holder's job
        assert _rows(pg_uri)[0][2] == "live-holder"
        assert queue.done("live-holder", "bea") is True and _rows(pg_uri) == []


def test_a_user_requested_again_during_its_cycle_is_run_again(pg_uri):
    with _memory(pg_uri) as m:
        queue = m.store.consolidation_queue
        queue.request("cal")
        assert queue.claim("h", 1) == ["cal"]
        queue.request("cal")  # new turns while the cycle runs
        assert queue.done("h", "cal") is False
        assert queue.status()["waiting"] == 1
        assert queue.claim("other", 1) == ["cal"]
        assert queue.done("other", "cal") is True and _rows(pg_uri) == []


def test_a_failed_job_waits_then_is_requested_again_at_the_next_due_point(pg_uri):
    with _memory(pg_uri) as m:
        queue = m.store.consolidation_queue
        queue.request("dot")
        for _ in range(queue.max_failures):
            assert queue.claim("h", 1) == ["dot"]
            queue.fail("h", "dot", "RuntimeError: boom", retry_after_s=0)
        assert queue.claim("h", 1) == [] and queue.status()["failed"] == 1 and queue.waiting(["dot"]) == set()
        queue.request("dot")  # the user is due again: its job is retried, as the in-process scheduler retries
        assert queue.claim("h", 1) == ["dot"]


def test_delete_user_removes_the_users_job(pg_uri):
    with _memory(pg_uri) as m:
        _say(m, "eve", ["I grow tomatoes."])
        m.store.consolidation_queue.request("eve")
        m.delete_user("eve")
        assert _rows(pg_uri) == []


# -- a Memory with LTM in the background -----------------------------------------------------------------------
def test_a_memory_on_postgres_runs_its_cycles_through_the_table_and_waits_for_them(pg_uri):
    m = _memory(pg_uri, LTMOptions(consolidation=QUICK))
    try:
        assert isinstance(m.ltm.scheduler, QueueScheduler) and m.ltm.scheduler.runs
        gate, entered = threading.Event(), threading.Event()

        def hold(point: str) -> None:
            if point == "before_commit" and not gate.is_set():
                entered.set()
                gate.wait(30)

        m.ltm.consolidator.crash_hook = hold
        _say(m, "u", ["The Chess Club meets on Fridays.", "I won at the Chess Club.", "Chess Club snacks are good."])
        assert entered.wait(30)  # the first cycle runs (claimed from the table) and holds before its commit
        assert _rows(pg_uri)[0][2] == m.ltm.scheduler.holder
        assert m.wait_for_consolidation(0.3) is False  # what this process asked for has not run yet
        _say(m, "u", ["The Book Fair opens in May.", "I bought a book at the Fair.", "The Fair had poems."], prefix="B")
        gate.set()
        assert m.wait_for_consolidation(60)
        scheduler = m.ltm.scheduler
        assert scheduler.errors == [] and [r.cycle for r in scheduler.reports] == [1, 2]  # run again for the new turns
        assert _rows(pg_uri) == [] and m.store.consolidation_state("u")["unconsolidated"] == 0
    finally:
        m.close()


def test_a_memory_that_does_not_index_here_only_requests(pg_uri):
    m = _memory(pg_uri, LTMOptions(consolidation=QUICK), background_index=True, index_here=False)
    try:
        assert not m.ltm.scheduler.runs
        _say(m, "v", ["I play the cello.", "The cello is old.", "My teacher plays the viola."])
        assert [r[0] for r in _rows(pg_uri)] == ["v"]
        assert m.wait_for_consolidation(0.3) is False and m.ltm.scheduler.reports == []
    finally:
        m.close()
    assert [r[0] for r in _rows(pg_uri)] == ["v"]  # the request outlives the process that made it


# -- a worker process --------------------------------------------------------------------------------------
@pytest.mark.multiprocess
def test_a_worker_consolidates_users_another_process_wrote(pg_uri):
    writer = _memory(pg_uri, LTMOptions(consolidation=ConsolidationSpec(every_n_turns=3)), background_index=True,
                     index_here=False)  # writes and requests; embedding and cycles are the worker's
    try:
        for u in ("wes", "xan"):
            _say(writer, u, [f"{u} keeps bees in the garden.", f"{u} sells honey at the market.",
                             f"{u} visits the market on Saturdays."])
        assert [r[0] for r in _rows(pg_uri)] == ["wes", "xan"]
        cmd = [sys.executable, "-m", "lightmem.cli", "-v", "worker", "--store", pg_uri, "--consolidate", "--no-nlp",
               "--drain", "--report-every", "0.5"]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        ran = re.search(r"ran ([\d,]+) consolidation cycles", out.stdout + out.stderr)
        assert ran and int(ran.group(1)) == 2, out.stdout[-2000:] + out.stderr[-3000:]
        assert _rows(pg_uri) == []
        assert writer.wait_for_consolidation(10)  # what this process asked for ran, in the other one
        for u in ("wes", "xan"):
            assert writer.store.consolidation_state(u)["unconsolidated"] == 0
    finally:
        writer.close()
