"""``Memory.open(path, encoder=NAME)`` takes the names the CLI's ``--encoder`` takes (issue 65), resolved the same way.

``Memory.open(path, encoder="hashing")`` raised ValueError (the name went on to the store as an unknown setting)
while ``lightmem ... --encoder hashing`` worked. ``memory_parts`` (the one construction path) now takes ``encoder``:
a new store is built with it, an existing one reopens with its own embedder, and naming another is refused."""
from __future__ import annotations

import pytest

from lightmem.build import ENCODER_CHOICES, memory_parts, new_embedder, resolve_embedder
from lightmem.errors import InvalidInputError, LightMemError
from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.stores.factory import stored_embedder


def _open(path, **options) -> Memory:
    return Memory.open(path, selector=Stage1Selector(), **options)


def test_a_new_store_is_built_with_the_named_encoder_and_reopens_with_it(tmp_path):
    store = tmp_path / "s"
    expected = new_embedder("hashing").name
    with _open(store, encoder="hashing") as memory:
        assert memory.embedder.name == expected == resolve_embedder(tmp_path / "cli", "hashing").name  # the CLI's
        memory.add("I moved to Oslo in May.", user_id="alice")
    assert stored_embedder(store) == expected
    with _open(store, encoder="hashing") as memory:  # named again: the same one
        assert memory.embedder.name == expected
        assert "Oslo" in memory.search("where did I move", user_id="alice", k=1)[0].item.text
    with _open(store) as memory:  # no name: the store's own, as the CLI does
        assert memory.embedder.name == expected
        assert len(memory.get_all("alice")) == 1


def test_naming_another_encoder_than_the_stores_is_a_clear_error(tmp_path):
    store = tmp_path / "s"
    with _open(store, encoder="hashing") as memory:
        memory.add("I moved to Oslo in May.", user_id="alice")
    with pytest.raises(LightMemError, match="was built with hashing-256") as wrong:
        _open(store, encoder="minilm")  # refused before any model loads: the store says which it is
    message = str(wrong.value)
    assert "'minilm'" in message and "leave encoder= out" in message and "--encoder" not in message
    with _open(store) as memory:  # the store is untouched
        assert memory.embedder.name == new_embedder("hashing").name and len(memory.get_all("alice")) == 1


def test_an_unknown_name_and_both_ways_at_once_are_refused(tmp_path):
    with pytest.raises(LightMemError, match="unknown encoder 'bert'") as unknown:
        _open(tmp_path / "a", encoder="bert")
    assert all(name in str(unknown.value) for name in ENCODER_CHOICES)
    with pytest.raises(InvalidInputError, match="not both"):
        _open(tmp_path / "b", encoder="hashing", embedder=HashingEmbedder(64))
    with pytest.raises(ValueError, match="not both"):  # InvalidInputError is a ValueError too
        memory_parts(tmp_path / "b", encoder="hashing", embedder=HashingEmbedder(64))
    with pytest.raises(InvalidInputError, match="must be a name"):
        _open(tmp_path / "c", encoder=HashingEmbedder(64))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists() and not (tmp_path / "c").exists()


def test_an_opened_store_takes_its_embedder_not_a_name(tmp_path):
    with _open(tmp_path / "s", encoder="hashing") as memory:
        with pytest.raises(InvalidInputError, match="opened store"):
            memory_parts(memory.store, encoder="hashing")
