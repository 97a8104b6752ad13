"""Selector (SLM-2): Stage 2 keeps at most K of the Stage-1 candidates (5K by default, ``retrieval.candidate_factor``).

It only selects: scores decide which candidates stay, the memory text is never changed.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from lightmem.llm.base import LLM, GenerationError
from lightmem.roles import prompts
from lightmem.timeutil import iso
from lightmem.types import Hit, MemoryItem, RetrievalPlan

log = logging.getLogger(__name__)


@runtime_checkable
class Selector(Protocol):
    """Selects ≤ k hits from the candidates; it never rewrites memory text."""

    def select(self, plan: RetrievalPlan, candidates: Sequence[Hit], k: int) -> list[Hit]: ...


class Stage1Selector:
    """Keeps the top k by Stage-1 score (the "without semantic reranking" setting)."""

    def select(self, plan: RetrievalPlan, candidates: Sequence[Hit], k: int) -> list[Hit]:
        return sorted(candidates, key=lambda h: -h.score)[:k]


class ThresholdSelector:
    """Keeps candidates whose dense cosine reaches ``tau``, best first (query-aware pipeline, Algorithm 1).

    Args:
        tau: Cosine threshold (0.30 in the paper).
        key: The Stage-1 signal compared with ``tau``.
    """

    def __init__(self, tau: float = 0.30, key: str = "dense") -> None:
        self.tau, self.key = float(tau), key

    def select(self, plan: RetrievalPlan, candidates: Sequence[Hit], k: int) -> list[Hit]:
        kept = [h for h in candidates if h.scores.get(self.key, h.score) >= self.tau]
        return sorted(kept, key=lambda h: -h.score)[:k]


def _rank(candidates: Sequence[Hit], scores: Sequence[float], k: int, key: str) -> list[Hit]:
    """Order by the selector's score, ties by Stage 1; record the score on each hit."""
    for h, s in zip(candidates, scores):
        h.scores[key] = float(s)
    order = sorted(range(len(candidates)), key=lambda i: (-scores[i], -candidates[i].score))
    return [candidates[i] for i in order[:k]]


def candidate_text(hit: Hit) -> str:
    """What a selector reads of a candidate: its date and text (short inputs keep it fast)."""
    return item_text(hit.item)


def item_text(item: MemoryItem) -> str:
    return f"[{iso(item.event_time)[:10]}] {item.text}"


class CrossEncoderSelector:
    """A MiniLM cross-encoder scoring (HQ, candidate) pairs; a candidate's score is its best HQ's.

    Args:
        checkpoint: Folder of a trained selector: a peft adapter with its classification
            head (``adapter_config.json``), or a full sequence-classification model.
        base_model: Packaged base the adapter was trained on.
        max_length: Pair length in tokens (short inputs keep CPU latency low).
        batch_size: Pairs per forward pass.
        num_layers: Keep only the first N encoder layers (faster; ablate the quality).
        int8: Dynamic int8 quantisation of the linear layers (CPU).
        device: ``auto``, ``cpu`` or ``cuda``.
    """

    def __init__(self, checkpoint: str, base_model: str = "all-MiniLM-L6-v2", max_length: int = 128, batch_size: int = 64,
                 num_layers: int | None = None, int8: bool = False, device: str = "auto") -> None:
        from transformers import AutoModelForSequenceClassification

        from lightmem.models.adapters import load_adapted
        from lightmem.models.registry import pick_device

        self.device = pick_device(device)
        model, tok = load_adapted(AutoModelForSequenceClassification, checkpoint, base_model, "selector", num_labels=1)
        self._init(model, tok, max_length, batch_size, num_layers, int8)
        self.model.to(self.device)

    @classmethod
    def from_objects(cls, model, tokenizer, max_length: int = 128, batch_size: int = 64, num_layers: int | None = None,
                     int8: bool = False) -> "CrossEncoderSelector":
        self = cls.__new__(cls)
        self.device = str(next(model.parameters()).device)
        self._init(model, tokenizer, max_length, batch_size, num_layers, int8)
        return self

    def _init(self, model, tokenizer, max_length, batch_size, num_layers, int8) -> None:
        import torch

        encoder = getattr(model, model.base_model_prefix, None)
        if num_layers is not None and encoder is not None and hasattr(encoder, "encoder"):
            encoder.encoder.layer = encoder.encoder.layer[:num_layers]
        model.eval()
        if int8:
            model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
        self.model, self.tok = model, tokenizer
        self.max_length, self.batch_size = max_length, batch_size

    def scores(self, queries: Sequence[str], texts: Sequence[str]) -> list[float]:
        """Relevance logits of aligned (query, text) pairs."""
        import torch

        out: list[float] = []
        for i in range(0, len(texts), self.batch_size):
            enc = self.tok(list(queries[i : i + self.batch_size]), list(texts[i : i + self.batch_size]), truncation=True,
                           max_length=self.max_length, padding=True, return_tensors="pt").to(self.device)
            with torch.inference_mode():
                out.extend(self.model(**enc).logits[:, 0].float().tolist())
        return out

    def select(self, plan: RetrievalPlan, candidates: Sequence[Hit], k: int) -> list[Hit]:
        if not candidates:
            return []
        hqs = [hq.text for hq in plan.hqs]
        texts = [candidate_text(h) for h in candidates]
        flat = self.scores([q for q in hqs for _ in texts], [t for _ in hqs for t in texts])
        best = [max(flat[j * len(texts) + i] for j in range(len(hqs))) for i in range(len(texts))]
        return _rank(candidates, best, k, "selector")


