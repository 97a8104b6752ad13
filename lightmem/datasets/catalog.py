"""Where the datasets live and what each file must contain (``data/manifest.json``).

The repository's ``data/`` folder holds the dev data that the demo, the tests and
``make train`` need (compressed, with licenses). Bigger files are fetched into the same
folder by ``lightmem data fetch``. ``LIGHTMEM_DATA`` points lightmem at another folder.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_VAR = "LIGHTMEM_DATA"
MANIFEST = "manifest.json"


def repo_root() -> Path:
    """The folder that holds the ``lightmem`` package (a clone's root in an editable install)."""
    return Path(__file__).resolve().parents[2]


def data_dir() -> Path:
    """``$LIGHTMEM_DATA`` when set, else the repository's ``data/`` folder."""
    env = os.environ.get(ENV_VAR)
    return Path(env).expanduser() if env else repo_root() / "data"


@dataclass(frozen=True)
class DataFile:
    """One file of the manifest.

    Attributes:
        path: Relative to the data folder.
        sha256: Of the file's bytes.
        size: Bytes on disk.
        committed: Shipped in the repository (else fetched).
        license: The dataset's license.
        source: Key of ``sources`` it is extracted from when fetched (None: copy only).
        select: Which records of the source it keeps: ``{"key": field, "ids": list-name}``.
        content_sha256: sha256 of the selected records in canonical JSON (checks a fresh download).
    """

    path: str
    sha256: str
    size: int
    committed: bool
    license: str
    source: str | None = None
    select: dict[str, str] | None = None
    content_sha256: str | None = None


@dataclass(frozen=True)
class Catalog:
    files: dict[str, DataFile]
    sources: dict[str, dict[str, Any]]
    ids: dict[str, list[str]]

    @classmethod
    def load(cls, manifest: Path | None = None) -> "Catalog":
        """The manifest shipped in the repository's ``data/`` (always that one: it pins the hashes)."""
        m = json.loads((manifest or repo_root() / "data" / MANIFEST).read_text())
        ids = {}
        for rel in m.get("id_lists", []):
            ids.update(json.loads((repo_root() / "data" / rel).read_text()))
        files = {name: DataFile(**spec) for name, spec in m["files"].items()}
        return cls(files, m["sources"], ids)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def content_sha256(records: list[dict[str, Any]]) -> str:
    """A hash of records that ignores formatting: key order, whitespace, escapes."""
    h = hashlib.sha256()
    for r in records:
        h.update(json.dumps(r, sort_keys=True, ensure_ascii=True, separators=(",", ":")).encode())
        h.update(b"\n")
    return h.hexdigest()


def missing_file_error(path: Path) -> FileNotFoundError:
    """A FileNotFoundError that says how to get the file: fetch it, or where data paths point."""
    try:
        known = {Path(f.path).name: (name, f) for name, f in Catalog.load().files.items()}
    except (OSError, ValueError):  # an installed wheel has no data/ folder
        known = {}
    name, f = known.get(path.name, (None, None))
    if f is not None and not f.committed:
        hint = f"it is fetched, not committed: run `lightmem data fetch {name}` (or `make fetch-data`)"
    elif f is not None:
        hint = "it ships in the repository's data/ folder: restore it with `git checkout -- data/`, or point LIGHTMEM_DATA at a copy"
    else:
        hint = f"data paths default to paths.data = {data_dir()} (set LIGHTMEM_DATA or paths.data=... to move it)"
    return FileNotFoundError(f"{path} does not exist; {hint}")
