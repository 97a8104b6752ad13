"""A user's view (vectors, BM25 postings, filter metadata) as one blob the embedded store keeps in
its database, so that a large user's first search after a restart or an eviction reads it back
instead of re-analysing every text (10,000 items: ~20 ms instead of ~200 ms, ``tools/scale.py``).

A snapshot is a cache, never the source of truth: it records the change-log position it reflects,
and the store replays the user's item changes since then on load (or rebuilds from the tables when
those changes were pruned, or are many). The blob is an uncompressed ``.npz`` read with
``allow_pickle=False``; a blob that does not parse is ignored (rebuilt), not trusted.

A snapshot never outlives an erasure: deleting an item (or forgetting its old text) drops its user's
snapshot, and a snapshot is written only if nothing was erased after the position it reflects (a
view read before another process's deletion may still hold the item: ``put_view_snapshot``).
"""
from __future__ import annotations

import io
import json
import zipfile

import numpy as np

from lightmem.stores.views.lexical import LexicalIndex
from lightmem.stores.views.partition import IndexMeta, Partition, tags_of
from lightmem.stores.views.vector import VectorIndex
from lightmem.text import ANALYZER
from lightmem.types import ItemKind

FORMAT = 1
SNAPSHOT_MIN_ITEMS = 2_000
"""Users with this many active items get a snapshot (the embedded store's ``snapshot_min_items``): below
it a view builds from the tables in ~30 ms or less (1,000 items: ~15 ms); a 10,000-item view takes
~200 ms from the tables and ~20 ms from its snapshot (``tools/scale.py``)."""
_KIND_CODE = {k: i for i, k in enumerate(ItemKind)}


class SnapshotError(ValueError):
    """The blob is not a snapshot this code can read (another format, truncated, inconsistent)."""


def dump(part: Partition) -> bytes:
    """The partition as bytes (``load`` returns an equal partition)."""
    ids = part.vectors.ids
    metas = [part.meta[int(r)] for r in ids.tolist()]
    tagged = [(i, sorted(m.tags)) for i, m in enumerate(metas) if m.tags]
    header = {"format": FORMAT, "analyzer": ANALYZER, "kinds": [k.value for k in ItemKind], "tags": tagged}
    lex = {f"lex_{k}": v for k, v in part.lexical.export().items()}
    graph = part.vectors.to_bytes()  # an HNSW graph is kept (it holds the vectors too): rebuilding it is slow
    vectors = {"vecs": part.vectors.vecs} if graph is None else {"hnsw": graph}
    buf = io.BytesIO()
    np.savez(
        buf,
        header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8),
        ids=ids, **vectors,
        time=np.fromiter((m.event_time for m in metas), dtype=np.float64, count=len(metas)),
        kind=np.fromiter((_KIND_CODE[m.kind] for m in metas), dtype=np.uint8, count=len(metas)),
        current=np.fromiter((m.current for m in metas), dtype=np.bool_, count=len(metas)),
        **lex,
    )
    return buf.getvalue()


def load(blob: bytes, dim: int, kind: str = "flat", device: str = "cpu") -> Partition:
    """The partition ``dump`` wrote, its vector index of ``kind`` on ``device``.

    Raises:
        SnapshotError: the blob is not a readable snapshot of ``dim``-dimensional vectors.
    """
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as z:
            a = {k: z[k] for k in z.files}
        header = json.loads(bytes(a["header"]).decode())
        if header.get("format") != FORMAT:
            raise SnapshotError(f"snapshot format {header.get('format')!r}, this code reads {FORMAT}")
        if header.get("analyzer", 1) != ANALYZER:  # its BM25 terms come from another text analysis: rebuilt
            raise SnapshotError(f"snapshot terms of text analysis {header.get('analyzer', 1)}, this code's is {ANALYZER}")
        ids = a["ids"]
        vectors = VectorIndex.from_hnsw_bytes(ids, a["hnsw"]) if "hnsw" in a else None
        vecs = a["vecs"] if vectors is None else vectors.vecs
        if vecs.ndim != 2 or vecs.shape[1] != dim:
            raise SnapshotError(f"snapshot vectors are not of the store's dimension {dim}")
        if vectors is None or (kind, device) != ("hnsw", "cpu"):  # the graph kept only where it is used as is
            vectors = VectorIndex.from_arrays(ids, vecs, kind, device)
        if not np.array_equal(np.sort(a["lex_ids"]), np.sort(ids)):
            raise SnapshotError("the snapshot's BM25 rows and vectors hold different items")
        kinds = [ItemKind(k) for k in header["kinds"]]
        tags = [tags_of(None, ())] * len(ids)
        for i, t in header["tags"]:
            tags[i] = tags_of(None, t)
        part = Partition(vectors, LexicalIndex.from_export({k[4:]: v for k, v in a.items() if k.startswith("lex_")}))
        for rid, t, k, cur, tag in zip(ids.tolist(), a["time"].tolist(), a["kind"].tolist(), a["current"].tolist(),
                                       tags, strict=True):
            part.set_meta(rid, IndexMeta(t, kinds[k], cur, tag))
    except SnapshotError:
        raise
    except (KeyError, IndexError, ValueError, TypeError, OSError, EOFError, RuntimeError, zipfile.BadZipFile) as exc:
        raise SnapshotError(f"unreadable view snapshot: {type(exc).__name__}: {exc}") from exc
    return part
