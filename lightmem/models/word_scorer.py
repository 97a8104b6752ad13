"""Word scorers: how much each word of a text is worth keeping. The write path stores a memory's scores
(``keep_codes``: retrieval squeezes its excerpts with them), and the sensory stage's pre-compression
(LightMem §3.1) keeps the words a scorer ranks highest, at a rate r.

Two scorers share one word-level selection:

- ``TokenClassifierWordScorer``: P(retain) from a token classifier (Eq. 1), LLMLingua-2 style.
  It loads the LoRA checkpoint of checkpoints/word_scorer, or any full token-classification folder
  with two labels (label 1 = keep), such as an LLMLingua-2 checkpoint a user has locally.
- ``CrossEntropyWordScorer``: the per-token cross-entropy under a causal SLM (Eq. 2); the
  least predictable words carry the most information and are kept.

Their former names (``Compressor``, ``TokenClassifierCompressor``, ``CrossEntropyCompressor``) still resolve,
with a DeprecationWarning, for one release.

Scores are aggregated to whole words, so words are kept or dropped whole. A text is never
emptied, words inside ``[...]`` annotations (the anchored dates of normalization) are always
kept, and over-long inputs are scored window by window (``fit`` also compresses repeatedly at
0.5 until a text fits a token limit, the paper's trick for the encoder's 512-token window).
"""
from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from lightmem.deprecation import moved
from lightmem.models.tokens import tokenizer_lock

log = logging.getLogger(__name__)


def keep_top_rate(probs: Sequence[float], rate: float) -> list[int]:
    """Keep flags for the ``ceil(rate·n)`` highest-probability words (at least one); ties keep earlier words."""
    n = len(probs)
    if n == 0:
        return []
    keep_n = max(1, min(n, math.ceil(rate * n)))
    top = set(sorted(range(n), key=lambda i: -probs[i])[:keep_n])
    return [int(i in top) for i in range(n)]


@runtime_checkable
class WordScorer(Protocol):
    """Scores words for keeping and compresses texts at a rate."""

    rate: float

    def word_scores_many(self, docs: Sequence[Sequence[str]]) -> list[list[float]]: ...

    def compress_many(self, texts: Sequence[str], rate: float | None = None) -> list[str]: ...


def protected(words: Sequence[str]) -> list[bool]:
    """Which words lie inside a ``[...]`` annotation (never dropped)."""
    out, depth = [], 0
    for w in words:
        opens = w.startswith("[")
        out.append(depth > 0 or opens)
        depth += w.count("[") - w.count("]")
        depth = max(depth, 0)
    return out


def select_words(words: Sequence[str], scores: Sequence[float], rate: float) -> str:
    """The words kept at ``rate`` in their original order: the top ``ceil(r·n)`` of the free words
    plus every protected one. Falls back to the original when nothing readable would remain."""
    guard = protected(words)
    free = [i for i, g in enumerate(guard) if not g]
    keep = set(i for i, g in enumerate(guard) if g)
    if free:
        flags = keep_top_rate([scores[i] for i in free], rate)
        keep.update(i for i, f in zip(free, flags) if f)
    out = " ".join(words[i] for i in sorted(keep))
    return out if any(c.isalnum() for c in out) else " ".join(words)


KEEP_DIGITS = 2  # characters per word of an encoded keep score (00-99)


def encode_keep(scores: Sequence[float]) -> str:
    """Word keep scores in [0, 1] as a compact string, two digits per word ("9107..."), stored in
    a memory's ``metadata["keep"]`` aligned with ``text.split()``."""
    return "".join(f"{min(99, max(0, int(s * 100))):02d}" for s in scores)


def keep_codes(scorer: WordScorer, texts: Sequence[str]) -> list[str]:
    """The ``encode_keep`` strings of ``texts``, their words scored in one batch by ``scorer`` (its
    ``word_scores_many``: the trained one on the write path). ``lightmem.retrieval.excerpts`` reads them."""
    return [encode_keep(s) for s in scorer.word_scores_many([t.split() for t in texts])] if texts else []


