"""Faults named for what they are: a full disk, a read-only store, a damaged file, SIGKILL inside a write.

Each fault is injected for real where this machine allows it (a small tmpfs, a read-only bind
mount: root with CAP_SYS_ADMIN) and portably otherwise: ``PRAGMA max_page_count`` makes SQLite
itself answer SQLITE_FULL ("database or disk is full"), and chmod makes a store read-only for a
user other than root. The ``lightmem`` command runs as a real process where its exit status and
output are the point; every test checks the answer (exit status and message, HTTP status and body)
and that what was stored before the fault is all there afterwards.

Related: test_persistence.py kills a writer at a random moment (no acknowledged turn is lost);
here the kill lands inside the transaction for certain.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from lightmem.cli import build_parser, main
from lightmem.errors import StoreFullError
from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.server import KeyRing, create_app
from lightmem.stores.embedded.faults import open_read_only

ROOT = Path(__file__).resolve().parents[1]
T0 = 1_600_000_000
KEY = "admin-key-0000000000001"
# The command as a user runs it, on this checkout's code.
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
# The same command with every store opened holding at most a few more pages than it has: SQLite
# answers SQLITE_FULL, as it does on a full disk.
PAGE_LIMITED_CLI = textwrap.dedent(
    """
    import sys
    from lightmem.stores.embedded.tables import SQLiteTables
    opened = SQLiteTables.__init__
    def limited(self, *args, **kwargs):
        opened(self, *args, **kwargs)
        pages = self.connection.execute("PRAGMA page_count").fetchone()[0]
        self.connection.execute(f"PRAGMA max_page_count = {pages + 4}")
    SQLiteTables.__init__ = limited
    from lightmem.cli import build_parser, main
    sys.exit(main(sys.argv[1:]))
    """
)


def lightmem(*args: str, script: str | None = None) -> subprocess.CompletedProcess:
    """Run the lightmem command in a new process; stderr with its lines unwrapped."""
    head = ["-c", script] if script else ["-m", "lightmem.cli"]
    env = {**os.environ, "PYTHONPATH": ENV["PYTHONPATH"]}  # as the test set it (LIGHTMEM_BACKGROUND_INDEX)
    done = subprocess.run([sys.executable, *head, *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=120)
    done.stderr = " ".join(done.stderr.split())
    return done


def _open(store: Path | str) -> Memory:
    return Memory.open(store, embedder=HashingEmbedder(64), selector=Stage1Selector())


def _turns_file(path: Path, n: int, first: int = 0, size: int = 300) -> Path:
    rows = [{"speaker": "me", "text": f"turn {i} of a long story " + "x" * size, "timestamp": T0 + i}
            for i in range(first, first + n)]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


def _counts(store: Path) -> dict[str, tuple[int, int]]:
    """Turns and items of each user, read straight from the file."""
    con = open_read_only(store / "lightmem.sqlite", str(store))
    try:
        return {u: (t, i) for u, t, i in con.execute(
            "SELECT user_id, (SELECT COUNT(*) FROM turns t WHERE t.user_id = u.user_id), "
            "(SELECT COUNT(*) FROM items i WHERE i.user_id = u.user_id) FROM (SELECT DISTINCT user_id FROM turns) u")}
    finally:
        con.close()


def _integrity(db: Path) -> str:
    con = open_read_only(db, str(db))  # also on a read-only mount
    try:
        return con.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        con.close()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _mount(*args: str) -> str | None:
    """Run mount; None when it worked, else why not."""
    if shutil.which("mount") is None:
        return "no mount command"
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    return None if done.returncode == 0 else (done.stderr.strip() or f"mount exited {done.returncode}")


def _umount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], check=True)


# -- a full disk -----------------------------------------------------------------------------------
class FullDisk:
    """A store whose disk can be filled and freed: a small tmpfs with a ballast file (``tmpfs``), or,
    where mounting is not allowed, SQLite's page limit (``page_limit``, the same SQLITE_FULL)."""

    def __init__(self, kind: str, root: Path) -> None:
        self.kind, self.root, self.full = kind, root, False
        self.store = root / "store"

    def fill(self, con: sqlite3.Connection | None = None) -> None:
        """Leave about 64 KB free (tmpfs), or cap the open store ``con`` near its size (page_limit)."""
        self.full = True
        if self.kind == "tmpfs":
            free = os.statvfs(self.root).f_bavail * os.statvfs(self.root).f_frsize
            (self.root / "ballast").write_bytes(b"\0" * max(free - (64 << 10), 0))
        elif con is not None:
            pages = con.execute("PRAGMA page_count").fetchone()[0]
            con.execute(f"PRAGMA max_page_count = {pages + 4}")

    def free(self, con: sqlite3.Connection | None = None) -> None:
        self.full = False
        if self.kind == "tmpfs":
            (self.root / "ballast").unlink()
        elif con is not None:
            con.execute("PRAGMA max_page_count = 1073741823")

    def lightmem(self, *args: str) -> subprocess.CompletedProcess:
        limited = self.kind == "page_limit" and self.full
        return lightmem(*args, script=PAGE_LIMITED_CLI if limited else None)


