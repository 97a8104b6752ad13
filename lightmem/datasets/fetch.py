"""``lightmem data fetch``: bring the datasets that are not committed, with sha256 checks.

Two ways in: from a folder that already holds them (``--from DIR``: a colleague's copy, a
mounted disk; the file's sha256 must match the manifest), or from the official sources over
the network (the release is downloaded whole, the dev split is cut from it by the committed
question ids, and its records must hash to what this project was measured on).
"""
from __future__ import annotations

import gzip
import json
import logging
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from lightmem.datasets.catalog import Catalog, DataFile, content_sha256, sha256_file
from lightmem.errors import LightMemError

log = logging.getLogger(__name__)


class DataUnavailableError(LightMemError):
    """A dataset file is missing and could not be fetched or verified."""


@dataclass
class FileStatus:
    name: str
    path: Path
    committed: bool
    state: str  # ok | missing | modified


def status(catalog: Catalog, folder: Path) -> list[FileStatus]:
    """Which manifest files ``folder`` holds, and whether their bytes are the pinned ones."""
    out = []
    for name, f in catalog.files.items():
        p = folder / f.path
        state = "missing" if not p.exists() else "ok" if sha256_file(p) == f.sha256 else "modified"
        out.append(FileStatus(name, p, f.committed, state))
    return out


def fetch(catalog: Catalog, folder: Path, names: Iterable[str] | None = None, source_dir: Path | None = None,
          verify: bool = True, timeout: float = 60.0) -> list[Path]:
    """Make ``folder`` hold the named files (default: every file not committed). Returns their paths.

    Raises:
        DataUnavailableError: unknown name, no network, or a file whose hash differs (nothing
            is written over a good file; a download that fails its check is kept aside).
    """
    names = list(names) if names else [n for n, f in catalog.files.items() if not f.committed]
    unknown = [n for n in names if n not in catalog.files]
    if unknown:
        raise DataUnavailableError(f"unknown dataset files {unknown}; known: {sorted(catalog.files)}")
    done = []
    for name in names:
        f = catalog.files[name]
        target = folder / f.path
        if target.exists() and sha256_file(target) == f.sha256:
            log.info("%s: present, sha256 ok", target)
        elif source_dir is not None:
            _copy_verified(source_dir / f.path, target, f)
        else:
            _from_source(catalog, f, target, folder / "downloads", verify, timeout)
        done.append(target)
    return done


def fetch_full(catalog: Catalog, folder: Path, timeout: float = 60.0) -> list[Path]:
    """Download every official release whole (all conversations and questions, held-out ones included)."""
    return [_download(spec, folder / spec["file"], timeout) for spec in catalog.sources.values()]


def _copy_verified(src: Path, target: Path, f: DataFile) -> None:
    if not src.exists():
        raise DataUnavailableError(f"{src} does not exist; --from must name a data folder laid out like data/ ({f.path})")
    got = sha256_file(src)
    if got != f.sha256:
        raise DataUnavailableError(f"{src} has sha256 {got}, the manifest pins {f.sha256}: not the file this project uses")
    _atomic_write(target, lambda tmp: shutil.copyfile(src, tmp))
    log.info("copied %s -> %s (sha256 ok)", src, target)


def _from_source(catalog: Catalog, f: DataFile, target: Path, downloads: Path, verify: bool, timeout: float) -> None:
    if f.source is None or f.select is None:
        raise DataUnavailableError(f"{f.path} has no public source to fetch from; restore it from git (git checkout -- data/)")
    spec = catalog.sources[f.source]
    raw = _download(spec, downloads / Path(spec["file"]).name, timeout)
    records = json.loads(raw.read_text(encoding="utf-8"))
    by_id = {r[f.select["key"]]: r for r in records}
    wanted = catalog.ids[f.select["ids"]]
    missing = [i for i in wanted if i not in by_id]
    if missing:
        raise DataUnavailableError(f"{raw} lacks {len(missing)} of the {len(wanted)} records of {f.path} (e.g. {missing[:3]})")
    chosen = [by_id[i] for i in wanted]
    got = content_sha256(chosen)
    if verify and f.content_sha256 and got != f.content_sha256:
        raise DataUnavailableError(
            f"the records of {f.path} cut from {spec['url']} hash to {got}, not {f.content_sha256}: this release differs "
            f"from the copy lightmem was measured on. The download is kept at {raw}; rerun with --no-verify to use it anyway."
        )
    _atomic_write(target, lambda tmp: _write_json_gz(chosen, tmp))
    log.info("wrote %s: %d records from %s", target, len(chosen), raw.name)


def _download(spec: dict[str, Any], target: Path, timeout: float) -> Path:
    """Fetch ``spec['url']`` to ``target`` (kept when present and matching a pinned sha256)."""
    pinned = spec.get("sha256")
    if target.exists() and (pinned is None or sha256_file(target) == pinned):
        return target
    url = spec["url"]
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (https URLs from the manifest)
            total = int(resp.headers.get("Content-Length") or 0) or None

            def write(tmp: Path) -> None:
                with open(tmp, "wb") as out, tqdm(total=total, unit="B", unit_scale=True, desc=target.name) as bar:
                    while block := resp.read(1 << 20):
                        out.write(block)
                        bar.update(len(block))

            _atomic_write(target, write)
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise DataUnavailableError(
            f"cannot download {url} ({exc}). Without network access: download that URL on a machine that has it, put the "
            f"file at {target} and rerun `lightmem data fetch`, or copy a prepared data folder with `lightmem data fetch "
            f"--from DIR`, or point LIGHTMEM_DATA at one. The committed dev data in data/ works without any of this."
        ) from exc
    got = sha256_file(target)
    if pinned and got != pinned:
        target.rename(target.with_suffix(target.suffix + ".bad"))
        raise DataUnavailableError(f"{url} downloaded with sha256 {got}, the manifest pins {pinned}")
    log.info("downloaded %s (sha256 %s)", target, got)
    return target


def _write_json_gz(records: list[dict[str, Any]], path: Path) -> None:
    with open(path, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", compresslevel=9, mtime=0, filename="") as gz:
        gz.write(json.dumps(records, ensure_ascii=True).encode())


def _atomic_write(target: Path, write) -> None:
    """Write through a temporary file in the same folder: a killed fetch never leaves half a file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