class _KeepAtRate:
    """Word-level selection shared by both scorers; subclasses give ``word_scores_many``."""

    rate: float

    def word_scores_many(self, docs: Sequence[Sequence[str]]) -> list[list[float]]:
        raise NotImplementedError

    def compress_many(self, texts: Sequence[str], rate: float | None = None) -> list[str]:
        """Each text compressed at ``rate`` (default: the instance's); empty texts come back as they are."""
        r = self.rate if rate is None else _check_rate(rate)
        docs = [t.split() for t in texts]
        todo = [i for i, d in enumerate(docs) if d]
        scores = self.word_scores_many([docs[i] for i in todo]) if todo else []
        out = list(texts)
        for i, s in zip(todo, scores):
            out[i] = select_words(docs[i], s, r)
        return out

    def compress(self, text: str, rate: float | None = None) -> str:
        return self.compress_many([text], rate)[0]

    def fit(self, text: str, max_tokens: int, count: Callable[[str], int], rate: float = 0.5, max_rounds: int = 12) -> str:
        """Compress ``text`` at ``rate`` again and again until ``count(text) <= max_tokens``."""
        for _ in range(max_rounds):
            if count(text) <= max_tokens:
                break
            shorter = self.compress(text, rate)
            if shorter == text:  # protected words alone exceed the limit
                break
            text = shorter
        return text


@functools.lru_cache(maxsize=1)
def default_word_scorer() -> "TokenClassifierWordScorer | None":
    """The trained word scorer of checkpoints/word_scorer, loaded once per process: what the write path
    scores each memory's words with by default. None, said once, without that checkpoint."""
    from lightmem.models.registry import checkpoint_path

    ckpt = checkpoint_path("word_scorer")
    if not (ckpt / "adapter_config.json").exists():
        log.warning("no trained word scorer at %s (set LIGHTMEM_CHECKPOINTS or run `make train`); "
                    "memories are written without word keep scores, so excerpts are not squeezed", ckpt)
        return None
    return TokenClassifierWordScorer(str(ckpt), backend="onnx_int8")


def _resolve_backend(backend: str, device: str) -> str:
    if backend not in ("auto", "torch", "onnx", "onnx_int8"):
        raise ValueError(f"backend must be auto, torch, onnx or onnx_int8; got {backend!r}")
    if backend == "auto":
        return "torch" if str(device).startswith("cuda") else "onnx"
    if backend.startswith("onnx") and not str(device).startswith("cpu"):
        raise ValueError(f"the ONNX backend runs on the CPU; got device={device!r}: use backend='torch' on a GPU")
    return backend


def _check_rate(rate: float) -> float:
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 < rate <= 1.0:
        raise ValueError(f"rate must be in (0, 1], got {rate!r}")
    return float(rate)