@pytest.fixture(params=["tmpfs", "page_limit"])
def full_disk(request, tmp_path) -> Iterator[FullDisk]:
    root = tmp_path / "disk"
    root.mkdir()
    if request.param == "tmpfs":
        why = _mount("-t", "tmpfs", "-o", "size=16m", "tmpfs", str(root))
        if why is not None:
            pytest.skip(f"cannot mount a small tmpfs here ({why}); the page_limit case injects the same SQLITE_FULL")
    try:
        yield FullDisk(request.param, root)
    finally:
        if request.param == "tmpfs":
            _umount(root)


@pytest.mark.multiprocess
@pytest.mark.parametrize("background", ["1", "0"], ids=["background", "sync"])
def test_a_full_disk_exits_3_saying_so_and_loses_nothing(full_disk, tmp_path, background, monkeypatch):
    monkeypatch.setenv("LIGHTMEM_BACKGROUND_INDEX", background)  # the indexer writes vectors on its own thread
    store = full_disk.store
    assert main(["ingest", str(_turns_file(tmp_path / "a.jsonl", 20)), "--store", str(store), "--user", "me",
                 "--encoder", "hashing", "-q"]) == 0
    before = _counts(store)
    big = _turns_file(tmp_path / "b.jsonl", 1000, first=20)
    full_disk.fill()
    done = full_disk.lightmem("ingest", big, "--store", store, "--user", "me", "-q")
    assert done.returncode == 3, done.stderr
    assert "3 a full disk" in " ".join(build_parser().format_help().split())  # the status is documented
    db = store / "lightmem.sqlite"
    assert f"the disk holding the lightmem store at {db} is full" in done.stderr
    assert "nothing of this write was stored" in done.stderr and "skips the turns already stored" in done.stderr
    assert "Traceback" not in done.stderr and "cannot rollback" not in done.stderr
    assert _counts(store) == before and _integrity(db) == "ok"  # intact
    full_disk.free()
    again = full_disk.lightmem("ingest", big, "--store", store, "--user", "me", "-q")
    assert again.returncode == 0, again.stderr
    assert _counts(store) == {"me": (1020, 1020)} and _integrity(db) == "ok"


def test_a_full_disk_answers_507_and_the_request_after_freeing_space_works(full_disk):
    messages = [{"speaker": "Ann", "text": f"line {i} " + "y" * 2000} for i in range(200)]
    app = create_app(lambda: _open(full_disk.store), KeyRing({KEY: ["*"]}), max_body_bytes=8 << 20)
    auth = {"Authorization": f"Bearer {KEY}"}
    with TestClient(app) as client:
        con = client.app.state.memory.store.sql.connection
        assert client.post("/v1/memories", headers=auth, json={"user_id": "ann", "messages": [
            {"speaker": "Ann", "text": "my locker is number 12"}]}).status_code == 201
        full_disk.fill(con)
        r = client.post("/v1/memories", headers=auth, json={"user_id": "ann", "messages": messages})
        assert r.status_code == 507
        assert "is full" in r.json()["detail"] and "nothing of this write was stored" in r.json()["detail"]
        kept = client.get("/v1/memories", headers=auth, params={"user_id": "ann"}).json()["items"]
        assert [i["text"] for i in kept] == ["Ann: my locker is number 12"]
        full_disk.free(con)
        assert client.post("/v1/memories", headers=auth, json={"user_id": "ann", "messages": messages}).status_code == 201
        assert len(client.get("/v1/memories", headers=auth, params={"user_id": "ann", "limit": 1000}).json()["items"]) == 201


