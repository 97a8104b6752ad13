"""A view snapshot never outlives an erasure: one process keeps rebuilding users' views (and writing
their snapshots) while another deletes or redacts their items, and afterwards no file of the store
holds an erased memory's words.

The race it guards against: process A reads a user's view at change-log position P; process B erases
an item at P+1 (dropping the user's snapshot); A then writes the snapshot of P, which still holds the
item's vector and BM25 terms. Searches never return it (the change since P is replayed), but its bytes
stay in the file, and in every backup made from it.
"""
from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector

pytestmark = pytest.mark.multiprocess

USERS = 4
ITEMS = 40  # above the snapshot threshold below: every rebuild writes a snapshot
BUILD_S = 0.4  # how long A's snapshot write waits after the view was read (a large view's build time)
GAP_S = 0.1  # B's second erasure, this long after the first: inside A's rebuild

PRELUDE = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from lightmem.memory import Memory
    from lightmem.models.embedder import HashingEmbedder
    from lightmem.retrieval.stage2 import Stage1Selector
    m = Memory.open(sys.argv[1], embedder=HashingEmbedder(64), selector=Stage1Selector(), synchronous="NORMAL",
                    snapshot_min_items=30, word_scorer=None)
    stop, users = Path(sys.argv[2]), sys.argv[3].split(",")
    ready = stop.with_name("ready")
    """
)

# A: rebuild every user's view again and again; each rebuild without a snapshot writes one, BUILD_S
# after the view was read.
REBUILDER = """
build_s = float(sys.argv[4])
real = m.store.sql.put_view_snapshot
m.store.sql.put_view_snapshot = lambda *a, **k: (time.sleep(build_s), real(*a, **k))[1]
while not stop.exists():
    for u in users:
        m.store.drop_views()
        m.search("trip lessons", user_id=u, k=1)
    ready.touch()
m.close()
"""

# B: per user, erase one item (its snapshot goes, so A rebuilds the view), then, while A builds it,
# erase a second one: a deletion, or (every other user) an update that forgets the old text (B's own
# view then reloads and writes a snapshot, which A's must not replace). Then wait until the user has a
# snapshot again before going on.
ERASER = """
from lightmem.text import analyze
gap_s = float(sys.argv[4])
pairs = [p.split(":") for p in sys.argv[5].split(",")]
analyze("warming up")  # the stemmer loads now, not between the two erasures of a round
while not ready.exists():  # A is rebuilding
    time.sleep(0.02)
for i, (u, first, second) in enumerate(pairs):
    m.delete(first, user_id=u)
    time.sleep(gap_s)
    if i % 2:
        m.update(second, user_id=u, text="a memory its user asked to forget")
    else:
        m.delete(second, user_id=u)
    end = time.monotonic() + 30
    while m.store.sql.view_snapshot(u) is None and time.monotonic() < end:
        time.sleep(0.02)
stop.touch()
m.close()
"""


@pytest.fixture(autouse=True)
def indexing(monkeypatch):
    """The shipped default: the background indexer on, in this process and in those the tests start (they
    inherit it); nothing these tests check differs without it (tests/test_background_index.py covers both)."""
    monkeypatch.setenv("LIGHTMEM_BACKGROUND_INDEX", "1")


def _open(path: Path) -> Memory:
    return Memory.open(str(path), embedder=HashingEmbedder(64), selector=Stage1Selector(), synchronous="NORMAL",
                       snapshot_min_items=30, word_scorer=None)


def _word(user: int, item: int) -> str:
    """A word only this item's text holds (the analyzer keeps it whole)."""
    return f"zqx{chr(97 + user)}{chr(97 + item)}blik"


def _spawn(body: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", PRELUDE + textwrap.dedent(body), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_snapshot_written_while_another_process_erases_holds_no_erased_item(tmp_path):
    store, stop = tmp_path / "store", tmp_path / "stop"
    users = [f"u{u}" for u in range(USERS)]
    pairs = []
    with _open(store) as memory:
        for u, user in enumerate(users):
            items = memory.add([{"speaker": "Ana", "text": f"On trip {i} I took lessons in town {i}."}
                                for i in range(ITEMS)], user_id=user)
            # the unique words go in by an update that forgets the old text: no turn and no history holds them
            for i in (0, 1, 2):
                memory.update(items[i].id, user_id=user, text=f"On that trip I learned {_word(u, i)} there.")
            pairs.append(f"{user}:{items[0].id}:{items[1].id}")
        memory.store.drop_views()
        for user in users:  # each view rebuilt, and its snapshot written (with the words to erase)
            memory.search("trip lessons", user_id=user, k=1)
            assert memory.store.sql.view_snapshot(user)[1] == ITEMS

    common = (str(store), str(stop), ",".join(users))
    rebuilder = _spawn(REBUILDER, *common, str(BUILD_S))
    eraser = _spawn(ERASER, *common, str(GAP_S), ",".join(pairs))
    try:
        _, err = eraser.communicate(timeout=120)
        assert eraser.returncode == 0, err
        _, err = rebuilder.communicate(timeout=60)
        assert rebuilder.returncode == 0, err
    finally:
        for p in (eraser, rebuilder):
            if p.poll() is None:
                p.kill()
                p.communicate()

    # Every process closed: the words of every erased text are in no file of the store.
    data = b"".join(p.read_bytes() for p in store.iterdir() if p.is_file())
    leaked = [(user, i) for u, user in enumerate(users) for i in (0, 1) if _word(u, i).encode() in data]
    assert leaked == []
    assert all(_word(u, 2).encode() in data for u in range(USERS))  # the check finds a kept item's word
    # Not vacuous: A wrote every user's snapshot again after the erasures, without the erased items.
    raw = sqlite3.connect(store / "lightmem.sqlite")
    try:
        sizes = dict(raw.execute("SELECT user_id, n FROM view_snapshots").fetchall())
    finally:
        raw.close()
    assert sizes == {user: ITEMS - 2 if u % 2 == 0 else ITEMS - 1 for u, user in enumerate(users)}