class TokenClassifierWordScorer(_KeepAtRate):
    """Keep/drop words with a token classifier (Eq. 1): the trained MiniLM LoRA by default.

    Args:
        checkpoint: Folder exported by the word scorer's training recipe (LoRA adapter; ``make train``), or a full
            token-classification model folder with two labels, e.g. an LLMLingua-2 checkpoint.
        base_model: Packaged base a LoRA adapter was trained on (unused for full folders).
        rate: Share of words kept (0 < r ≤ 1); the paper's default is 0.6.
        max_words: Words per encoder window (long inputs are scored in windows).
        batch_size: Windows per forward pass.
        device: ``auto``, ``cpu`` or ``cuda``.
        backend: ``auto`` (ONNX Runtime on the CPU, torch on a GPU), ``torch`` or ``onnx``: the same
            scores; the ONNX graph is exported from the merged model once and cached. ``onnx_int8``
            quantizes both graphs' weight matrices to int8 (faster; scores and attention differ a little).
    """

    def __init__(self, checkpoint: str = "checkpoints/word_scorer", base_model: str = "all-MiniLM-L6-v2", rate: float = 0.6,
                 max_words: int = 200, batch_size: int = 32, device: str = "auto", backend: str = "auto") -> None:
        from transformers import AutoModelForTokenClassification

        from lightmem.models.adapters import load_adapted
        from lightmem.models.registry import pick_device

        self.device = pick_device(device)
        model, tok = load_adapted(AutoModelForTokenClassification, checkpoint, base_model, "word scorer", num_labels=2)
        self._init(model.to(self.device), tok, rate, max_words, batch_size, backend)

    @classmethod
    def from_objects(cls, model, tokenizer, rate: float = 0.6, max_words: int = 200, batch_size: int = 32,
                     backend: str = "torch") -> "TokenClassifierWordScorer":
        self = cls.__new__(cls)
        self.device = str(next(model.parameters()).device)
        self._init(model, tokenizer, rate, max_words, batch_size, backend)
        return self

    def _init(self, model, tok, rate: float, max_words: int, batch_size: int, backend: str = "torch") -> None:
        if model.config.num_labels != 2:
            raise ValueError(f"a word scorer needs a 2-label token classifier (keep = label 1), got {model.config.num_labels} labels")
        self.model, self.tok, self.rate = model, tok, _check_rate(rate)
        self.max_words, self.batch_size = max(1, max_words), max(1, batch_size)
        self.backend = _resolve_backend(backend, self.device)
        self._keep = None  # the ONNX scorer, built on first use
        self._fingerprint: str | None = None

    def _graph(self, kind: str, export) -> Path:
        """The cached ONNX graph ``kind`` of this model (exported on first use; quantized to int8
        from the cached fp32 graph on the ``onnx_int8`` backend)."""
        from lightmem.models.onnx_encoder import INT8_FORMAT, quantize_int8
        from lightmem.models.onnx_token import cached_graph, model_fingerprint
        from lightmem.models.registry import ModelRegistry

        if self._fingerprint is None:
            self._fingerprint = model_fingerprint(self.model)
        cache, key = ModelRegistry().cache_dir, f"token-classifier-{self._fingerprint}.{kind}"
        fp32 = cached_graph(cache, key, export)
        if self.backend != "onnx_int8":
            return fp32
        return cached_graph(cache, f"{key}+int8.{INT8_FORMAT}", lambda tmp: quantize_int8(fp32, tmp))

    def _keep_probs(self, chunks: list[list[str]]):
        """(P(keep) per sub-token as a batch × tokens array, the tokenizer's encoding)."""
        if self.backend != "torch":
            from lightmem.models.onnx_token import OnnxKeepScorer, export_keep_probs

            if self._keep is None:
                self._keep = OnnxKeepScorer(self._graph("keep", lambda tmp: export_keep_probs(self.model, self.tok, tmp)))
            with tokenizer_lock(self.tok):  # one scorer per process; background indexers call it too
                enc = self.tok(chunks, is_split_into_words=True, truncation=True, max_length=512, padding=True,
                               return_tensors="np")
            return self._keep(enc), enc
        import torch

        with tokenizer_lock(self.tok):
            enc = self.tok(chunks, is_split_into_words=True, truncation=True, max_length=512, padding=True,
                           return_tensors="pt")
        with torch.inference_mode():
            p = torch.softmax(self.model(**enc.to(self.device)).logits.float(), dim=-1)[..., 1].cpu().numpy()
        return p, enc

    def attention_fn(self, layers: Sequence[int]):
        """Token ids → the attention of ``layers`` averaged over layers and heads, on this backend;
        None on torch (the segmenter then runs the torch model itself)."""
        if self.backend == "torch":
            return None
        from lightmem.models.onnx_token import OnnxAttention, export_attention

        layers = tuple(int(i) for i in layers)
        key = "attention" + "".join(f"_{i}" for i in layers)
        return OnnxAttention(self._graph(key, lambda tmp: export_attention(self.model, self.tok, layers, tmp)))

    def count_tokens(self, text: str) -> int:
        """Sub-word tokens of ``text`` under the scorer's tokenizer (no special tokens)."""
        with tokenizer_lock(self.tok):
            return len(self.tok(text, add_special_tokens=False)["input_ids"])

    def word_probs(self, words: Sequence[str]) -> list[float]:
        """P(keep) of each word (its first sub-token's)."""
        return self.word_scores_many([words])[0]

    def word_scores_many(self, docs: Sequence[Sequence[str]]) -> list[list[float]]:
        """P(keep) per word of each document, windows of ``max_words`` batched across documents."""
        windows = [(d, i) for d, words in enumerate(docs) for i in range(0, len(words), self.max_words)]
        # Windows of similar length share a batch, so each pads to its own longest.
        windows.sort(key=lambda w: -min(self.max_words, len(docs[w[0]]) - w[1]))
        out = [[1.0] * len(words) for words in docs]  # a word the tokenizer drops is kept
        for b in range(0, len(windows), self.batch_size):
            batch = windows[b : b + self.batch_size]
            chunks = [list(docs[d][i : i + self.max_words]) for d, i in batch]
            probs, enc = self._keep_probs(chunks)
            p = probs.tolist()
            for row, (d, i) in enumerate(batch):
                seen: set[int] = set()
                for pos, w in enumerate(enc.word_ids(row)):
                    if w is not None and w not in seen:
                        seen.add(w)
                        out[d][i + w] = p[row][pos]
        return out


