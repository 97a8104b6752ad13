"""Every Python example of the README runs as written: each block alone, in a new process, in an empty folder."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT

BLOCKS = re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(), re.S | re.M)


def _marks(code: str) -> list:
    marks = [pytest.mark.slow]  # each loads the default encoder in a new process
    if "pgserver" in code:
        marks.append(pytest.mark.postgres)
        if importlib.util.find_spec("pgserver") is None:
            marks.append(pytest.mark.skip(reason="pgserver is not installed (pip install pgserver; make install has it)"))
    return marks


def test_the_readme_has_examples():
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("code", [pytest.param(c, marks=_marks(c), id=f"block{i}") for i, c in enumerate(BLOCKS)])
def test_a_readme_example_runs_as_written(code, tmp_path):
    # As a user runs it: the shipped default of background indexing, not the suite's (conftest.py); the model cache
    # stays the run's own (LIGHTMEM_CACHE, conftest.model_cache).
    env = {k: v for k, v in os.environ.items() if k != "LIGHTMEM_BACKGROUND_INDEX"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), "an example prints what it shows"
    assert "Traceback" not in done.stderr