def test_a_full_disk_is_an_error_result_an_mcp_client_can_read(full_disk):
    import asyncio

    from mcp.client import Client

    from lightmem.server.mcp_server import create_mcp_server

    async def calls(memory: Memory) -> tuple:
        async with Client(create_mcp_server(memory, "alice")) as client:
            full_disk.fill(memory.store.sql.connection)
            failed = await client.call_tool("add_memory", {"text": "a long story " * 5000})
            full_disk.free(memory.store.sql.connection)
            return failed, await client.call_tool("add_memory", {"text": "a long story " * 5000})

    with _open(full_disk.store) as m:
        failed, written = asyncio.run(calls(m))
    assert failed.is_error and "is full" in failed.content[0].text  # was: "Error executing tool add_memory"
    assert not written.is_error


def test_a_full_postgresql_disk_is_named_too(pg_uri, tmp_path, capsys):
    import psycopg

    with _open(pg_uri) as m:
        m.add("kept before the disk filled", user_id="u", timestamp=T0)
        with psycopg.connect(pg_uri, autocommit=True) as c:  # the server's own answer to a full disk: SQLSTATE 53100
            c.execute("CREATE FUNCTION disk_full() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                      "RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = 'disk_full'; END $$")
            c.execute("CREATE TRIGGER disk_full BEFORE INSERT ON items FOR EACH ROW EXECUTE FUNCTION disk_full()")
        with pytest.raises(StoreFullError, match="PostgreSQL server .* is full"):
            m.add("lost to the full disk", user_id="u", timestamp=T0 + 1)
        assert [t.text for t in m.store.turns("u")] == ["kept before the disk filled"]  # the turn rolled back with its item
        assert main(["ingest", str(_turns_file(tmp_path / "a.jsonl", 3)), "--store", pg_uri, "--user", "u", "-q"]) == 3
        assert "nothing of this write was stored" in " ".join(capsys.readouterr().err.split())
        with psycopg.connect(pg_uri, autocommit=True) as c:
            c.execute("DROP TRIGGER disk_full ON items")
        m.add("written once space is back", user_id="u", timestamp=T0 + 2)
        assert len(m.get_all("u")) == 2


# -- a read-only store -----------------------------------------------------------------------------
@pytest.fixture
def read_only_store(tmp_path) -> Iterator[Path]:
    """A store with 20 items of user u that this process cannot write: a read-only bind mount as
    root (root ignores file permissions), chmod otherwise."""
    src, ro = tmp_path / "src", tmp_path / "ro"
    with _open(src) as m:
        for i in range(20):
            m.add(f"fact {i} about sailing boats", user_id="u", timestamp=T0 + i)
    if os.geteuid() != 0:
        (src / "lightmem.sqlite").chmod(0o444)
        src.chmod(0o555)
        try:
            yield src
        finally:
            src.chmod(0o755)
        return
    ro.mkdir()
    why = _mount("--bind", str(src), str(ro))
    if why is None:
        why = _mount("-o", "remount,bind,ro", str(ro))
        if why is not None:
            _umount(ro)
    if why is not None:
        pytest.skip(f"as root only a read-only mount makes a store read-only, and mounting is not allowed here ({why})")
    try:
        yield ro
    finally:
        _umount(ro)


@pytest.mark.multiprocess
def test_a_read_only_store_is_searched_and_its_writes_are_refused_as_read_only(read_only_store, tmp_path):
    db = read_only_store / "lightmem.sqlite"
    digest = _digest(db)
    stats = lightmem("stats", "--store", read_only_store, "--json")  # was: "no lightmem store ...; create one"
    assert stats.returncode == 0 and json.loads(stats.stdout)["users"]["u"]["items"] == 20
    found = lightmem("search", "sailing boats", "--user", "u", "--store", read_only_store, "--selector", "none", "--json")
    assert found.returncode == 0 and len(json.loads(found.stdout)) == 5
    done = lightmem("ingest", _turns_file(tmp_path / "a.jsonl", 3), "--store", read_only_store, "--user", "u", "-q")
    assert done.returncode == 2
    assert f"the lightmem store at {db} is read-only" in done.stderr and "it can be searched, not written" in done.stderr
    assert "create one" not in done.stderr and "Traceback" not in done.stderr
    assert _digest(db) == digest and _integrity(db) == "ok"
    # the way out the message gives: a writable copy
    copy = tmp_path / "copy"
    assert main(["backup", "--store", str(read_only_store), str(copy)]) == 0
    assert main(["ingest", str(tmp_path / "a.jsonl"), "--store", str(copy), "--user", "u", "-q"]) == 0
    assert _counts(copy) == {"u": (23, 23)}


def test_a_read_only_store_answers_503_to_writes_over_http(read_only_store):
    auth = {"Authorization": f"Bearer {KEY}"}
    with TestClient(create_app(lambda: _open(read_only_store), KeyRing({KEY: ["*"]}))) as client:
        hits = client.post("/v1/search", headers=auth, json={"user_id": "u", "query": "sailing boats"})
        assert hits.status_code == 200 and hits.json()["hits"]
        r = client.post("/v1/memories", headers=auth, json={"user_id": "u", "messages": [{"speaker": "U", "text": "new"}]})
        assert r.status_code == 503 and "is read-only" in r.json()["detail"]
    # closing after searches (which buffer access counts) wrote nothing and raised nothing


# -- damaged files ---------------------------------------------------------------------------------
def _truncate(db: Path) -> None:
    with db.open("r+b") as f:
        f.truncate(db.stat().st_size // 2)


def _garbage_header(db: Path) -> None:
    with db.open("r+b") as f:
        f.write(bytes(range(7, 107)))


def _corrupt_pages(db: Path) -> None:
    """Overwrite, in the middle of the file, every page of the items table and its indexes."""
    con = sqlite3.connect(db)
    pages = [r[0] for r in con.execute("SELECT pageno FROM dbstat WHERE name IN "
                                       "('items', 'items_by_user', 'sqlite_autoindex_items_1')")]
    size = con.execute("PRAGMA page_size").fetchone()[0]
    con.close()
    with db.open("r+b") as f:
        for p in pages:
            f.seek((p - 1) * size)
            f.write(b"\xa5" * size)


def _not_sqlite(db: Path) -> None:
    db.write_text('{"this": "is a JSON file, not a database"}\n' * 50)


def _another_app(db: Path) -> None:
    db.unlink()
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    con.execute("INSERT INTO invoices (total) VALUES (12.5)")
    con.commit()
    con.close()


FAULTS = {  # how the file is damaged -> what the error says it is
    "truncated": (_truncate, "is corrupt: it is truncated"),
    "garbage_header": (_garbage_header, "is corrupt: its 100-byte header is garbage"),
    "corrupt_pages": (_corrupt_pages, "is corrupt: a page inside the file is damaged"),
    "not_sqlite": (_not_sqlite, "not a lightmem database: the file does not start with SQLite's header"),
    "another_apps_database": (_another_app, "it is a SQLite database, but not a lightmem one (its tables: invoices)"),
}
COMMANDS = {
    "stats": ["stats"],
    "search": ["search", "sailing", "--user", "u", "--selector", "none"],
    "delete-user": ["delete-user", "u", "-y"],
    "ingest": ["ingest", "{turns}", "--user", "u", "-q"],
}


@pytest.fixture
def damaged_store(tmp_path, request) -> tuple[Path, str]:
    damage, says = FAULTS[request.param]
    store = tmp_path / "store"
    with _open(store) as m:
        for i in range(30):
            m.add(f"fact {i} about sailing boats " + "z" * 400, user_id="u", timestamp=T0 + i)
    damage(store / "lightmem.sqlite")
    return store, says


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("damaged_store", FAULTS, indirect=True)
def test_a_damaged_store_is_named_never_called_missing(damaged_store, command, tmp_path, capsys):
    store, says = damaged_store
    db = store / "lightmem.sqlite"
    digest = _digest(db)
    args = [a.replace("{turns}", str(_turns_file(tmp_path / "t.jsonl", 3))) for a in COMMANDS[command]]
    assert main([*args, "--store", str(store)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"lightmem store at {db}" in err and says in err, err
    assert "create one" not in err and "no lightmem store" not in err
    if "corrupt" in says:  # how to check it, and how to recover
        assert f"lightmem check --store {store}" in err and f"lightmem restore BACKUP --store {store} --force" in err
    assert _digest(db) == digest  # lightmem never writes into a file it cannot use


@pytest.mark.multiprocess
def test_a_corrupt_page_met_mid_search_is_a_clear_error_from_the_command_and_503_over_http(tmp_path):
    store = tmp_path / "store"
    with _open(store) as m:
        for i in range(30):
            m.add(f"fact {i} about sailing boats " + "z" * 400, user_id="u", timestamp=T0 + i)
    con = sqlite3.connect(store / "lightmem.sqlite")
    leaves = [r[0] for r in con.execute("SELECT pageno FROM dbstat WHERE name = 'items' AND pagetype = 'leaf'")]
    con.close()
    with (store / "lightmem.sqlite").open("r+b") as f:  # one page in the middle: the store still opens
        f.seek((leaves[len(leaves) // 2] - 1) * 4096)
        f.write(b"\xa5" * 4096)
    done = lightmem("search", "sailing", "--user", "u", "--store", store, "--selector", "none")
    assert done.returncode == 2 and "Traceback" not in done.stderr  # was: a raw sqlite3.DatabaseError traceback
    assert "is corrupt: a page inside the file is damaged" in done.stderr
    checked = lightmem("check", "--store", store)
    assert checked.returncode == 2 and "PRAGMA integrity_check" in checked.stderr
    auth = {"Authorization": f"Bearer {KEY}"}
    with TestClient(create_app(lambda: _open(store), KeyRing({KEY: ["*"]}))) as client:
        r = client.post("/v1/search", headers=auth, json={"user_id": "u", "query": "sailing"})
        assert r.status_code == 503 and "is corrupt" in r.json()["detail"]
        assert client.get("/healthz").status_code == 200


# -- SIGKILL inside a transaction ------------------------------------------------------------------
KILLED_INSIDE = textwrap.dedent(
    """
    import sys, time
    from lightmem.memory import Memory
    from lightmem.models.embedder import HashingEmbedder
    from lightmem.retrieval.stage2 import Stage1Selector
    m = Memory.open(sys.argv[1], embedder=HashingEmbedder(64), selector=Stage1Selector())
    verb, nth, seen = sys.argv[2], int(sys.argv[3]), 0
    def stop_inside(sql):  # SQLite calls this as each statement starts, in the writing thread
        global seen
        if sql.startswith("BEGIN"):
            seen = 0
        elif sql.startswith(verb):
            seen += 1
            if seen == nth:
                print("inside", flush=True)
                time.sleep(60)  # the test kills us here: the transaction ran some statements, not all
    m.store.sql.connection.set_trace_callback(stop_inside)
    exec(sys.argv[4])
    """
)


def _kill_inside(store: Path, verb: str, nth: int, action: str, background: str = "1") -> None:
    """Run ``action`` (Python, ``m`` is the memory, with the background indexer as ``background`` says) in a new
    process and SIGKILL it at the ``nth`` ``verb`` statement of a transaction."""
    proc = subprocess.Popen([sys.executable, "-c", KILLED_INSIDE, str(store), verb, str(nth), action],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**ENV, "LIGHTMEM_BACKGROUND_INDEX": background})
    try:
        line = proc.stdout.readline()
        assert line.strip() == "inside", proc.stderr.read()
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def _seed(store: Path) -> None:
    with _open(store) as m:
        for user in ("u", "v"):
            m.add([{"speaker": user, "text": f"{user} note {i} about herons", "id": f"{user}{i}"} for i in range(10)],
                  user_id=user, timestamp=T0)


@pytest.mark.multiprocess
@pytest.mark.parametrize("background", ["1", "0"], ids=["background", "sync"])
def test_sigkill_inside_delete_user_leaves_the_user_whole(tmp_path, background):
    store = tmp_path / "store"
    _seed(store)
    _kill_inside(store, "DELETE", 2, "m.delete_user('u')", background)  # the user's items are gone inside the transaction
    with _open(store) as m:
        assert len(m.store.turns("u")) == 10 and len(m.get_all("u")) == 10 and len(m.get_all("v")) == 10
        assert all(m.history(i.id, "u") for i in m.get_all("u"))
        assert _integrity(store / "lightmem.sqlite") == "ok"
        assert m.delete_user("u")["turns"] == 10  # and the delete then goes through
        assert m.store.users() == ["v"]


@pytest.mark.multiprocess
@pytest.mark.parametrize("background", ["1", "0"], ids=["background", "sync"])
def test_sigkill_inside_add_leaves_no_part_of_the_batch(tmp_path, background):
    store = tmp_path / "store"
    _seed(store)
    batch = [{"speaker": "u", "text": f"new note {i}", "id": f"new{i}"} for i in range(5)]
    _kill_inside(store, "INSERT", 2, f"m.add({batch!r}, user_id='u', timestamp={T0 + 1})", background)
    with _open(store) as m:
        assert {t.turn_id for t in m.store.turns("u")} == {f"u{i}" for i in range(10)}
        assert len(m.get_all("u")) == 10 and _integrity(store / "lightmem.sqlite") == "ok"
        m.add(batch, user_id="u", timestamp=T0 + 1)  # the same batch, again: written whole
        assert len(m.store.turns("u")) == 15
