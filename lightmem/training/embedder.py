"""The memory-embedder recipe: MiniLM's bi-encoder adapted to (question → memory turn) retrieval.

Stage 1 ranks by the cosine of one query vector with vectors written at write time, so a
better embedder makes retrieval better at no query-time cost. The recipe trains a LoRA
adapter on the sentence-transformers MiniLM (mean pooling, L2 normalisation, as
``SentenceTransformerEmbedder`` encodes) with InfoNCE: each query against one of its
positives, the Stage-1 hard negatives of its own group and every other document of the batch.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from lightmem.training.lora import LoraSpec, apply_lora
from lightmem.training.selector import split_dated


@dataclass
class EmbedderTask:
    """How groups become contrastive batches."""

    negatives: int = 3  # hard negatives per query (the group's Stage-1 candidates without evidence)
    temperature: float = 0.05  # InfoNCE temperature (sentence-transformers' MNRL scale 20)
    max_length: int = 96
    k: int = 10  # the K of recall_all@K in evaluation


def doc_text(candidate: str) -> str:
    """A group candidate as the store embeds it: selector groups write ``[YYYY-MM-DD] text``."""
    return split_dated(candidate)[1]


def sample_pair(group: dict[str, Any], negatives: int, rng: random.Random) -> tuple[str, list[str]]:
    """One positive and up to ``negatives`` hard negatives of a group (positive first)."""
    pos = [t for t, y in zip(group["texts"], group["labels"]) if y]
    neg = [t for t, y in zip(group["texts"], group["labels"]) if not y]
    return doc_text(rng.choice(pos)), [doc_text(t) for t in rng.sample(neg, k=min(len(neg), negatives))]


def build_bi_encoder(base_path: str, lora: LoraSpec | None):
    """The MiniLM encoder (no pooling head: pooling is ``mean_pool``) with a LoRA adapter."""
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(base_path)
    return apply_lora(model, lora, "FEATURE_EXTRACTION"), AutoTokenizer.from_pretrained(base_path)


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over real tokens, then L2 normalisation (what all-MiniLM-L6-v2's pipeline does)."""
    m = mask.unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, dim=-1)


def encode(model, tok, texts: Sequence[str], max_length: int) -> torch.Tensor:
    enc = tok(list(texts), truncation=True, max_length=max_length, padding=True, return_tensors="pt")
    enc = {k: v.to(next(model.parameters()).device) for k, v in enc.items()}
    return mean_pool(model(**enc).last_hidden_state, enc["attention_mask"])


def batcher(task: EmbedderTask) -> Callable[[Sequence[dict], random.Random], dict[str, Any]]:
    """Queries, and per query its positive then its negatives, flattened; ``owner`` maps doc → query."""

    def make_batch(groups: Sequence[dict], rng: random.Random) -> dict[str, Any]:
        queries, docs, pos_index = [], [], []
        for g in groups:
            pos, negs = sample_pair(g, task.negatives, rng)
            queries.append(g["query"])
            pos_index.append(len(docs))
            docs.extend([pos, *negs])
        return {"queries": queries, "docs": docs, "pos_index": torch.tensor(pos_index)}

    return make_batch


def contrastive_loss(tok, task: EmbedderTask) -> Callable[[torch.nn.Module, dict[str, Any]], torch.Tensor]:
    """InfoNCE of each query over every document of the batch (its positive is the target)."""

    def loss_fn(model: torch.nn.Module, batch: dict[str, Any]) -> torch.Tensor:
        q = encode(model, tok, batch["queries"], task.max_length)
        d = encode(model, tok, batch["docs"], task.max_length)
        logits = q @ d.T / task.temperature
        return torch.nn.functional.cross_entropy(logits, batch["pos_index"].to(logits.device))

    return loss_fn


def cosine_scorer(model, tok, max_length: int, batch_size: int = 64) -> Callable[[list[str], list[str]], list[float]]:
    """Cosine of aligned (query, document) pairs with the model being trained."""

    def score(queries: list[str], texts: list[str]) -> list[float]:
        out: list[float] = []
        with torch.inference_mode():
            qv = {q: v for q in dict.fromkeys(queries) for v in [encode(model, tok, [q], max_length)[0]]}
            for i in range(0, len(texts), batch_size):
                d = encode(model, tok, [doc_text(t) for t in texts[i : i + batch_size]], max_length)
                q = torch.stack([qv[x] for x in queries[i : i + batch_size]])
                out.extend((q * d).sum(-1).float().tolist())
        return out

    return score
