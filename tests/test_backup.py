"""Backup, restore and check: a consistent snapshot while another process writes; a restore that
checks the backup first, refuses to overwrite data by accident and never replays a stale log."""
from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from lightmem.cli import main
from lightmem.errors import LightMemError, StoreCorruptError
from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.stores.backup import backup, restore, without_password
from lightmem.stores.embedded import openlock
from lightmem.stores.embedded.openlock import StoreInUseError

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
T0 = 1_600_000_000
WRITER = textwrap.dedent(
    """
    import sys
    from lightmem.memory import Memory
    from lightmem.models.embedder import HashingEmbedder
    from lightmem.retrieval.stage2 import Stage1Selector
    m = Memory.open(sys.argv[1], embedder=HashingEmbedder(64), selector=Stage1Selector(), synchronous="NORMAL")
    for i in range(100_000):  # one turn (and its item) per transaction
        m.add({"speaker": "u", "text": f"turn number {i}", "id": f"T{i}"}, user_id="u", timestamp=1_600_000_000 + i)
        print(i, flush=True)
    """
)

# Adds one turn per transaction and prints its number once `add` returned (acknowledged), until STOP exists.
STOPPABLE_WRITER = textwrap.dedent(
    """
    import os, sys
    from lightmem.memory import Memory
    from lightmem.models.embedder import HashingEmbedder
    from lightmem.retrieval.stage2 import Stage1Selector
    m = Memory.open(sys.argv[1], embedder=HashingEmbedder(64), selector=Stage1Selector(), synchronous="NORMAL")
    i = 0
    while not os.path.exists(sys.argv[2]):
        m.add({"speaker": "w", "text": f"written turn {i}", "id": f"W{i}"}, user_id="w", timestamp=1_600_000_000 + i)
        print(i, flush=True)
        i += 1
    m.close()
    """
)
CLI = [sys.executable, "-m", "lightmem.cli"]


def _open(store: Path | str) -> Memory:
    return Memory.open(store, embedder=HashingEmbedder(64), selector=Stage1Selector())


def _fill(store: Path, user: str = "u", n: int = 10) -> None:
    with _open(store) as m:
        m.add([{"speaker": user, "text": f"{user} note {i} about herons", "id": f"{user}{i}"} for i in range(n)],
              user_id=user, timestamp=T0)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.multiprocess
def test_a_backup_taken_while_another_process_writes_holds_a_consistent_prefix(tmp_path):
    store, out = tmp_path / "store", tmp_path / "backup.sqlite"
    _open(store).close()
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(store)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=ENV)
    try:
        acked = -1
        while acked < 30:  # turns 0..30 are committed before the backup starts
            line = writer.stdout.readline()
            assert line, writer.stderr.read()
            acked = int(line)
        summary = backup(store, out)
        while acked < summary.turns + 30:  # and the writer went on committing after the snapshot
            acked = int(writer.stdout.readline())
        assert writer.poll() is None
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    con = sqlite3.connect(out)
    turns = [r[0] for r in con.execute("SELECT turn_id FROM turns ORDER BY pk")]
    items = dict(con.execute("SELECT provenance, text FROM items"))
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    m = len(turns)
    assert m > 30 and turns == [f"T{i}" for i in range(m)]  # exactly 0..m-1: a prefix, nothing half
    assert all(items[f'["T{i}"]'] == f"u: turn number {i}" for i in range(m)) and len(items) == m  # each turn with its item
    with _open(out) as copy:  # a backup is a store
        assert copy.search(f"turn number {m - 1}", "u", k=1)[0].item.text == f"u: turn number {m - 1}"


def test_backup_never_overwrites_a_file_unless_forced(tmp_path, capsys):
    store, out = tmp_path / "store", tmp_path / "b.sqlite"
    _fill(store)
    out.write_text("an older backup")
    assert main(["backup", "--store", str(store), str(out)]) == 2
    assert "exists" in capsys.readouterr().err and out.read_text() == "an older backup"
    assert main(["backup", "--store", str(store), str(out), "--force"]) == 0
    assert "10 turns, 10 items" in " ".join(capsys.readouterr().err.split())


