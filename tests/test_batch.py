"""Memory.batch: every operation checked before the first write; per-operation statuses, or all-or-nothing."""
from __future__ import annotations

from pathlib import Path

import pytest

from lightmem import InvalidInputError, ItemNotFoundError, Memory, StoreError
from lightmem.batch import MAX_BATCH_OPS
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector


def _open(location) -> Memory:
    extra = {} if str(location).startswith("postgresql") else {"synchronous": "NORMAL"}
    return Memory.open(location, embedder=HashingEmbedder(64), selector=Stage1Selector(), background_index=True, **extra)


@pytest.fixture(params=["sqlite", "postgres"])
def memory(request, tmp_path):
    location = request.getfixturevalue("pg_uri") if request.param == "postgres" else tmp_path / "store"
    m = _open(location)
    yield m
    m.close()


def _texts(m: Memory, user: str) -> list[str]:
    return [i.text for i in m.get_all(user)]


def test_a_batch_adds_updates_and_deletes_with_a_status_each(memory):
    first = memory.add("I live in Porto", user_id="ana")[0]
    gone = memory.add("my old phone number is 555-0199", user_id="ana")[0]
    out = memory.batch([
        {"op": "add", "user_id": "ana", "messages": ["I adopted a dog named Rex", "Rex is a beagle"]},
        {"op": "update", "user_id": "ana", "item_id": first.id, "text": "I live in Lisbon"},
        {"op": "delete", "user_id": "ana", "item_id": gone.id},
        {"op": "delete", "user_id": "ana", "item_id": "no-such-memory"},
        {"op": "add", "messages": "Bob plays chess"},
    ], user_id="bob")
    assert [(r["index"], r["op"], r["status"]) for r in out] == [
        (0, "add", "ok"), (1, "update", "ok"), (2, "delete", "ok"), (3, "delete", "not_found"), (4, "add", "ok")]
    assert [i.text for i in out[0]["items"]] == ["user: I adopted a dog named Rex", "user: Rex is a beagle"]
    assert out[1]["item"].text == "I live in Lisbon" and out[2]["removed"]["items"] == 1
    assert _texts(memory, "ana") == ["I live in Lisbon", "user: I adopted a dog named Rex", "user: Rex is a beagle"]
    assert _texts(memory, "bob") == ["user: Bob plays chess"]  # the batch's user_id for an op that names none


def test_one_bad_operation_names_its_index_and_nothing_is_written(memory):
    ops = [{"op": "add", "user_id": "ana", "messages": [f"fact {i}"]} for i in range(5)]
    for bad, says in [({"op": "add", "user_id": "ana", "messages": [""]}, "ops[2] (add)"),
                      ({"op": "update", "user_id": "ana", "item_id": "x", "colour": "red"}, "ops[2] (update)"),
                      ({"op": "delete", "user_id": "", "item_id": "x"}, "ops[2] (delete)"),
                      ({"op": "drop", "user_id": "ana"}, "ops[2]: 'op' must be one of"),
                      ({"op": "add", "messages": ["no user"]}, "user_id' is missing")]:
        with pytest.raises(InvalidInputError, match=__import__("re").escape(says)):
            memory.batch([*ops[:2], bad, *ops[2:]])
    assert memory.get_all("ana") == []
    with pytest.raises(InvalidInputError, match="at most 1,000"):
        memory.batch([{"op": "add", "user_id": "ana", "messages": "x"}] * (MAX_BATCH_OPS + 1))
    with pytest.raises(InvalidInputError, match="empty"):
        memory.batch([])


def test_an_atomic_batch_writes_everything_or_nothing(memory):
    kept = memory.add("I live in Porto", user_id="ana")[0]
    ops = [{"op": "add", "user_id": "ana", "messages": ["a new fact"]},
           {"op": "update", "user_id": "ana", "item_id": kept.id, "text": "I live in Lisbon"},
           {"op": "delete", "user_id": "ana", "item_id": "no-such-memory"}]
    with pytest.raises(ItemNotFoundError) as err:
        memory.batch(ops, atomic=True)
    assert err.value.op_index == 2
    assert _texts(memory, "ana") == ["user: I live in Porto"]  # the add and the update rolled back with it
    assert memory.flush_index(timeout=60)
    assert [h.item.text for h in memory.search("a new fact", "ana", k=5)] == ["user: I live in Porto"]  # views too
    out = memory.batch(ops[:2], atomic=True)
    assert [r["status"] for r in out] == ["ok", "ok"]
    assert _texts(memory, "ana") == ["I live in Lisbon", "user: a new fact"]


def test_a_store_failure_stops_the_batch_and_marks_the_rest(memory, monkeypatch):
    real = memory.store.write
    calls = {"n": 0}

    def failing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise StoreError("the disk is gone")
        return real(*args, **kwargs)

    monkeypatch.setattr(memory.store, "write", failing)
    out = memory.batch([{"op": "add", "user_id": "ana", "messages": [f"fact {i}"]} for i in range(4)])
    assert [r["status"] for r in out] == ["ok", "failed", "not_attempted", "not_attempted"]
    assert "the disk is gone" in out[1]["error"]
    assert _texts(memory, "ana") == ["user: fact 0"]


def test_a_batch_deletion_is_erased_from_the_files(tmp_path):
    location = tmp_path / "store"
    with _open(location) as m:
        items = m.add([f"secret-{i}-zz and more words" for i in range(30)], user_id="ana")
        assert m.flush_index(timeout=60)
        for atomic in (False, True):
            half = items[:15] if not atomic else items[15:]
            out = m.batch([{"op": "delete", "user_id": "ana", "item_id": i.id} for i in half], atomic=atomic)
            assert {r["status"] for r in out} == {"ok"}
            data = b"".join(p.read_bytes() for p in Path(location).iterdir() if p.is_file())
            assert not [i for i in half if i.text.split()[1].encode() in data]
