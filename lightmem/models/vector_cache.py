"""A persistent cache of document vectors by content, for evaluation runs that ingest the same texts again.

A sweep over LongMemEval or LoCoMo re-ingests identical turns on every run; with the cache, a text is
embedded once per encoder: the key is a hash of the encoder's full name (model, adapter fingerprint,
input length, int8 recipe) and the text, so a changed encoder never reads another's vectors.
The file is SQLite (WAL): several evaluation processes may share it.
"""
from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

_CHUNK = 500  # keys per SELECT (SQLite's bound on parameters)
# Part of every key. Bump it when vectors of the same encoder name change meaning: 2 since int8 graphs embed
# each text alone (534f8a5); files written before hold vectors of session batches, which are now never read.
KEY_FORMAT = 2
_TOTALS = {"read": 0, "embedded": 0}  # every cache of this process: what an evaluation reports beside its ingest rate
_TOTALS_LOCK = threading.Lock()


def totals() -> dict[str, int]:
    """Document vectors read from a cache and embedded (then stored) by every cache in this process so far."""
    with _TOTALS_LOCK:
        return dict(_TOTALS)


def note_use(results: dict, before: dict[str, int]) -> None:
    """Record in an evaluation's ``results`` the document vectors read from and added to caches since ``before``
    (``totals()`` taken at its start): ``cost.vector_cache``, and beside the ingest rate the share read back, since
    a rate over vectors read from a file is not an encoder's rate."""
    now = totals()
    used = {k: now[k] - before.get(k, 0) for k in now}
    results.setdefault("cost", {})["vector_cache"] = used
    if used["read"]:
        results.setdefault("latency", {})["ingest_vectors_from_cache"] = used["read"] / (used["read"] + used["embedded"])


def folder_fingerprint(folder: str | Path) -> str:
    """``w-<sha256[:12]>`` of a local model folder's weight files: a model given by path is keyed by what it holds,
    so vectors of weights since replaced in that folder are never read back."""
    h = hashlib.sha256()
    files = sorted(p for p in Path(folder).rglob("*") if p.is_file() and p.suffix in {".safetensors", ".bin", ".onnx", ".pt"})
    for f in files:
        h.update(str(f.relative_to(folder)).encode())
        with f.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return "w-" + h.hexdigest()[:12]


class VectorCache:
    """Document vectors of one encoder, stored by a hash of (encoder name, text).

    Args:
        path: The SQLite file (created with its folder when missing).
        name: The encoder's full name (``Embedder.name``).
        dim: The encoder's dimension (a stored vector of another size is not used).
    """

    def __init__(self, path: str | Path, name: str, dim: int) -> None:
        self.path, self.name, self.dim = Path(path), name, dim
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path), timeout=60, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vec BLOB NOT NULL) WITHOUT ROWID")
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def _key(self, text: str) -> bytes:
        return hashlib.blake2b(f"{KEY_FORMAT}\0{self.name}\0{text}".encode("utf-8", "surrogatepass"), digest_size=16).digest()

    def encode(self, texts: Sequence[str], encode: Callable[[list[str]], np.ndarray]) -> np.ndarray:
        """The vectors of ``texts``: stored ones read back, the others made by ``encode`` and stored."""
        keys = [self._key(t) for t in texts]
        found: dict[bytes, np.ndarray] = {}
        with self._lock:
            for i in range(0, len(keys), _CHUNK):
                chunk = keys[i : i + _CHUNK]
                rows = self._db.execute(f"SELECT key, vec FROM vectors WHERE key IN ({','.join('?' * len(chunk))})",
                                        chunk).fetchall()
                for k, v in rows:
                    if len(v) == 4 * self.dim:
                        found[k] = np.frombuffer(v, dtype=np.float32)
        first: dict[bytes, int] = {}  # each text not stored yet, embedded once however often it repeats
        for i, k in enumerate(keys):
            if k not in found:
                first.setdefault(k, i)
        if first:
            made = np.asarray(encode([texts[i] for i in first.values()]), dtype=np.float32)
            stored = [(k, made[j].tobytes()) for j, k in enumerate(first)]
            with self._lock:
                self._db.execute("BEGIN")
                try:
                    self._db.executemany("INSERT OR REPLACE INTO vectors (key, vec) VALUES (?, ?)", stored)
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
            found.update({k: made[j] for j, k in enumerate(first)})
        missing = sum(1 for k in keys if k in first)
        self.hits += len(texts) - missing
        self.misses += missing
        with _TOTALS_LOCK:
            _TOTALS["read"] += len(texts) - missing
            _TOTALS["embedded"] += missing
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, k in enumerate(keys):
            out[i] = found[k]
        return out

    def close(self) -> None:
        with self._lock:
            self._db.close()
