"""A per-user dense index: the vectors in one numpy array, searched exactly; FAISS for HNSW and GPUs.

MTM is capacity-bound (B = 10^4 items per user by default), so exact inner-product search is both
fast and exact. On the CPU one matrix-vector product over the array is it (faster than FAISS's flat
index for one query, and the vectors are held once); ``hnsw`` and ``cuda`` add a FAISS index beside
the array, whose row i is always ``self.ids[i]``: removals delete the same rows from both.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

log = logging.getLogger(__name__)


def _faiss():
    import faiss

    return faiss


class VectorIndex:
    """Inner-product search over L2-normalised vectors (so scores are cosines).

    Args:
        dim: Vector dimension.
        kind: ``flat`` (exact) or ``hnsw`` (approximate; rebuilt on removal).
        device: ``cpu`` or ``cuda``; on ``cuda`` the FAISS index lives on the GPU
            (needs the faiss-gpu build: ``pip install 'lightmem-slm[gpu]'``).
    """

    def __init__(self, dim: int, kind: str = "flat", device: str = "cpu") -> None:
        if kind not in {"flat", "hnsw"}:
            raise ValueError(f"index kind must be 'flat' or 'hnsw', got {kind!r}")
        self.dim, self.kind, self.device = dim, kind, device
        # The mirror grows by doubling: adding a few rows to a large index copies nothing
        # (one write, or another process's commit replayed, must not cost O(index size)).
        self._n = 0
        self._ids = np.zeros(0, dtype=np.int64)
        self._vecs = np.zeros((0, dim), dtype=np.float32)
        self._row: dict[int, int] = {}
        # Exact search on the CPU needs nothing but the array; HNSW and GPU search need FAISS's index.
        self._index = None if self.kind == "flat" and not device.startswith("cuda") else self._new_index()
        self._stale = False  # the FAISS index lags the array (``set``): rebuilt before it is read

    @property
    def ids(self) -> np.ndarray:
        """Row → id of the indexed vectors (a view)."""
        return self._ids[: self._n]

    @property
    def vecs(self) -> np.ndarray:
        """The indexed vectors in row order (a view)."""
        return self._vecs[: self._n]

    def _reserve(self, extra: int) -> None:
        need = self._n + extra
        if need <= self._ids.shape[0]:
            return
        cap = max(need, 2 * self._ids.shape[0], 64)
        ids, vecs = np.zeros(cap, dtype=np.int64), np.zeros((cap, self.dim), dtype=np.float32)
        ids[: self._n], vecs[: self._n] = self.ids, self.vecs
        self._ids, self._vecs = ids, vecs

    def _new_index(self):
        faiss = _faiss()
        if self.kind == "flat":
            index = faiss.IndexFlatIP(self.dim)
        else:
            index = faiss.IndexHNSWFlat(self.dim, 32, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efSearch = _EF_SEARCH
        if self.device.startswith("cuda"):
            if not hasattr(faiss, "StandardGpuResources"):
                raise RuntimeError(
                    "store.faiss_device=cuda needs the GPU build of FAISS: pip install 'lightmem-slm[gpu]' (faiss-gpu-cu12)"
                )
            self._gpu_res = getattr(self, "_gpu_res", None) or faiss.StandardGpuResources()
            gpu_id = int(self.device.split(":")[1]) if ":" in self.device else 0
            index = faiss.index_cpu_to_gpu(self._gpu_res, gpu_id, index)
        return index

    def __len__(self) -> int:
        return self._n

    def __contains__(self, doc_id: int) -> bool:
        return doc_id in self._row

    def add(self, ids: np.ndarray, vecs: np.ndarray) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        vecs = np.ascontiguousarray(vecs, dtype=np.float32)
        if vecs.shape != (ids.shape[0], self.dim):
            raise ValueError(f"expected vectors of shape ({ids.shape[0]}, {self.dim}), got {vecs.shape}")
        if any(int(i) in self._row for i in ids):
            raise ValueError("an id is already in the vector index; remove it first")
        start = self._n
        self._reserve(len(ids))
        self._ids[start : start + len(ids)], self._vecs[start : start + len(ids)] = ids, vecs
        self._n += len(ids)
        for off, i in enumerate(ids.tolist()):
            self._row[i] = start + off
        if self._index is not None:
            self._index.add(vecs)

    def remove(self, ids) -> None:
        rows = sorted(self._row[i] for i in map(int, ids) if i in self._row)
        if not rows:
            return
        keep = np.ones(len(self), dtype=bool)
        keep[rows] = False
        ids, vecs = self.ids[keep], self.vecs[keep]
        self._n = len(ids)
        self._ids[: self._n], self._vecs[: self._n] = ids, vecs
        self._row = {int(i): r for r, i in enumerate(ids.tolist())}
        if self._index is not None:  # HNSW and GPU indexes cannot remove: rebuild from the mirror
            self._stale = False
            self._index = self._new_index()
            if len(self):
                self._index.add(self.vecs)

    def set(self, ids: Sequence[int], vecs: np.ndarray) -> None:
        """Replace the vectors of ids already in the index (ids it does not hold are skipped).

        The flat CPU index writes the rows in place; an index with a FAISS structure is rebuilt
        from the mirror before its next search.
        """
        vecs = np.asarray(vecs, dtype=np.float32).reshape(len(ids), self.dim)
        rows = [(self._row[int(i)], j) for j, i in enumerate(ids) if int(i) in self._row]
        if not rows:
            return
        self._vecs[[r for r, _ in rows]] = vecs[[j for _, j in rows]]
        if self._index is not None:
            self._stale = True  # rebuilt at the next search: a batch of vectors arriving costs one rebuild

    def search(self, query: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` ids and cosines for one query vector.

        Args:
            query: ``(dim,)`` normalised vector.
            k: How many to return (fewer when the index is smaller).
            allowed: Optional boolean mask over rows; the search is then exact over those rows.
        """
        n = len(self)
        if n == 0 or k <= 0:
            return self.ids[:0], np.zeros(0, dtype=np.float32)
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(1, -1)
        if allowed is not None:
            rows = np.flatnonzero(allowed)
            if rows.size == 0:
                return self.ids[:0], np.zeros(0, dtype=np.float32)
            sims = self.vecs[rows] @ q[0]
            top = _top(sims, k)
            return self.ids[rows[top]], sims[top].astype(np.float32)
        if self._index is None:
            sims = self.vecs @ q[0]
            top = _top(sims, k)
            return self.ids[top], sims[top].astype(np.float32)
        kk = min(k, n)
        self._refresh_index()
        scores, rows = self._index.search(q, kk)
        valid = rows[0] >= 0
        return self.ids[rows[0][valid]], scores[0][valid].astype(np.float32)

    def cosine(self, query: np.ndarray, ids) -> np.ndarray:
        """Exact cosines of ``query`` with the given ids (0 for ids not in the index)."""
        out = np.zeros(len(ids), dtype=np.float32)
        rows = [self._row.get(int(i), -1) for i in ids]
        have = np.asarray([r >= 0 for r in rows], dtype=bool)
        if have.any():
            out[have] = self.vecs[np.asarray(rows)[have]] @ np.asarray(query, dtype=np.float32)
        return out

    def to_bytes(self) -> np.ndarray | None:
        """FAISS's CPU HNSW index serialised (graph and vectors), or None when there is no graph to keep."""
        if self._index is None or self.kind != "hnsw" or self.device.startswith("cuda"):
            return None
        self._refresh_index()
        return _faiss().serialize_index(self._index)

    def _refresh_index(self) -> None:
        if self._stale:
            self._index = self._new_index()
            if len(self):
                self._index.add(self.vecs)
            self._stale = False

    @classmethod
    def from_hnsw_bytes(cls, ids: np.ndarray, data: np.ndarray) -> "VectorIndex":
        """The CPU HNSW index ``to_bytes`` wrote: its graph is read, not rebuilt (for 100,000 vectors
        rebuilding takes about a minute); the vectors are taken from it."""
        faiss = _faiss()
        graph = faiss.deserialize_index(np.ascontiguousarray(data, dtype=np.uint8))
        if graph.ntotal != len(ids):
            raise ValueError(f"the HNSW index holds {graph.ntotal} vectors for {len(ids)} ids")
        graph.hnsw.efSearch = _EF_SEARCH
        index = cls.from_arrays(ids, graph.reconstruct_n(0, graph.ntotal), kind="flat")
        index.kind, index._index = "hnsw", graph
        return index

    @classmethod
    def from_arrays(cls, ids: np.ndarray, vecs: np.ndarray, kind: str = "flat", device: str = "cpu") -> "VectorIndex":
        """An index holding ``vecs`` (rows, taken over without a copy when they are writable float32) under ``ids``."""
        index = cls(vecs.shape[1], kind, device)
        index._ids = np.array(ids, dtype=np.int64)
        index._vecs = vecs if vecs.dtype == np.float32 and vecs.flags.writeable and vecs.flags.c_contiguous \
            else np.array(vecs, dtype=np.float32, order="C")
        index._n = len(index._ids)
        index._row = dict(zip(index._ids.tolist(), range(index._n)))
        if len(index._row) != index._n or index._vecs.shape[0] != index._n:
            raise ValueError("ids must be distinct and as many as the vectors")
        if index._index is not None and index._n:
            index._index.add(index.vecs)
        return index

    def row_of(self, doc_id: int) -> int:
        return self._row[doc_id]

    def nbytes(self) -> int:
        """Estimated bytes held: the arrays' reserved rows, the id → row map, FAISS's copy and graph."""
        held = self._ids.nbytes + self._vecs.nbytes + _DICT_ENTRY * len(self._row)
        if self._index is not None:
            held += self._n * self.dim * 4 + (_HNSW_LINKS * self._n if self.kind == "hnsw" else 0)
        return held


_EF_SEARCH = 128
_DICT_ENTRY = 100  # an int → int dict entry: its slot, hash table share and the key and value objects
_HNSW_LINKS = 2 * 32 * 4 + 64  # FAISS HNSW, M=32: ~2M neighbour ids of 4 bytes per vector on level 0, and levels


def _top(sims: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` largest scores, best first, with FAISS's flat-index tie rule (the index
    this replaced, kept so that rankings did not move): of the items tied at the cut the earlier rows
    are kept, and tied items are listed later row first."""
    kk = min(k, sims.size)
    if kk < sims.size:
        cut = np.partition(sims, sims.size - kk)[sims.size - kk]  # the kk-th largest score
        above = np.flatnonzero(sims > cut)
        top = np.concatenate([above, np.flatnonzero(sims == cut)[: kk - above.size]])
    else:
        top = np.arange(sims.size)
    return top[np.lexsort((-top, -sims[top]))]
