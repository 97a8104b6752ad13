"""Topic segmentation of the sensory buffer (LightMem §3.1, Appendix C.1).

A boundary before turn k is kept when two signals agree (B = B1 ∩ B2):

- B1, attention: the compressor's encoder reads the buffer's turns as one sequence; the
  turn-to-turn attention matrix M (chosen layers and heads averaged, attention sinks masked,
  each row normalized over the preceding turns) gives the adjacent-turn sequence M[k, k-1],
  and its local peaks mark turns that open a new topic.
- B2, similarity: the cosine of adjacent turn embeddings falls below τ.

The scoring functions are pure (numpy in, indices out); ``TopicSegmenter`` runs the models.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

METHODS = ("hybrid", "attention", "similarity")


def local_peaks(values: Sequence[float]) -> list[int]:
    """Indices i with values[i] above both neighbours (the two ends, having one, are never peaks)."""
    v = list(values)
    return [i for i in range(1, len(v) - 1) if v[i] > v[i - 1] and v[i] > v[i + 1]]


def adjacent_attention(turn_matrix: np.ndarray) -> np.ndarray:
    """a[k] = M[k, k-1] after normalizing each row over the turns before it (a[0] = nan)."""
    n = turn_matrix.shape[0]
    a = np.full(n, np.nan)
    for k in range(1, n):
        prev = turn_matrix[k, :k]
        total = prev.sum()
        a[k] = prev[-1] / total if total > 0 else np.nan
    return a


def attention_boundaries(turn_matrix: np.ndarray, shift: int = 0) -> list[int]:
    """B1: turns k whose attention to turn k-1 is a local peak; the boundary opens before k + ``shift``.

    ``shift=0`` is the paper's rule (the peak turn opens the new topic); ``shift=-1`` reads the
    peak as the second turn of the new topic, which attends most to the first one.
    """
    a = adjacent_attention(turn_matrix)
    n = turn_matrix.shape[0]
    # a[1] is 1 by construction (a single preceding turn); peaks are looked for from k = 2.
    return sorted({k + 2 + shift for k in local_peaks(np.nan_to_num(a[2:], nan=0.0))} & set(range(1, n)))


def similarity_boundaries(vectors: np.ndarray, tau: float) -> list[int]:
    """B2: turns k whose cosine with turn k-1 is below ``tau`` (rows are L2-normalized)."""
    if len(vectors) < 2:
        return []
    sims = np.sum(vectors[1:] * vectors[:-1], axis=1)
    return [k + 1 for k in np.flatnonzero(sims < tau).tolist()]


def combine(b1: Sequence[int], b2: Sequence[int], method: str = "hybrid") -> list[int]:
    """The final boundaries: B1 ∩ B2 (hybrid), or one signal alone for the ablations."""
    if method == "hybrid":
        return sorted(set(b1) & set(b2))
    if method == "attention":
        return sorted(set(b1))
    if method == "similarity":
        return sorted(set(b2))
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")


def turn_attention(attn: np.ndarray, spans: Sequence[tuple[int, int]], sink: int = 3) -> np.ndarray:
    """Turn-level attention from token attention ``attn`` [L, L] (layers and heads averaged).

    The first and last ``sink`` positions are masked and rows renormalized (attention sinks);
    M[k, j] is the mean attention of turn k's tokens to turn j's tokens.
    """
    a = np.array(attn, dtype=np.float64)
    L = a.shape[0]
    if sink > 0 and L > 2 * sink:
        a[:, :sink] = 0.0
        a[:, L - sink :] = 0.0
        a /= np.maximum(a.sum(axis=1, keepdims=True), 1e-12)
    n = len(spans)
    m = np.zeros((n, n))
    for k, (s0, e0) in enumerate(spans):
        for j, (s1, e1) in enumerate(spans):
            if e0 > s0 and e1 > s1:
                m[k, j] = a[s0:e0, s1:e1].mean()
    return m


def segments_from(boundaries: Sequence[int], n: int) -> list[tuple[int, int]]:
    """[start, end) turn ranges cut at ``boundaries`` (indices of the first turn of a segment)."""
    cuts = [0, *sorted(b for b in set(boundaries) if 0 < b < n), n]
    return [(cuts[i], cuts[i + 1]) for i in range(len(cuts) - 1) if cuts[i + 1] > cuts[i]]


class TopicSegmenter:
    """Finds topic boundaries in a buffer of turns with the compressor's encoder and the embedder.

    Args:
        model: The compressor's encoder (a transformers token classifier), for B1.
        tokenizer: Its tokenizer.
        tau: Similarity threshold of B2.
        method: ``hybrid`` (B1 ∩ B2), ``attention`` or ``similarity``.
        layers: Encoder layers averaged for B1 (negative counts from the top).
        sink: Positions masked at each end of the sequence.
        max_tokens: Encoder window (the sensory buffer's size).
        shift: Where a peak puts the boundary (see ``attention_boundaries``).
        attention: Token ids -> the attention of ``layers`` averaged over layers and heads
            (the compressor's ONNX graph, ``TokenClassifierWordScorer.attention_fn``); by default
            ``model`` runs it in torch.
    """

    def __init__(self, model=None, tokenizer=None, tau: float = 0.3, method: str = "hybrid",
                 layers: Sequence[int] = (-3, -2, -1), sink: int = 3, max_tokens: int = 512, shift: int = 0,
                 attention: Callable[[list[int]], np.ndarray] | None = None) -> None:
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        if method != "similarity" and model is None and attention is None:
            raise ValueError(f"segmentation method {method!r} needs the compressor's encoder (model=...)")
        if method != "similarity" and tokenizer is None:
            raise ValueError(f"segmentation method {method!r} needs the encoder's tokenizer (tokenizer=...)")
        self.model, self.tok, self.tau, self.method = model, tokenizer, tau, method
        self.layers, self.sink, self.max_tokens, self.shift = tuple(layers), sink, max_tokens, shift
        self._attention = attention

    def count(self, text: str) -> int:
        return len(self.tok(text, add_special_tokens=False)["input_ids"]) if self.tok is not None else len(text.split())

    def attention_matrix(self, texts: Sequence[str]) -> np.ndarray:
        """The turn-level attention matrix of ``texts`` read as one sequence."""
        import torch

        pieces = [self.tok(t, add_special_tokens=False)["input_ids"] for t in texts]
        budget = self.max_tokens - 2
        if sum(map(len, pieces)) > budget:  # the caller fills the buffer to the window; this only guards
            cap = max(1, budget // max(1, len(pieces)))
            pieces = [p[:cap] for p in pieces]
        ids = [self.tok.cls_token_id] if self.tok.cls_token_id is not None else []
        spans = []
        for piece in pieces:
            spans.append((len(ids), len(ids) + len(piece)))
            ids.extend(piece)
        if self.tok.sep_token_id is not None:
            ids.append(self.tok.sep_token_id)
        if self._attention is not None:
            return turn_attention(np.asarray(self._attention(ids), dtype=np.float32), spans, self.sink)
        device = next(self.model.parameters()).device
        # sdpa returns no attention weights: eager for this pass only (the compressor keeps sdpa)
        before = getattr(self.model.config, "_attn_implementation", None)
        if before not in (None, "eager"):
            self.model.set_attn_implementation("eager")
        try:
            with torch.inference_mode():
                out = self.model(input_ids=torch.tensor([ids], device=device), output_attentions=True)
        finally:
            if before not in (None, "eager"):
                self.model.set_attn_implementation(before)
        att = torch.stack([out.attentions[i][0] for i in self.layers]).float().mean(dim=(0, 1)).cpu().numpy()
        return turn_attention(att, spans, self.sink)

    def boundaries(self, texts: Sequence[str], vectors: np.ndarray | None = None) -> list[int]:
        """Indices k of the turns that open a new topic (never 0)."""
        n = len(texts)
        if n < 2:
            return []
        b1 = attention_boundaries(self.attention_matrix(texts), self.shift) if self.method != "similarity" else []
        if self.method == "attention":
            return combine(b1, [], "attention")
        if vectors is None:
            raise ValueError("similarity-based segmentation needs the turns' embeddings")
        return combine(b1, similarity_boundaries(np.asarray(vectors), self.tau), self.method)