@pytest.mark.multiprocess
def test_restore_replaces_a_store_only_when_forced_and_drops_its_stale_log(tmp_path, capsys):
    store, other, saved = tmp_path / "store", tmp_path / "other", tmp_path / "saved.sqlite"
    _fill(other, user="saved")
    backup(other, saved)
    _fill(store, user="old")
    # a writer killed mid-work leaves a -wal holding commits; SQLite would replay it onto a new file
    subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import os, sys
        from lightmem.memory import Memory
        from lightmem.models.embedder import HashingEmbedder
        m = Memory.open(sys.argv[1], embedder=HashingEmbedder(64))
        m.store.sql.connection.execute("PRAGMA wal_autocheckpoint = 0")
        m.add("only in the log", user_id="logged", timestamp=1_600_000_000)
        os.kill(os.getpid(), 9)
    """), str(store)], env=ENV, check=False)
    assert (store / "lightmem.sqlite-wal").stat().st_size > 0
    assert main(["restore", str(saved), "--store", str(store)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "holds 2 users, 11 turns" in err and "add --force" in err
    assert main(["restore", str(saved), "--store", str(store), "--force"]) == 0
    assert not (store / "lightmem.sqlite-wal").exists() and not (store / "lightmem.sqlite-shm").exists()
    with _open(store) as m:
        assert m.store.users() == ["saved"] and len(m.get_all("saved")) == 10
    assert main(["check", "--store", str(store)]) == 0


def test_restore_checks_the_backup_first_and_leaves_the_store_alone_when_it_is_bad(tmp_path, capsys):
    store, saved = tmp_path / "store", tmp_path / "saved.sqlite"
    _fill(store)
    backup(store, saved)
    db = store / "lightmem.sqlite"
    digest = _digest(db)
    con = sqlite3.connect(saved)
    leaf = con.execute("SELECT pageno FROM dbstat WHERE name = 'items' AND pagetype = 'leaf'").fetchone()[0]
    con.close()
    with saved.open("r+b") as f:
        f.seek((leaf - 1) * 4096)
        f.write(b"\xa5" * 4096)
    with pytest.raises(StoreCorruptError, match="nothing was restored"):
        restore(saved, store, force=True)
    not_ours = tmp_path / "notes.db"
    sqlite3.connect(not_ours).execute("CREATE TABLE notes (t TEXT)").connection.close()
    assert main(["restore", str(not_ours), "--store", str(store), "--force"]) == 2
    assert "not a lightmem" in " ".join(capsys.readouterr().err.split())
    assert _digest(db) == digest


def test_a_corrupt_store_is_recovered_from_its_backup(tmp_path, capsys):
    store, saved = tmp_path / "store", tmp_path / "saved.sqlite"
    _fill(store)
    backup(store, saved)
    with (store / "lightmem.sqlite").open("r+b") as f:
        f.write(b"\0" * 100)  # the header
    assert main(["stats", "--store", str(store)]) == 2
    assert main(["restore", str(saved), "--store", str(store)]) == 2  # it cannot be read: --force is asked for
    assert "cannot be read" in " ".join(capsys.readouterr().err.split())
    assert main(["restore", str(saved), "--store", str(store), "--force"]) == 0
    assert main(["search", "herons", "--user", "u", "--store", str(store), "--selector", "none", "--json"]) == 0


def test_a_postgresql_store_is_backed_up_with_pg_dump_and_the_password_is_never_printed(capsys):
    uri = "postgresql://bob:s3cret@db.example:5432/memory?sslmode=require"
    assert main(["backup", "--store", uri, "mem.dump"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert ("pg_dump --format=custom --file=mem.dump 'postgresql://bob@db.example:5432/memory?sslmode=require'" in err)
    assert main(["restore", "mem.dump", "--store", uri]) == 2
    err += " ".join(capsys.readouterr().err.split())
    assert "pg_restore --clean --if-exists --no-owner --dbname='postgresql://bob@db.example:5432/memory?sslmode=require' mem.dump" in err
    assert "s3cret" not in err
    assert without_password("postgresql://bob@h/db?password=x&sslmode=require") == "postgresql://bob@h/db?sslmode=require"


def test_backup_of_a_missing_store_says_so(tmp_path):
    with pytest.raises(LightMemError, match="no lightmem store"):
        backup(tmp_path / "nothing", tmp_path / "b.sqlite")


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.multiprocess
@pytest.mark.parametrize("background", ["1", "0"], ids=["background", "sync"])
def test_restore_refuses_while_another_process_writes_and_no_acknowledged_write_is_lost(tmp_path, background):
    store, other, saved, stop = tmp_path / "store", tmp_path / "other", tmp_path / "saved.sqlite", tmp_path / "stop"
    _fill(other, user="saved")
    backup(other, saved)
    _fill(store, user="old")
    writer = subprocess.Popen([sys.executable, "-c", STOPPABLE_WRITER, str(store), str(stop)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**ENV, "LIGHTMEM_BACKGROUND_INDEX": background})
    acked: list[int] = []
    try:
        while len(acked) < 5:
            line = writer.stdout.readline()
            assert line, writer.stderr.read()
            acked.append(int(line))
        refused = subprocess.run([*CLI, "restore", str(saved), "--store", str(store), "--force"], capture_output=True,
                                 text=True, env=ENV, timeout=300)
        during = len(acked)
        while len(acked) < during + 5:  # the writer goes on, acknowledged, after the refusal
            acked.append(int(writer.stdout.readline()))
    finally:
        stop.touch()
        out, err = writer.communicate(timeout=120)
    acked += [int(line) for line in out.split()]
    assert writer.returncode == 0, err
    assert refused.returncode == 2
    message = _flat(refused.stderr)
    assert f"another process has it open (pid {writer.pid} " in message and "Nothing was changed" in message, message
    assert "Stop it" in message and "--force" in message
    with _open(store) as m:  # every acknowledged turn is there, and the old store is untouched
        stored = {t.turn_id for t in m.store.turns("w")}
        assert {f"W{i}" for i in acked} <= stored and len(acked) >= 10
        assert m.store.users() == ["old", "w"] and len(m.get_all("old")) == 10
    done = subprocess.run([*CLI, "restore", str(saved), "--store", str(store), "--force"], capture_output=True,
                          text=True, env=ENV, timeout=300)
    assert done.returncode == 0, done.stderr  # once the writer has stopped
    message = _flat(done.stderr)
    assert f"replaced {(store / 'lightmem.sqlite').resolve()}, which held 2 users, {10 + len(stored)} turns" in message
    assert "that copy is not kept" in message
    with _open(store) as m:
        assert m.store.users() == ["saved"]


@pytest.mark.multiprocess
def test_restore_finds_a_process_that_holds_the_database_without_lightmems_lock(tmp_path, capsys):
    store, saved = tmp_path / "store", tmp_path / "saved.sqlite"
    _fill(store)
    backup(store, saved)
    db = store / "lightmem.sqlite"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sqlite3, sys
        con = sqlite3.connect(sys.argv[1])  # an older lightmem, the sqlite3 shell: no lock file
        con.execute("SELECT count(*) FROM turns").fetchall()
        print("open", flush=True)
        sys.stdin.read()
    """), str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        assert main(["restore", str(saved), "--store", str(store), "--force"]) == 2
        message = _flat(capsys.readouterr().err)
        assert "with an SQLite connection" in message and f"pid {holder.pid}" in message
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    with _open(store):  # this process's own open store counts too
        with pytest.raises(StoreInUseError, match="this process"):
            restore(saved, store, force=True)
    assert main(["restore", str(saved), "--store", str(store), "--force"]) == 0