def weights_digest(weights: dict) -> str:
    """A short fingerprint of a ranker.json's fitted weights (what a stacked model was fitted on top of)."""
    import hashlib
    import json

    keys = ("features", "kind", "baseline", "trees") if weights.get("kind", "linear") == "trees" else \
        ("features", "mean", "scale", "coef", "intercept")  # a linear model's digest as before trees existed
    return hashlib.sha256(json.dumps({k: weights[k] for k in keys}, sort_keys=True).encode()).hexdigest()[:16]


# How a ranker checkpoint is made: each kind exports to its own folder (lightmem.training.schemas.RankerTrainConfig)
RETRAIN = ("`python train/ranker.py model=trees` (checkpoints/ranker_trees, the default Stage 2) or `python train/ranker.py` "
           "(checkpoints/ranker, the linear one); `make train` makes both")


class LearnedRanker:
    """A ranker over cheap candidate features (``retrieval/features.py``), fitted by ``train/ranker.py`` on
    Stage-1 candidate groups: linear and listwise (ranking 60 candidates takes ~0.5 ms on 2 CPU cores), or
    boosted trees (``model=trees``, ``retrieval/trees.py``; ~3 ms for 100 candidates).

    Args:
        checkpoint: Folder with ``ranker.json`` (feature names and the model: standardisation and weights, or trees).
    """

    def __init__(self, checkpoint: str) -> None:
        import json
        from pathlib import Path

        from lightmem.retrieval.features import FEATURES
        from lightmem.retrieval.trees import ranker_scorer

        path = Path(checkpoint) / "ranker.json"
        if not path.exists():
            raise FileNotFoundError(f"no trained ranker at {path}; train one with {RETRAIN}")
        w = json.loads(path.read_text())
        if tuple(w.get("features", ())) != FEATURES:
            raise ValueError(f"{path} was trained on features {w.get('features')}, this version computes {list(FEATURES)}: "
                             f"retrain it with {RETRAIN}")
        self.kind, self.digest = w.get("kind", "linear"), weights_digest(w)  # what it is, and which fit
        self._scores = ranker_scorer(w)

    def select(self, plan: RetrievalPlan, candidates: Sequence[Hit], k: int) -> list[Hit]:
        from lightmem.retrieval.features import candidate_features

        if not candidates:
            return []
        scores = self._scores(candidate_features(plan.query, candidates))
        return _rank(candidates, scores.tolist(), k, "ranker")


