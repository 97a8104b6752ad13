"""The store survives close/reopen and SIGKILL: SQLite is the truth, indexes are rebuilt."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder

TEXTS = [f"Turn {i}: {w} went to the {p} on day {i}" for i, (w, p) in enumerate(
    [("Ava", "park"), ("Ben", "museum"), ("Cleo", "bakery"), ("Dan", "harbour"), ("Eve", "library")] * 8)]
QUERIES = ["who went to the museum", "bakery day 12", "library", "Ava park"]


def _search_all(m: Memory, user: str):
    return [[(h.item.id, round(h.score, 9), round(h.scores["dense"], 5)) for h in m.search(q, user, k=7)] for q in QUERIES]


def test_close_and_reopen_gives_identical_results(tmp_path):
    m = Memory.open(tmp_path, embedder=HashingEmbedder(64))
    for i, t in enumerate(TEXTS):
        m.add(t, user_id="u", timestamp=1_600_000_000 + 3600 * i)
    victim = m.get_all("u")[3]
    m.delete(victim.id, "u")
    m.archive(m.get_all("u")[5].id, "u")
    before, items_before = _search_all(m, "u"), m.get_all("u", include_archived=True)
    m.close()
    m2 = Memory.open(tmp_path, embedder=HashingEmbedder(64))
    assert _search_all(m2, "u") == before
    assert [i.id for i in m2.get_all("u", include_archived=True)] == [i.id for i in items_before]
    assert all(victim.id not in [h.item.id for h in m2.search(q, "u", k=50)] for q in QUERIES)
    m2.close()


def test_reopen_with_another_embedder_is_refused(tmp_path):
    import pytest

    from lightmem.errors import StoreError

    Memory.open(tmp_path, embedder=HashingEmbedder(64)).close()
    with pytest.raises(StoreError, match="embedder"):
        Memory.open(tmp_path, embedder=HashingEmbedder(32))


WRITER = textwrap.dedent(
    """
    import sys
    from lightmem.memory import Memory
    from lightmem.models.embedder import HashingEmbedder
    m = Memory.open(sys.argv[1], embedder=HashingEmbedder(64))
    i = 0
    while True:
        m.add({"speaker": "u", "text": f"fact number {i} about topic {i % 7}", "id": f"T{i}"}, user_id="u", timestamp=1_600_000_000 + i)
        print(f"T{i}", flush=True)   # acknowledged: add() returned
        i += 1
    """
)


@pytest.mark.multiprocess
@pytest.mark.parametrize("background", ["1", "0"], ids=["background", "sync"])
def test_sigkill_mid_ingest_loses_no_acknowledged_turn(tmp_path, background):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    store = tmp_path / "store"
    proc = subprocess.Popen([sys.executable, str(script), str(store)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "LIGHTMEM_BACKGROUND_INDEX": background})
    acked = []
    deadline = time.time() + 120
    while len(acked) < 60 and time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        acked.append(line.strip())
    os.kill(proc.pid, signal.SIGKILL)  # mid-ingest: the writer is inside its next add()
    proc.wait()
    assert len(acked) >= 60, "writer did not start"
    m = Memory.open(store, embedder=HashingEmbedder(64))
    stored_turns = {t.turn_id for t in m.store.turns("u")}
    stored_prov = {p for it in m.get_all("u") for p in it.provenance}
    assert set(acked) <= stored_turns and set(acked) <= stored_prov
    assert len(stored_prov) == len(stored_turns)  # no turn without its item, no half batch
    hits = m.search("fact number 42", "u", k=3)
    assert any("fact number 42 " in h.item.text for h in hits)
    m.close()
