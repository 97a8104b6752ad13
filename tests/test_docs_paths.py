"""Every repository path the README and docs/ name exists, so the docs cannot drift from the files."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import ROOT

TOP = ("conf/", "lightmem/", "eval/", "train/", "data_gen/", "tests/", "checkpoints/", "data/", "docs/")
PACKAGES = tuple(f"{p.name}/" for p in (ROOT / "lightmem").iterdir() if p.is_dir() and not p.name.startswith("_"))
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def named_paths(doc: Path) -> set[str]:
    """Paths in backticks or link targets that name a file (with an extension) or a folder (a trailing /)
    of the repository, or of the package when they start with one of its sub-packages (``stores/embedded/store.py``)."""
    found = set()
    for code, link in re.findall(r"`([^`\s]+)`|\]\(([^)\s#]+)", doc.read_text()):
        token = (code or link).rstrip(".,:;)")
        if link and doc.parent != ROOT:
            token = str((doc.parent / token).resolve().relative_to(ROOT)) + ("/" if token.endswith("/") else "")
        if any(c in token for c in "<>*{}=") or not (token.endswith("/") or "." in token.rsplit("/", 1)[-1]):
            continue  # a pattern, an override or a metric name, not a path
        if token.startswith(TOP):
            found.add(token)
        elif token.startswith(PACKAGES) and token.endswith(".py"):
            found.add(f"lightmem/{token}")
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_a_doc_names_exists(doc):
    paths = named_paths(doc)
    assert paths, f"{doc.name} names no repository path: the check would be empty"
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert missing == [], f"{doc.relative_to(ROOT)} names paths that do not exist: {missing}"
