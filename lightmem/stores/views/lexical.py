"""An incremental BM25 index (Lucene variant, as bm25s computes it) for one user's items.

bm25s indexes a static corpus; memory grows by a turn at a time, so this index appends
documents in O(|doc|) and scores a query with a few vectorised numpy operations.
Deleted documents are tombstoned and compacted away once they are a quarter of the index.
"""
from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import numpy as np

from lightmem.text import analyze

_DICT_ENTRY = 100  # an int → int dict entry with its key and value objects
_TERM_ENTRY = 300  # a term's dict entry: the string, the tuple and the two array headers

# BM25's term-frequency saturation and length normalisation: the defaults of every store and view.
BM25_K1, BM25_B = 1.5, 0.75


class LexicalHits(NamedTuple):
    ids: np.ndarray
    scores: np.ndarray
    row_scores: np.ndarray  # every row's score, for LexicalIndex.lookup


class LexicalIndex:
    """BM25 over documents identified by int ids.

    Postings are packed arrays (4-byte rows and term frequencies), not lists of Python ints: a
    memory costs ~8 bytes per distinct term it holds, so a worker can keep many users' views.

    Args:
        k1: Term-frequency saturation.
        b: Length normalisation.
    """

    def __init__(self, k1: float = BM25_K1, b: float = BM25_B) -> None:
        self.k1, self.b = k1, b
        self._ids = array("q")
        self._len = array("i")
        self._alive = bytearray()
        self._row: dict[int, int] = {}
        self._postings: dict[str, tuple[array, array]] = {}  # term → (rows, term frequencies)
        self._n_postings = 0
        self._n_alive = 0
        self._sum_len = 0
        self._arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # ids, alive, lengths

    def __len__(self) -> int:
        return self._n_alive

    def add(self, doc_id: int, text: str) -> None:
        """Index ``text`` under ``doc_id`` (re-adding an id replaces the old text)."""
        if doc_id in self._row:
            self.remove([doc_id])
        terms = analyze(text)
        row = len(self._ids)
        self._ids.append(doc_id)
        self._len.append(len(terms))
        self._alive.append(1)
        self._row[doc_id] = row
        self._arrays = None
        self._n_alive += 1
        self._sum_len += len(terms)
        counts: dict[str, int] = {}
        for t in terms:
            counts[t] = counts.get(t, 0) + 1
        for t, c in counts.items():
            post = self._postings.get(t)
            if post is None:
                post = self._postings[t] = (array("i"), array("f"))
            post[0].append(row)
            post[1].append(c)
        self._n_postings += len(counts)

    def add_many(self, docs: Sequence[tuple[int, str]]) -> None:
        """Index many ``(doc_id, text)`` at once (a view loaded from the tables): the same index as
        ``add`` one by one, built per term instead of per posting."""
        if len(docs) < 32 or len({d for d, _ in docs}) < len(docs):  # few, or an id twice: one by one
            for doc_id, text in docs:
                self.add(doc_id, text)
            return
        self.remove([d for d, _ in docs if d in self._row])
        vocab: dict[str, int] = {}
        names: list[str] = []
        tids: list[int] = []
        lengths = np.zeros(len(docs), dtype=np.int32)
        for i, (_, text) in enumerate(docs):
            terms = analyze(text)
            lengths[i] = len(terms)
            for t in terms:
                tid = vocab.get(t)
                if tid is None:
                    tid = vocab[t] = len(names)
                    names.append(t)
                tids.append(tid)
        first = len(self._ids)
        rows = np.repeat(np.arange(first, first + len(docs), dtype=np.int64), lengths)
        # (term, row) pairs counted: the term frequencies, grouped by term and in row order within a term.
        pairs, tf = np.unique(np.asarray(tids, dtype=np.int64) * (first + len(docs)) + rows, return_counts=True)
        pair_tid, pair_row = np.divmod(pairs, first + len(docs))
        bounds = np.flatnonzero(np.diff(pair_tid)) + 1
        starts = np.concatenate([[0], bounds]) if pairs.size else np.zeros(0, dtype=np.int64)
        ends = np.concatenate([bounds, [pairs.size]]) if pairs.size else np.zeros(0, dtype=np.int64)
        row_bytes, tf_bytes = pair_row.astype(np.int32).tobytes(), tf.astype(np.float32).tobytes()
        for tid, a, b in zip(pair_tid[starts].tolist(), starts.tolist(), ends.tolist()):
            post = self._postings.get(names[tid])
            if post is None:
                post = self._postings[names[tid]] = (array("i"), array("f"))
            post[0].frombytes(row_bytes[4 * a : 4 * b])
            post[1].frombytes(tf_bytes[4 * a : 4 * b])
        ids = [int(d) for d, _ in docs]
        self._ids.extend(ids)
        self._len.frombytes(lengths.tobytes())
        self._alive.extend(b"\x01" * len(docs))
        self._row.update(zip(ids, range(first, first + len(docs))))
        self._n_alive += len(docs)
        self._sum_len += int(lengths.sum())
        self._n_postings += int(pairs.size)
        self._arrays = None

    def remove(self, doc_ids: Iterable[int]) -> None:
        """Tombstone documents; compact when a quarter of the rows are dead."""
        for doc_id in doc_ids:
            row = self._row.pop(doc_id, None)
            if row is None:
                continue
            self._alive[row] = 0
            self._arrays = None
            self._n_alive -= 1
            self._sum_len -= self._len[row]
        if len(self._ids) > 64 and self._n_alive < 0.75 * len(self._ids):
            self._compact()

    def _compact(self) -> None:
        alive = np.frombuffer(bytes(self._alive), dtype=np.uint8).astype(bool)
        keep = np.flatnonzero(alive)
        remap = np.full(len(alive), -1, dtype=np.int64)
        remap[keep] = np.arange(keep.size)
        postings: dict[str, tuple[array, array]] = {}
        n_postings = 0
        for t, (rows, tfs) in self._postings.items():
            new = remap[np.frombuffer(rows, dtype=np.int32)]
            live = new >= 0
            if live.any():
                postings[t] = (array("i", new[live].astype(np.int32).tobytes()),
                               array("f", np.frombuffer(tfs, dtype=np.float32)[live].tobytes()))
                n_postings += int(live.sum())
        ids = np.frombuffer(self._ids, dtype=np.int64)[keep]
        self._ids = array("q", ids.tobytes())
        self._len = array("i", np.frombuffer(self._len, dtype=np.int32)[keep].tobytes())
        self._alive = bytearray(b"\x01" * keep.size)
        self._row = {int(d): i for i, d in enumerate(ids.tolist())}
        self._postings, self._n_postings, self._arrays = postings, n_postings, None

    def export(self) -> dict[str, np.ndarray]:
        """The index as flat arrays (live rows only; ``from_export`` rebuilds it without analysing any text).

        Postings are concatenated term by term: ``terms`` holds the terms joined by newlines (UTF-8), ``term_n``
        how many postings each has, ``rows``/``tfs`` the postings themselves.
        """
        if self._n_alive < len(self._ids):
            self._compact()
        names = list(self._postings)
        return {
            "ids": np.frombuffer(self._ids, dtype=np.int64).copy(),
            "lengths": np.frombuffer(self._len, dtype=np.int32).copy(),
            "terms": np.frombuffer("\n".join(names).encode(), dtype=np.uint8),
            "term_n": np.fromiter((len(self._postings[t][0]) for t in names), dtype=np.int64, count=len(names)),
            "rows": np.frombuffer(b"".join(bytes(self._postings[t][0]) for t in names), dtype=np.int32),
            "tfs": np.frombuffer(b"".join(bytes(self._postings[t][1]) for t in names), dtype=np.float32),
            "params": np.asarray([self.k1, self.b], dtype=np.float64),
        }

    @classmethod
    def from_export(cls, a: dict[str, np.ndarray]) -> "LexicalIndex":
        """The index ``export`` wrote (the same postings, rows and statistics)."""
        k1, b = (float(x) for x in a["params"])
        index = cls(k1, b)
        ids, lengths = a["ids"].astype(np.int64), a["lengths"].astype(np.int32)
        names = bytes(a["terms"]).decode().split("\n") if a["terms"].size else []
        counts = a["term_n"].astype(np.int64)
        if len(ids) != len(lengths) or len(names) != len(counts) \
                or len(a["rows"]) != int(counts.sum()) or len(a["tfs"]) != len(a["rows"]):
            raise ValueError("inconsistent BM25 export")
        row_bytes, tf_bytes = a["rows"].astype(np.int32).tobytes(), a["tfs"].astype(np.float32).tobytes()
        ends = np.cumsum(counts) * 4
        starts = ends - counts * 4
        index._postings = {t: (array("i", row_bytes[s:e]), array("f", tf_bytes[s:e]))
                           for t, s, e in zip(names, starts.tolist(), ends.tolist())}
        index._ids = array("q", ids.tobytes())
        index._len = array("i", lengths.tobytes())
        index._alive = bytearray(b"\x01" * len(ids))
        index._row = dict(zip(ids.tolist(), range(len(ids))))
        index._n_postings, index._n_alive, index._sum_len = int(counts.sum()), len(ids), int(lengths.sum())
        return index

    def _posting(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        p = self._postings.get(term)
        if p is None:
            return None
        # Copies (a memcpy), so that no numpy view pins the arrays while later writes append to them.
        return np.frombuffer(p[0], dtype=np.int32).copy(), np.frombuffer(p[1], dtype=np.float32).copy()

    def nbytes(self) -> int:
        """Estimated bytes held: packed postings, per-row arrays and the id → row map, per-term entries."""
        rows = len(self._ids)
        return (int(1.125 * (8 * self._n_postings + 13 * rows)) + (13 * rows if self._arrays is not None else 0)
                + _DICT_ENTRY * len(self._row) + _TERM_ENTRY * len(self._postings))

    def _cached_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # Rebuilt only after a write: queries outnumber writes on the read path.
        if self._arrays is None:
            self._arrays = (
                np.frombuffer(self._ids, dtype=np.int64).copy(),
                np.frombuffer(bytes(self._alive), dtype=np.uint8).astype(bool),
                np.frombuffer(self._len, dtype=np.int32).astype(np.float32),
            )
        return self._arrays

    def row_scores(self, query: str) -> np.ndarray:
        """BM25 of every row (dead rows score 0); index with ``row_of``."""
        ids, alive, lengths = self._cached_arrays()
        out = np.zeros(len(ids), dtype=np.float32)
        if self._n_alive == 0:
            return out
        avgdl = max(self._sum_len / self._n_alive, 1e-9)
        norm = self.k1 * ((1.0 - self.b) + self.b * lengths / avgdl)
        for term in dict.fromkeys(analyze(query)):
            post = self._posting(term)
            if post is None:
                continue
            rows, tfs = post
            live = alive[rows]
            df = int(live.sum())
            if df == 0:
                continue
            idf = np.log(1.0 + (self._n_alive - df + 0.5) / (df + 0.5))
            r, tf = rows[live], tfs[live]
            out[r] += idf * tf / (tf + norm[r])
        return out

    def lookup(self, row_scores: np.ndarray, doc_ids) -> np.ndarray:
        """Scores of ``doc_ids`` from ``row_scores`` (0 for ids not indexed)."""
        rows = [self._row.get(int(d), -1) for d in doc_ids]
        return np.asarray([row_scores[r] if r >= 0 else 0.0 for r in rows], dtype=np.float32)

    def scores(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        """BM25 of every live document for ``query``.

        Returns:
            ``(doc_ids, scores)`` aligned arrays over live documents (scores >= 0).
        """
        ids, alive, _ = self._cached_arrays()
        return ids[alive], self.row_scores(query)[alive]

    def top(
        self, query: str, k: int, allowed: Callable[[np.ndarray], np.ndarray | None] | None = None
    ) -> LexicalHits:
        """The ``k`` best live documents with a positive score, best first.

        Args:
            query: Query text.
            k: How many to return.
            allowed: Maps the live ids to a boolean mask (or None for all); documents
                outside it are skipped.

        Returns:
            ids and scores of the hits, and every row's score for ``lookup`` (the query
            is scored once, also for candidates another signal found).
        """
        row_scores = self.row_scores(query)
        ids, alive, _ = self._cached_arrays()
        keep = alive & (row_scores > 0)
        mask = allowed(ids[alive]) if allowed is not None else None
        if mask is not None:
            keep[np.flatnonzero(alive)[~mask]] = False
        pos = np.flatnonzero(keep)
        if k <= 0:
            pos = pos[:0]
        elif pos.size > k:
            pos = pos[np.argpartition(-row_scores[pos], k - 1)[:k]]
        pos = pos[np.argsort(-row_scores[pos], kind="stable")]
        return LexicalHits(ids[pos], row_scores[pos], row_scores)
