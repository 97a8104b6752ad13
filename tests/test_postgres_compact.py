"""PostgreSQL erasure on disk: after a deletion no row holds the text, but the server's files still do
(plain VACUUM and CHECKPOINT leave it in the table file and the WAL); `lightmem compact` clears the
table files, and `--wal` the write-ahead log too. Checked by grepping every file of the data directory."""
from __future__ import annotations

import uuid
from pathlib import Path

import psycopg
import pytest

from lightmem.cli import main
from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.stores.postgres.maintenance import TABLES


def _open(uri: str) -> Memory:
    return Memory.open(uri, embedder=HashingEmbedder(64), selector=Stage1Selector())


def _holders(root: Path, word: str, skip: tuple[str, ...] = ()) -> list[str]:
    """The files under ``root`` (a data directory) whose bytes hold ``word``, but those under ``skip``."""
    needle, found = word.encode(), []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if rel.parts[0] in skip or not p.is_file():
            continue
        try:
            if needle in p.read_bytes():
                found.append(str(rel))
        except OSError:  # a file the server removed meanwhile
            continue
    return found


def _write_then_delete(uri: str, word: str) -> str:
    """Store a memory holding ``word`` beside another, analyze (the statistics sample it), delete it; the id kept."""
    with _open(uri) as m:
        keep = m.add({"speaker": "Alice", "text": "I keep bees on the roof", "id": "k1"}, user_id="alice")[0]
        gone = m.add({"speaker": "Alice", "text": f"my locker code is {word}", "id": "s1"}, user_id="alice")[0]
        with psycopg.connect(uri, autocommit=True) as c:
            c.execute("ANALYZE")
            assert c.execute("SELECT count(*) FROM pg_stats WHERE tablename = 'items' AND attname = 'text' "
                             "AND histogram_bounds::text LIKE %s", (f"%{word}%",)).fetchone()[0] == 1
        assert m.delete(gone.id, "alice") == {"items": 1, "turns": 1, "facts": 0}
    return keep.id


def _no_row_holds(uri: str, word: str) -> bool:
    with psycopg.connect(uri) as c:
        tables = [r[0] for r in c.execute("SELECT table_name FROM information_schema.tables "
                                          "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'")]
        return not any(c.execute(f'SELECT count(*) FROM "{t}" AS r WHERE r::text LIKE %s', (f"%{word}%",)).fetchone()[0]
                       for t in tables)


def test_vacuum_leaves_deleted_text_in_the_table_files_and_compact_clears_them(pg_server, pg_uri, capsys):
    assert {"items", "turns", "history", "ltm_nodes", "item_facts", "item_fact_sources"} <= set(TABLES)  # every table, read from postgres.schema
    word = f"zq{uuid.uuid4().hex[:12]}"
    data = Path(pg_server.pgdata)
    keep = _write_then_delete(pg_uri, word)
    with psycopg.connect(pg_uri, autocommit=True) as c:  # what autovacuum would do, and a checkpoint
        c.execute("VACUUM")
        c.execute("CHECKPOINT")
    assert _no_row_holds(pg_uri, word)
    before = _holders(data, word)
    assert any(p.startswith("base/") for p in before), before  # the table file still has the bytes
    assert any(p.startswith("pg_wal/") for p in before), before

    assert main(["compact", "--store", pg_uri]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"VACUUM (FULL, ANALYZE) of {len(TABLES)} tables; VACUUM FULL pg_statistic; CHECKPOINT" in err
    assert "not cleared: the write-ahead log (pg_wal)" in err  # said, since it is not cleared without --wal
    assert _holders(data, word, skip=("pg_wal",)) == []
    with _open(pg_uri) as m:  # the store works as before
        assert [it.id for it in m.get_all("alice")] == [keep]
        assert m.search("bees", "alice", k=1)[0].item.id == keep


def test_compact_wal_clears_the_write_ahead_log_too(pg_server, pg_uri, capsys):
    word = f"zq{uuid.uuid4().hex[:12]}"
    data = Path(pg_server.pgdata)
    _write_then_delete(pg_uri, word)
    with psycopg.connect(pg_uri, autocommit=True) as c:
        c.execute("CHECKPOINT")
        c.execute("SELECT pg_switch_wal()")  # one switch and checkpoint are not enough: the segment is recycled whole
        c.execute("CHECKPOINT")
    assert any(p.startswith("pg_wal/") for p in _holders(data, word))

    assert main(["compact", "--store", pg_uri, "--wal"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "x pg_switch_wal() + CHECKPOINT" in err and "not cleared: the write-ahead log" not in err
    assert _holders(data, word) == []  # no file of the data directory, WAL included


@pytest.fixture
def plain_role(pg_server, pg_uri):
    """A URI of ``pg_uri``'s database for a role that is neither superuser nor the tables' owner."""
    role = f"lm_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_uri, autocommit=True) as c:
        c.execute(f"CREATE ROLE {role} LOGIN")
    yield pg_uri.replace("postgres:", f"{role}:", 1) if "postgres:" in pg_uri else pg_uri.replace("://", f"://{role}@", 1)
    with psycopg.connect(pg_uri, autocommit=True) as c:
        c.execute(f"DROP ROLE {role}")


def test_compact_without_the_privileges_says_so_and_never_claims_success(pg_uri, plain_role, capsys):
    _open(pg_uri).close()
    with psycopg.connect(plain_role) as c:
        assert c.execute("SELECT current_user").fetchone()[0].startswith("lm_")
    assert main(["compact", "--store", plain_role, "--wal"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "needs a superuser" in err and "Nothing was changed" in err
    assert main(["compact", "--store", plain_role]) == 2  # PostgreSQL skips the tables it may not vacuum
    err = " ".join(capsys.readouterr().err.split())
    assert "did not compact every table" in err and "owner" in err


def test_compact_of_an_empty_database_says_there_is_no_store(pg_uri, capsys):
    assert main(["compact", "--store", pg_uri]) == 2
    assert "no lightmem store" in capsys.readouterr().err
