"""Restore through a hard link (issue 65): a store file reached through more than one name.

A process that opens the store through another name (a hard link to ``lightmem.sqlite`` in another
folder) takes the lock beside that name and writes its own ``-wal`` / ``-shm`` there, so ``restore``
looking beside the name it was given saw nobody, exited 0, and the writer's acknowledged turns went on
into the replaced (unlinked) file. The check is by the file's identity: a file with more than one name
(``st_nlink > 1``) is never restored over, and a store is not opened through it (SQLite keeps a
separate log per name: two processes opening it through different names would corrupt it)."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lightmem.cli import main
from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.stores.backup import backup, restore
from lightmem.stores.embedded import openlock

pytestmark = pytest.mark.skipif(not hasattr(os, "link"), reason="needs hard links")

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
CLI = [sys.executable, "-m", "lightmem.cli"]
T0 = 1_600_000_000

# Opens the store, says "open" (or "refused: why" and exits 3), then adds one turn per transaction and prints
# its number once `add` returned (acknowledged), until the file STOP exists. With a third argument, waits for
# that file to exist before its first add (the test makes the hard link meanwhile).
WRITER = textwrap.dedent(
    """
    import os, sys, time
    from lightmem.memory import Memory
    from lightmem.models.embedder import HashingEmbedder
    from lightmem.retrieval.stage2 import Stage1Selector
    try:
        m = Memory.open(sys.argv[1], embedder=HashingEmbedder(64), selector=Stage1Selector(), synchronous="NORMAL")
    except Exception as exc:
        print("refused:", " ".join(str(exc).split()), flush=True)
        raise SystemExit(3)
    print("open", flush=True)
    while len(sys.argv) > 3 and not os.path.exists(sys.argv[3]):
        time.sleep(0.01)
    i = 0
    while not os.path.exists(sys.argv[2]):
        m.add({"speaker": "w", "text": f"written turn {i}", "id": f"W{i}"}, user_id="w", timestamp=1_600_000_000 + i)
        print(i, flush=True)
        i += 1
    m.close()
    """
)


def _flat(text: str) -> str:
    return " ".join(text.split())


def _open(store: Path | str) -> Memory:
    return Memory.open(store, embedder=HashingEmbedder(64), selector=Stage1Selector())


def _fill(store: Path, user: str, n: int = 10) -> None:
    with _open(store) as m:
        m.add([{"speaker": user, "text": f"{user} note {i} about herons", "id": f"{user}{i}"} for i in range(n)],
              user_id=user, timestamp=T0)


def _stored_turns(db: Path, user: str) -> set[str]:
    """The user's turn ids in the database file ``db``, read with SQLite alone (the file may have two names)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {r[0] for r in con.execute("SELECT turn_id FROM turns WHERE user_id = ?", (user,))}
    finally:
        con.close()


def _saved(tmp_path: Path) -> Path:
    other, saved = tmp_path / "other", tmp_path / "saved.sqlite"
    _fill(other, user="saved", n=3)
    backup(other, saved)
    return saved


def _acks(writer: subprocess.Popen, want: int) -> tuple[list[int], str | None]:
    """The turn numbers the writer acknowledged, read until ``want`` of them; or its refusal to open."""
    acked: list[int] = []
    while len(acked) < want:
        line = writer.stdout.readline().strip()
        assert line, writer.stderr.read()
        if line.startswith("refused:"):
            return acked, line
        if line != "open":
            acked.append(int(line))
    return acked, None


def _stop(writer: subprocess.Popen, stop: Path, acked: list[int]) -> None:
    stop.touch()
    out, err = writer.communicate(timeout=120)
    acked += [int(line) for line in out.split() if line.isdigit()]
    assert writer.returncode in (0, 3), err