@pytest.mark.multiprocess
def test_a_store_opened_during_a_restore_waits_for_it(tmp_path):
    store = tmp_path / "store"
    _fill(store)
    db = store / "lightmem.sqlite"
    opener = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys, time
        from lightmem.memory import Memory
        from lightmem.models.embedder import HashingEmbedder
        from lightmem.retrieval.stage2 import Stage1Selector
        print("opening", flush=True)
        with Memory.open(sys.argv[1], embedder=HashingEmbedder(64), selector=Stage1Selector()) as m:
            print(time.time(), len(m.get_all("u")), flush=True)
    """), str(store)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    with openlock.hold_exclusive(db, str(store)):  # what restore holds while it replaces the file
        with pytest.raises(StoreInUseError, match="being restored by another process"):
            openlock.hold_shared(db, str(store), wait_s=0.2)
        assert opener.stdout.readline().strip() == "opening"
        time.sleep(1.0)
        released = time.time()
    out, err = opener.communicate(timeout=120)
    assert opener.returncode == 0, err
    opened, items = out.split()
    assert float(opened) >= released and int(items) == 10


def test_restore_onto_a_symbolic_link_replaces_the_file_it_points_to(tmp_path, capsys):
    real, link = tmp_path / "real" / "mem.sqlite", tmp_path / "link.sqlite"
    other, saved = tmp_path / "other", tmp_path / "saved.sqlite"
    _fill(other, user="saved", n=3)
    backup(other, saved)
    _fill(real, user="old")
    link.symlink_to(real)
    assert main(["restore", str(saved), "--store", str(link), "--force"]) == 0
    message = _flat(capsys.readouterr().err)
    assert f"{link} is a symbolic link: the backup was written to the file it points to, {real.resolve()}" in message
    assert f"replaced {real.resolve()}, which held 1 user, 10 turns, 10 items" in message
    assert link.is_symlink() and link.resolve() == real.resolve()
    with _open(real) as m:
        assert m.store.users() == ["saved"] and len(m.get_all("saved")) == 3
    assert not (tmp_path / ".link.sqlite.lock").exists() and (tmp_path / "real" / "mem.sqlite.lock").exists()


def test_compact_shrinks_an_embedded_store_after_a_deletion(tmp_path, capsys):
    store = tmp_path / "store"
    _fill(store, user="a", n=200)
    _fill(store, user="b", n=5)
    db = store / "lightmem.sqlite"
    with _open(store) as m:
        for item in m.get_all("a"):  # one by one: each deletion leaves its pages free (zeroed) in the file
            m.delete(item.id, "a")
    before = db.stat().st_size
    assert main(["compact", "--store", str(store)]) == 0
    message = _flat(capsys.readouterr().err)
    assert f"compacted {store}" in message and "VACUUM; wal_checkpoint(TRUNCATE)" in message
    assert "not cleared" not in message
    wal = Path(f"{db}-wal")
    assert db.stat().st_size < before and (not wal.exists() or wal.stat().st_size == 0)
    with _open(store) as m:
        assert m.store.users() == ["b"] and len(m.get_all("b")) == 5
    assert main(["compact", "--store", str(tmp_path / "none")]) == 2


def test_a_users_erasure_leaves_the_file_compacted(tmp_path):
    """delete_user rebuilds the file itself (too many texts to look for in the pages' unused space)."""
    store = tmp_path / "store"
    _fill(store, user="a", n=200)
    _fill(store, user="b", n=5)
    db = store / "lightmem.sqlite"
    before = db.stat().st_size
    with _open(store) as m:
        m.delete_user("a")
        after = db.stat().st_size
        assert after < before and len(m.get_all("b")) == 5
    assert main(["compact", "--store", str(store)]) == 0
    assert db.stat().st_size == after  # nothing left for compact to reclaim
