"""One store, many processes: every call sees other processes' commits; concurrent writers lose nothing.

Each test runs real separate Python processes against one store folder.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from lightmem.ltm import LTMOptions
from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector

pytestmark = pytest.mark.multiprocess

T0 = 1_600_000_000
PRELUDE = textwrap.dedent(
    """
    import sys
    from lightmem.memory import Memory
    from lightmem.models.embedder import HashingEmbedder
    from lightmem.retrieval.stage2 import Stage1Selector
    m = Memory.open(sys.argv[1], embedder=HashingEmbedder(64), selector=Stage1Selector())
    """
)


@pytest.fixture(autouse=True)
def indexing(monkeypatch):
    """The shipped default: the background indexer on, in this process and in those the tests start (they
    inherit it); nothing these tests check differs without it (tests/test_background_index.py covers both)."""
    monkeypatch.setenv("LIGHTMEM_BACKGROUND_INDEX", "1")


def _open(path, **kw) -> Memory:
    return Memory.open(path, embedder=HashingEmbedder(64), selector=Stage1Selector(), **kw)


def _run(path, body: str, *args: str, wait: bool = True):
    cmd = [sys.executable, "-c", PRELUDE + textwrap.dedent(body), str(path), *args]
    if not wait:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _texts(memory: Memory, query: str, user: str = "u", k: int = 50) -> list[str]:
    """Hit texts without the speaker prefix the turn writer adds ("user: ...")."""
    return [h.item.text.split(": ", 1)[-1] for h in memory.search(query, user, k=k)]


def test_a_search_sees_turns_another_process_added_since(tmp_path):
    a = _open(tmp_path)
    a.add("Ava walked to the park", user_id="u", timestamp=T0)
    assert not any("zebrafish" in t for t in _texts(a, "zebrafish aquarium"))  # A's indexes are loaded now
    _run(tmp_path, """
        for i in range(20):
            m.add(f"the zebrafish number {i} lives in the aquarium", user_id="u", timestamp=1_600_000_100 + i)
        m.close()
    """)
    found = _texts(a, "zebrafish number 7 aquarium")
    assert found[0] == "the zebrafish number 7 lives in the aquarium"
    assert sum("zebrafish" in t for t in found) == 20
    assert len(a.get_all("u")) == 21
    a.close()


def test_deletes_archives_and_updates_of_another_process_are_never_returned(tmp_path):
    a = _open(tmp_path)
    for i in range(10):
        a.add(f"note {i} about the harbour boats", user_id="u", timestamp=T0 + i)
    a.add("the other user's harbour", user_id="v", timestamp=T0)
    items = {it.text.split(": ", 1)[-1]: it.id for it in a.get_all("u")}
    assert len(_texts(a, "harbour boats")) == 10 and _texts(a, "harbour", user="v")
    _run(tmp_path, """
        m.delete(sys.argv[2], "u")
        m.archive(sys.argv[3], "u")
        m.update(sys.argv[4], "u", text="note 4 now says lighthouse keepers")
        m.delete_user("v")
        m.close()
    """, items["note 1 about the harbour boats"], items["note 2 about the harbour boats"], items["note 4 about the harbour boats"])
    after = _texts(a, "harbour boats")
    assert "note 1 about the harbour boats" not in after  # deleted
    assert "note 2 about the harbour boats" not in after  # archived
    assert "note 4 about the harbour boats" not in after  # its old text
    assert _texts(a, "lighthouse keepers")[0] == "note 4 now says lighthouse keepers"
    assert _texts(a, "harbour", user="v") == []
    a.restore(items["note 2 about the harbour boats"], "u")  # and this process's own change still works
    assert "note 2 about the harbour boats" in _texts(a, "harbour boats")
    a.close()


def test_two_processes_writing_at_once_lose_no_turn(tmp_path):
    _open(tmp_path).close()  # the schema exists before the race
    writer = """
        tag, n = sys.argv[2], int(sys.argv[3])
        for i in range(n):
            m.add({"text": f"{tag} message {i} about gardens", "id": f"{tag}-{i}"}, user_id=("u" if i % 2 else tag),
                  timestamp=1_600_000_000 + i)
        m.close()
        print("done")
    """
    procs = [_run(tmp_path, writer, tag, "120", wait=False) for tag in ("p", "q")]
    reader = _open(tmp_path)
    seen_during = 0
    while any(p.poll() is None for p in procs):  # a third process searches while both write
        seen_during = max(seen_during, len(_texts(reader, "message about gardens", k=400)))
        time.sleep(0.01)
    for p in procs:
        out, err = p.communicate()
        assert p.returncode == 0, err
        assert "database is locked" not in err and out.strip() == "done"
    turns = {t.turn_id for user in ("u", "p", "q") for t in reader.store.turns(user)}
    assert turns == {f"{tag}-{i}" for tag in ("p", "q") for i in range(120)}
    assert len(_texts(reader, "message about gardens", k=400)) == 120  # user u: the odd turns of both writers
    assert len(reader.get_all("p")) == len(reader.get_all("q")) == 60
    assert seen_during > 0
    reader.close()


def test_consolidation_in_another_process_reaches_searches_here(tmp_path):
    a = _open(tmp_path, ltm=LTMOptions(background=False))
    facts = ["Mia adopted a dog named Rex", "Mia walks Rex in the park every morning", "Rex is a golden retriever",
             "Mia works as a nurse at the city hospital", "Mia likes painting sunsets"]
    for i, f in enumerate(facts * 3):
        a.add({"text": f, "id": f"t{i}"}, user_id="u", timestamp=T0 + 3600 * i)
    before = a.retrieve("golden retriever dog", "u", k=10)
    assert len(a.ltm.graph) == 0 and not any(h.item.id.startswith("ltm:") for h in before.hits)
    _run(tmp_path, """
        from lightmem.ltm import LTMOptions
        m.close()
        m = Memory.open(sys.argv[1], embedder=HashingEmbedder(64), selector=Stage1Selector(), ltm=LTMOptions(background=False))
        print(len(m.consolidate("u")))
        m.close()
    """)
    after = a.retrieve("golden retriever dog", "u", k=10)
    assert len(a.ltm.graph) > 0  # the graph reloaded after the other process's cycle
    live = {it.id for it in a.get_all("u")}
    assert all(h.item.id in live for h in after.hits if not h.item.id.startswith("ltm:"))  # nothing archived leaks
    a.close()


def test_a_process_left_behind_by_pruning_rebuilds_its_indexes(tmp_path):
    a = _open(tmp_path)
    a.add("an early note about kites", user_id="u", timestamp=T0)
    assert _texts(a, "kites") == ["an early note about kites"]
    _run(tmp_path, """
        m.close()
        m = Memory.open(sys.argv[1], embedder=HashingEmbedder(64), selector=Stage1Selector(), keep_changes=0)
        for i in range(5):
            m.add(f"kites flown on day {i}", user_id="u", timestamp=1_600_000_100 + i)
        m.delete(m.get_all("u")[0].id, "u")
        m.close()   # keeps none of the log the other process would replay
    """)
    assert sorted(_texts(a, "kites")) == sorted(f"kites flown on day {i}" for i in range(5))
    a.close()


def test_a_schema_1_store_is_upgraded_and_its_changes_are_logged(tmp_path):
    import sqlite3

    _open(tmp_path).close()
    con = sqlite3.connect(tmp_path / "lightmem.sqlite")  # what lightmem before the change log wrote
    con.executescript("DROP TABLE item_changes; DROP TRIGGER items_changes_insert; DROP TRIGGER items_changes_delete;"
                      "DROP TRIGGER items_changes_update; UPDATE meta SET value = '1' WHERE key = 'schema_version';")
    con.close()
    a = _open(tmp_path)
    assert a.store.info()["schema_version"] == "5"
    a.add("a note about owls", user_id="u", timestamp=T0)
    _run(tmp_path, 'm.add("owls hunt at night", user_id="u", timestamp=1_600_000_100); m.close()')
    assert set(_texts(a, "owls")) == {"a note about owls", "owls hunt at night"}
    a.close()