class SLMSelector:
    """SLM-2 stacked on the learned ranker: the ranker orders every candidate, a LoRA-tuned MiniLM
    cross-encoder (its first few layers, int8 on CPU) reads the (question, candidate) pairs of the
    ranker's top N, and those N are reordered by ``ranker logit + alpha * cross-encoder logit``;
    the rest keep the ranker's order. ``train/slm.py`` trains it and chooses N and alpha on
    held-apart groups (``stack.json`` beside the adapter).

    Args:
        checkpoint: Folder of the trained adapter (with its head) and ``stack.json``.
        ranker: Folder of the ranker it was stacked on (``ranker.json``).
        top_n: Candidates the cross-encoder reads (None: the trained choice); the latency scales with it.
        alpha: Weight of the cross-encoder logit (None: the trained choice).
        int8: Dynamic int8 linear layers (CPU).
        device: ``auto``, ``cpu`` or ``cuda``.
    """

    def __init__(self, checkpoint: str, ranker: str, top_n: int | None = None, alpha: float | None = None,
                 int8: bool = True, device: str = "cpu") -> None:
        import json
        from pathlib import Path

        path = Path(checkpoint) / "stack.json"
        if not path.exists():
            raise FileNotFoundError(f"no trained SLM selector at {checkpoint} (stack.json); train one with "
                                    "`python train/slm.py` (make train-experimental)")
        stack = json.loads(path.read_text())
        self.ranker = LearnedRanker(ranker)
        if stack.get("ranker_sha") and self.ranker.digest != stack["ranker_sha"]:
            log.warning("the SLM selector at %s was stacked on another ranker than %s: retrain it (`python train/slm.py`)",
                        checkpoint, ranker)
        self.top_n = int(stack["top_n"] if top_n is None else top_n)
        self.alpha = float(stack["alpha"] if alpha is None else alpha)
        if self.top_n < 0:
            raise ValueError(f"top_n must be >= 0, got {self.top_n}")
        self.encoder = CrossEncoderSelector(checkpoint, base_model=stack["base_model"], max_length=int(stack["max_length"]),
                                            num_layers=int(stack["num_layers"]), int8=int8, device=device)

    def select(self, plan: RetrievalPlan, candidates: Sequence[Hit], k: int) -> list[Hit]:
        if not candidates:
            return []
        ranked = self.ranker.select(plan, candidates, len(candidates))  # every candidate, ranker order, scores["ranker"]
        top = ranked[: self.top_n]
        if not top:
            return ranked[:k]
        ce = self.encoder.scores([plan.query] * len(top), [candidate_text(h) for h in top])
        stacked = [h.scores["ranker"] + self.alpha * c for h, c in zip(top, ce)]
        for h, c in zip(top, ce):
            h.scores["slm"] = float(c)
        order = sorted(range(len(top)), key=lambda i: (-stacked[i], i))
        return ([top[i] for i in order] + ranked[self.top_n :])[:k]


def default_selector() -> Selector:
    """The default Stage 2: the learned ranker shipped in checkpoints/ranker_trees (boosted trees; the linear
    ranker of checkpoints/ranker before them beat the trained cross-encoder within the token budget at 1/100 of
    its latency, see conf/suite_stage2.yaml; docs/results/locomo.md compares the two).

    Without that checkpoint (an install without the source tree and no
    ``$LIGHTMEM_CHECKPOINTS``) it keeps the Stage-1 order and says so once.
    """
    from lightmem.models.registry import checkpoint_path

    ckpt = checkpoint_path("ranker_trees")
    if (ckpt / "ranker.json").exists():
        return LearnedRanker(str(ckpt))
    log.warning("no trained ranker at %s (set LIGHTMEM_CHECKPOINTS or run `make train`); keeping the Stage-1 order", ckpt)
    return Stage1Selector()


class GenerativeSelector:
    """Pointwise relevance from an SLM: P(yes) of "does this memory support a query?".

    Uses the yes/no logits when the runtime exposes them (local models), else parses a
    one-word answer. Any failure keeps the Stage-1 order, so retrieval never breaks.
    """

    def __init__(self, llm: LLM, max_candidates: int = 40) -> None:
        self.llm, self.max_candidates = llm, max_candidates

    def select(self, plan: RetrievalPlan, candidates: Sequence[Hit], k: int) -> list[Hit]:
        cands = sorted(candidates, key=lambda h: -h.score)[: self.max_candidates]
        if not cands:
            return []
        hq_block = prompts.bullet([hq.text for hq in plan.hqs])
        batch = [prompts.SELECTOR.format(hqs=hq_block, date=iso(h.item.event_time)[:10], memory=h.item.text) for h in cands]
        try:
            if hasattr(self.llm, "yes_probability"):
                probs = self.llm.yes_probability(batch, role="selector")
            else:
                answers = self.llm.generate(batch, role="selector", max_new_tokens=3)
                probs = [1.0 if a.strip().lower().startswith("yes") else 0.0 for a in answers]
        except GenerationError as exc:  # counted by the backend
            log.warning("selector: %s; keeping the Stage-1 order", exc)
            return cands[:k]
        return _rank(cands, probs, k, "selector")
