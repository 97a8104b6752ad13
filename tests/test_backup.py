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
from pathlib import Path

import pytest

from lightmem.cli import main
from lightmem.errors import LightMemError, StoreCorruptError
from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.roles.selector import Stage1Selector
from lightmem.stores.embedded.backup import backup, restore, without_password

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
T0 = 1_600_000_000
WRITER = textwrap.dedent(
    """
    import sys
    from lightmem.memory import Memory
    from lightmem.models.embedder import HashingEmbedder
    from lightmem.roles.selector import Stage1Selector
    m = Memory.open(sys.argv[1], embedder=HashingEmbedder(64), selector=Stage1Selector(), synchronous="NORMAL")
    for i in range(100_000):  # one turn (and its item) per transaction
        m.add({"speaker": "u", "text": f"turn number {i}", "id": f"T{i}"}, user_id="u", timestamp=1_600_000_000 + i)
        print(i, flush=True)
    """
)


def _open(store: Path | str) -> Memory:
    return Memory.open(store, embedder=HashingEmbedder(64), selector=Stage1Selector())


def _fill(store: Path, user: str = "u", n: int = 10) -> None:
    with _open(store) as m:
        m.add([{"speaker": user, "text": f"{user} note {i} about herons", "id": f"{user}{i}"} for i in range(n)],
              user_id=user, timestamp=T0)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


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
