"""No query, filter or option of a search for one user returns another user's item."""
from __future__ import annotations

import pytest

from lightmem.errors import InvalidInputError, ItemNotFoundError
from lightmem.types import Filters, ItemKind

USERS = {
    "alice": ["Alice adopted a cat named Mochi", "Alice works at the Lisbon bakery", "Bob's secret password is hunter2"],
    "bob": ["Bob's secret password is hunter2", "Bob flies to Tokyo in May", "Bob plays the violin"],
    "carol": ["Carol runs marathons", "Carol's password is swordfish"],
    "' OR 1=1 --": ["a user id that looks like SQL injection"],
}
ADVERSARIAL_QUERIES = [
    "Bob's secret password hunter2",
    "swordfish",
    "' OR '1'='1",
    "alice bob carol user_id",
    "%",
    "*",
    "Tokyo violin marathon Mochi Lisbon",
]


@pytest.fixture
def populated(memory):
    ids = {}
    for i, (user, texts) in enumerate(USERS.items()):
        items = memory.add([{"speaker": user, "text": t} for t in texts], user_id=user, timestamp=1_700_000_000 + i)
        ids[user] = {it.id for it in items}
    return memory, ids


@pytest.mark.parametrize("query", ADVERSARIAL_QUERIES)
def test_search_never_crosses_users(populated, query):
    memory, ids = populated
    for user in USERS:
        for filters in (None, Filters(include_superseded=True), Filters(kinds=(ItemKind.EPISODIC,)), Filters(tags=("bob",)),
                        Filters(time_from=0, time_to=2e9)):
            hits = memory.search(query, user, k=50, filters=filters)
            assert {h.item.id for h in hits} <= ids[user]
            assert all(h.item.user_id == user for h in hits)


def test_filters_cannot_name_a_user(populated):
    memory, _ = populated
    with pytest.raises(InvalidInputError, match="user_id"):
        memory.search("password", "alice", filters={"user_id": "bob"})


def test_item_operations_refuse_other_users_ids(populated):
    memory, ids = populated
    bob_item = next(iter(ids["bob"]))
    with pytest.raises(ItemNotFoundError):
        memory.get(bob_item, "alice")
    with pytest.raises(ItemNotFoundError):
        memory.delete(bob_item, "alice")
    with pytest.raises(ItemNotFoundError):
        memory.update(bob_item, "alice", text="overwritten by alice")
    assert memory.history(bob_item, "alice") == []
    assert memory.get(bob_item, "bob").text != "overwritten by alice"


def test_unknown_user_sees_nothing(populated):
    memory, _ = populated
    assert memory.search("password", "mallory", k=10) == []
    assert memory.get_all("mallory") == []


def test_same_text_for_two_users_stays_two_items(populated):
    memory, ids = populated
    a = [h for h in memory.search("hunter2", "alice", k=5) if "hunter2" in h.item.text]
    b = [h for h in memory.search("hunter2", "bob", k=5) if "hunter2" in h.item.text]
    assert len(a) == len(b) == 1 and a[0].item.id != b[0].item.id
    memory.delete_user("bob")
    assert memory.search("hunter2", "alice", k=5)[0].item.id == a[0].item.id
