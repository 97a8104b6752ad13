"""The selectors that run a small language model (SLM-2): a MiniLM cross-encoder, the cross-encoder stacked on the
learned ranker (``SLMSelector``), and a generative yes/no judge. Each meets ``lightmem.retrieval.stage2.Selector``:
it keeps at most K of the Stage-1 candidates and never changes the memory text.

The protocol, the selectors that generate nothing and the default one live in ``lightmem.retrieval.stage2``; their
old names here still resolve (with a DeprecationWarning) for one release, for configs that name them.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence

from lightmem.deprecation import moved
from lightmem.llm import prompts
from lightmem.llm.base import LLM, GenerationError
from lightmem.retrieval import stage2
from lightmem.timeutil import iso
from lightmem.types import Hit, RetrievalPlan

log = logging.getLogger(__name__)


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
        texts = [stage2.candidate_text(h) for h in candidates]
        flat = self.scores([q for q in hqs for _ in texts], [t for _ in hqs for t in texts])
        best = [max(flat[j * len(texts) + i] for j in range(len(hqs))) for i in range(len(texts))]
        return stage2.rank_by(candidates, best, k, "selector")


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
        self.ranker = stage2.LearnedRanker(ranker)
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
        ce = self.encoder.scores([plan.query] * len(top), [stage2.candidate_text(h) for h in top])
        stacked = [h.scores["ranker"] + self.alpha * c for h, c in zip(top, ce)]
        for h, c in zip(top, ce):
            h.scores["slm"] = float(c)
        order = sorted(range(len(top)), key=lambda i: (-stacked[i], i))
        return ([top[i] for i in order] + ranked[self.top_n :])[:k]


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
        return stage2.rank_by(cands, probs, k, "selector")


__getattr__ = moved(__name__, {name: f"lightmem.retrieval.stage2.{name}" for name in (
    "Selector", "Stage1Selector", "ThresholdSelector", "LearnedRanker", "default_selector", "weights_digest",
    "candidate_text", "item_text", "RETRAIN")})