@pytest.mark.multiprocess
@pytest.mark.parametrize("background", ["1", "0"], ids=["background", "sync"])
def test_restore_refuses_a_store_a_writer_opened_through_a_hard_link_and_loses_no_acknowledged_turn(tmp_path, background):
    # The attack of the issue: the writer opens the store through a hard link in another folder.
    store, linked, stop = tmp_path / "store", tmp_path / "linked", tmp_path / "stop"
    saved = _saved(tmp_path)
    _fill(store, user="old")
    db, alias = store / "lightmem.sqlite", linked / "lightmem.sqlite"
    linked.mkdir()
    os.link(db, alias)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(linked), str(stop)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**ENV, "LIGHTMEM_BACKGROUND_INDEX": background})
    acked: list[int] = []
    try:
        acked, refused_open = _acks(writer, 5)
        done = subprocess.run([*CLI, "restore", str(saved), "--store", str(store), "--force"], capture_output=True,
                              text=True, env=ENV, timeout=300)
        if refused_open is None:
            during = len(acked)
            more, _ = _acks(writer, 5)  # the writer goes on, acknowledged, after the refusal
            acked += more
            assert len(acked) >= during + 5
    finally:
        _stop(writer, stop, acked)
    assert done.returncode == 2, done.stderr  # refused, --force or not
    message = _flat(done.stderr)
    assert "hard link" in message and "Nothing was changed" in message, message
    assert str(db.resolve()) in message and "-samefile" in message  # how to find the other names
    if refused_open is not None:  # opening through a second name is refused too, saying why
        assert "hard link" in refused_open and "cannot open" in refused_open, refused_open
    assert os.path.samefile(db, alias)  # nothing was replaced
    stored = _stored_turns(db, "w")
    assert {f"W{i}" for i in acked} <= stored  # every acknowledged turn is in the store's file
    assert _stored_turns(db, "old") == {f"old{i}" for i in range(10)}
    alias.unlink()  # one name again: the store opens, and restore (no writer now) goes ahead
    with _open(store) as m:
        assert {t.turn_id for t in m.store.turns("w")} == stored
    assert main(["restore", str(saved), "--store", str(store), "--force"]) == 0
    with _open(store) as m:
        assert m.store.users() == ["saved"]


@pytest.mark.multiprocess
def test_restore_through_the_other_name_of_a_store_a_writer_has_open_is_refused(tmp_path):
    # The writer opened the store by its own name; a hard link made afterwards is the name restore is given.
    store, linked, stop, go = tmp_path / "store", tmp_path / "linked", tmp_path / "stop", tmp_path / "go"
    saved = _saved(tmp_path)
    _fill(store, user="old")
    db, alias = store / "lightmem.sqlite", linked / "lightmem.sqlite"
    # the writer as shipped, its background indexer on (the sync writer: the test above and tests/test_backup.py)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(store), str(stop), str(go)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**ENV, "LIGHTMEM_BACKGROUND_INDEX": "1"})
    acked: list[int] = []
    try:
        assert writer.stdout.readline().strip() == "open", writer.stderr.read()
        linked.mkdir()
        os.link(db, alias)
        go.touch()
        acked, refused_open = _acks(writer, 5)
        assert refused_open is None
        done = subprocess.run([*CLI, "restore", str(saved), "--store", str(linked), "--force"], capture_output=True,
                              text=True, env=ENV, timeout=300)
        more, _ = _acks(writer, 5)
        acked += more
    finally:
        _stop(writer, stop, acked)
    assert done.returncode == 2, done.stderr
    message = _flat(done.stderr)
    assert "hard link" in message and "Nothing was changed" in message, message
    assert os.path.samefile(db, alias)
    assert {f"W{i}" for i in acked} <= _stored_turns(alias, "w") and len(acked) >= 10


def test_a_store_file_with_a_second_name_is_neither_opened_nor_restored_over(tmp_path):
    store, linked = tmp_path / "store", tmp_path / "linked"
    saved = _saved(tmp_path)
    _fill(store, user="old")
    db = store / "lightmem.sqlite"
    linked.mkdir()
    os.link(db, linked / "lightmem.sqlite")
    for where in (store, linked):
        with pytest.raises(openlock.LinkedStoreError, match="hard link") as opening:
            _open(where)
        assert "cannot open" in str(opening.value) and str((where / "lightmem.sqlite").resolve()) in str(opening.value)
        with pytest.raises(openlock.LinkedStoreError, match="hard link"):
            restore(saved, where, force=True)
    with pytest.raises(openlock.LinkedStoreError, match="hard link"):  # a backup would miss the other name's log
        backup(linked, tmp_path / "copy.sqlite")
    # a backup that is the store itself under another name is refused as the store itself
    with pytest.raises(Exception, match="is the store itself"):
        restore(linked / "lightmem.sqlite", store, force=True)
    assert _stored_turns(db, "old") == {f"old{i}" for i in range(10)}
