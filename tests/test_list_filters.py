"""``Memory.get_all``'s text, time and kind filters, newest-first order and pages, and a store's turns by id, on
both stores (the console pages a user's memories with them)."""
from __future__ import annotations

import pytest

from lightmem.errors import InvalidInputError
from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.stores import is_server


@pytest.fixture(params=["sqlite", "postgres"])
def memory(request, tmp_path):
    location = request.getfixturevalue("pg_uri") if request.param == "postgres" else str(tmp_path / "store")
    fast = {} if is_server(location) else {"synchronous": "NORMAL"}
    with Memory.open(location, embedder=HashingEmbedder(64), selector=Stage1Selector(), background_index=False, **fast) as m:
        for day, texts in [("2023-05-01", ["I adopted a dog named Rex", "Maria lives in LISBON"]),
                           ("2023-06-01", ["I play the cello", "Lisbon again in June"]),
                           ("2023-07-01", ["Sardines for dinner"])]:
            m.add([{"speaker": "Ann", "text": t, "timestamp": day} for t in texts], user_id="ann")
        m.add("Bob also likes Lisbon", user_id="bob")
        yield m


def texts(items) -> list[str]:
    return [i.text.split(": ", 1)[1] for i in items]


def test_text_time_and_order_filters_apply_in_the_store(memory):
    assert texts(memory.get_all("ann", text="lisbon")) == ["Maria lives in LISBON", "Lisbon again in June"]
    assert texts(memory.get_all("ann", text="lisbon", newest_first=True)) == ["Lisbon again in June", "Maria lives in LISBON"]
    assert texts(memory.get_all("ann", time_from="2023-06-01", time_to="2023-06-30")) == ["I play the cello",
                                                                                        "Lisbon again in June"]
    assert texts(memory.get_all("ann", newest_first=True, limit=2, offset=1)) == ["Lisbon again in June", "I play the cello"]
    assert texts(memory.get_all("ann", text="lisbon", time_from="2023-06-01")) == ["Lisbon again in June"]
    assert memory.get_all("ann", kind="abstract") == [] and len(memory.get_all("ann", kind="episodic")) == 5
    assert texts(memory.get_all("bob", text="lisbon")) == ["Bob also likes Lisbon"]  # one user's rows only
    with pytest.raises(InvalidInputError, match="kind"):
        memory.get_all("ann", kind="knowledge")


def test_turns_by_id_are_the_users_only(memory):
    rex = memory.get_all("ann", text="Rex")[0]
    bob = memory.get_all("bob")[0]
    got = memory.store.turns("ann", [*rex.provenance, *bob.provenance, "no-such-turn"])
    assert [t.text for t in got] == ["I adopted a dog named Rex"]
    assert len(memory.store.turns("ann")) == 5
