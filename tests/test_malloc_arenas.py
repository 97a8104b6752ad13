"""lightmem serve caps glibc's malloc arenas (docs/results/throughput.md, "Worker memory under load")."""
from __future__ import annotations

import os

import pytest

from lightmem.server.serve import DEFAULT_MALLOC_ARENAS, limit_malloc_arenas

GLIBC = bool(getattr(os, "confstr", None) and os.confstr("CS_GNU_LIBC_VERSION"))


@pytest.mark.skipif(not GLIBC, reason="the arena cap is glibc's (mallopt)")
def test_the_cap_is_set_for_this_process_and_its_workers(monkeypatch):
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.delenv("LIGHTMEM_MALLOC_ARENAS", raising=False)
    assert limit_malloc_arenas() == DEFAULT_MALLOC_ARENAS
    assert os.environ["MALLOC_ARENA_MAX"] == str(DEFAULT_MALLOC_ARENAS)  # inherited by the spawned workers


def test_an_operators_setting_wins_and_zero_leaves_the_default(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert limit_malloc_arenas(2) == 4
    monkeypatch.delenv("MALLOC_ARENA_MAX")
    monkeypatch.setenv("LIGHTMEM_MALLOC_ARENAS", "0")
    assert limit_malloc_arenas() is None and "MALLOC_ARENA_MAX" not in os.environ