class CrossEntropyWordScorer(_KeepAtRate):
    """Keep the least predictable words under a causal SLM (LightMem Eq. 2).

    A word's score is the mean cross-entropy −log P(token | prefix) of its sub-tokens; the
    first word, which has no prefix, is always ranked first.

    Args:
        model_name: Packaged causal LM (registry name), or a transformers folder.
        rate: Share of words kept.
        max_tokens: Tokens per scoring window.
        device: ``auto``, ``cpu`` or ``cuda``.
    """

    def __init__(self, model_name: str = "SmolLM2-135M-Instruct", rate: float = 0.6, max_tokens: int = 512, device: str = "auto") -> None:
        from pathlib import Path

        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from lightmem.models.registry import ModelRegistry, pick_device

        folder = Path(model_name) if Path(model_name).is_dir() else ModelRegistry().causal_lm_path(model_name)
        self.device = pick_device(device)
        dtype = torch.float32 if self.device == "cpu" else torch.bfloat16
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype).to(self.device).eval()
        self._init(model, AutoTokenizer.from_pretrained(str(folder)), rate, max_tokens)

    @classmethod
    def from_objects(cls, model, tokenizer, rate: float = 0.6, max_tokens: int = 512) -> "CrossEntropyWordScorer":
        self = cls.__new__(cls)
        self.device = str(next(model.parameters()).device)
        self._init(model, tokenizer, rate, max_tokens)
        return self

    def _init(self, model, tok, rate: float, max_tokens: int) -> None:
        self.model, self.tok, self.rate, self.max_tokens = model, tok, _check_rate(rate), max(8, max_tokens)

    def word_scores_many(self, docs: Sequence[Sequence[str]]) -> list[list[float]]:
        return [self._scores(list(words)) for words in docs]

    def _scores(self, words: list[str]) -> list[float]:
        import torch

        ids: list[int] = []
        owner: list[int] = []
        for j, w in enumerate(words):
            with tokenizer_lock(self.tok):
                piece = self.tok((" " if j else "") + w, add_special_tokens=False)["input_ids"]
            ids.extend(piece)
            owner.extend([j] * len(piece))
        ce = [math.inf] * len(ids)
        for start in range(0, len(ids), self.max_tokens):
            window = torch.tensor([ids[start : start + self.max_tokens]], device=self.device)
            with torch.inference_mode():
                logp = torch.log_softmax(self.model(input_ids=window).logits[0].float(), dim=-1)
            nll = (-logp[:-1].gather(1, window[0, 1:, None])[:, 0]).cpu().tolist()
            ce[start + 1 : start + 1 + len(nll)] = nll  # a window's first token has no prefix: kept
        sums: dict[int, list[float]] = {}
        for j, c in zip(owner, ce):
            sums.setdefault(j, []).append(c)
        return [sum(sums[j]) / len(sums[j]) if j in sums else math.inf for j in range(len(words))]


__getattr__ = moved(__name__, {"Compressor": f"{__name__}.WordScorer",
                               "TokenClassifierCompressor": f"{__name__}.TokenClassifierWordScorer",
                               "CrossEntropyCompressor": f"{__name__}.CrossEntropyWordScorer"})
