"""Every repository path a Markdown file of the repository names exists, so the docs cannot drift from the files."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

TOP = ("conf/", "lightmem/", "eval/", "train/", "data_gen/", "tests/", "checkpoints/", "data/", "docs/", "experiments/", "tools/")
PACKAGES = tuple(f"{p.name}/" for p in (ROOT / "lightmem").iterdir() if p.is_dir() and not p.name.startswith("_"))


def markdown_files() -> list[Path]:
    """Every Markdown file of the repository: those git tracks, and new ones it does not ignore."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: every file outside the usual build folders
        skip = {".git", ".venv", "outputs", "multirun", "node_modules"}
        return sorted(p for p in ROOT.rglob("*.md") if not skip.intersection(p.relative_to(ROOT).parts))
    return sorted(ROOT / f for f in out if (ROOT / f).exists())


DOCS = markdown_files()
# Model cards are written by the exporter and may name no repository path; every other file must name one.
GENERATED = re.compile(r"^checkpoints/[^/]+/README\.md$")


def named_paths(doc: Path) -> set[str]:
    """Paths in backticks or link targets that name a file (with an extension) or a folder (a trailing /)
    of the repository, or of the package when they start with one of its sub-packages (``stores/embedded/store.py``)."""
    found = set()
    for code, link in re.findall(r"`([^`\s]+)`|\]\(([^)\s#]+)", doc.read_text()):
        if link and "://" in link:
            continue  # a web address
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
    if not GENERATED.match(str(doc.relative_to(ROOT))):
        assert paths, f"{doc.relative_to(ROOT)} names no repository path: the check would be empty"
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert missing == [], f"{doc.relative_to(ROOT)} names paths that do not exist: {missing}"


def test_the_readme_stays_a_guide_for_users():
    # Measurements and decisions belong in docs/results/; the README keeps one results table and links to them.
    size = len((ROOT / "README.md").read_bytes())
    assert size <= 25_000, f"README.md is {size:,} bytes: move the details to docs/ (limit 25,000)"
