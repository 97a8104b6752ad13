"""The memory-embedder recipe: MiniLM's bi-encoder adapted to (question → memory turn) retrieval
(``train_embedder``; train/embedder.py runs it).

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
from pathlib import Path
from typing import Any

import torch

from lightmem.config import to_container
from lightmem.models.registry import ModelRegistry
from lightmem.seeding import seed_everything
from lightmem.training import selector as sel
from lightmem.training.job import read_jsonl, train_and_export
from lightmem.training.lora import LoraSpec, apply_lora
from lightmem.training.schemas import lora_spec, train_spec
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


def train_embedder(cfg: Any) -> dict[str, Any]:
    """Fit the adapter on ``selector_train.jsonl`` of ``cfg.data_dir``, export the best one and its card, and score
    it on the held-out groups (Stage-1 order against the base and the tuned cosine, per source).

    Args:
        cfg: A composed ``EmbedderTrainConfig`` (conf/train_embedder.yaml).

    Returns:
        The run's summary (``train_and_export``): ``train`` (the best step's validation metrics) and ``test``.
    """
    seed_everything(cfg.optim.seed)  # before the model is built: LoRA matrices are drawn then
    data = Path(cfg.data_dir)
    task, spec = EmbedderTask(**to_container(cfg.task)), train_spec(cfg.optim)
    sources = set(cfg.sources)
    usable = lambda g: any(g["labels"]) and not all(g["labels"])  # noqa: E731 - a positive and a hard negative
    train = [g for g in read_jsonl(data / "selector_train.jsonl") if g["source"] in sources and usable(g)]
    train = train[: cfg.max_train_groups] if cfg.max_train_groups else train
    val = [g for g in read_jsonl(data / "selector_val.jsonl") if g["source"] in sources][: cfg.max_eval_groups]
    test = read_jsonl(data / "selector_test.jsonl")
    model, tok = build_bi_encoder(str(ModelRegistry().embedder_path(cfg.base_model)), lora_spec(cfg.lora))

    def held_out(best: Path) -> dict[str, float]:
        """Stage-1 order versus the cosine of the exported embedder, as the store would load it, per source."""
        from lightmem.models.embedder import SentenceTransformerEmbedder

        tuned = SentenceTransformerEmbedder(cfg.base_model, adapter=str(best), device="cpu" if spec.cpu else "auto",
                                            query_cache_size=0)
        base = SentenceTransformerEmbedder(cfg.base_model, device="cpu" if spec.cpu else "auto", query_cache_size=0)

        def scorer(e):
            def score(queries: list[str], texts: list[str]) -> list[float]:
                q = e.encode(queries[:1], is_query=True)[0]
                return (e.encode([doc_text(t) for t in texts]) @ q).tolist()
            return score

        out: dict[str, float] = {}
        for source in sorted({g["source"] for g in test}):
            groups = [g for g in test if g["source"] == source]
            for name, fn in (("stage1", None), ("base_cosine", scorer(base)), ("tuned_cosine", scorer(tuned))):
                out.update({f"test/{source}/{name}/{k}": v for k, v in sel.evaluate_groups(fn, groups, task.k).items()})
        return out

    return train_and_export(
        name="embedder", model=model, train=train, make_batch=batcher(task), loss_fn=contrastive_loss(tok, task),
        evaluate=lambda m: sel.evaluate_groups(cosine_scorer(m, tok, task.max_length), val, task.k), test=held_out,
        metric=cfg.metric, spec=spec, out_dir=cfg.out_dir, export_dir=cfg.export_dir, logger_cfg=cfg.logger,
        config=to_container(cfg), data_files=[data / "selector_train.jsonl"],
        card={"name": "lightmem memory embedder", "task": "bi-encoder for Stage-1 retrieval (question -> memory turn)",
              "description": f"A LoRA adapter merged into {cfg.base_model} at load; SentenceTransformerEmbedder(adapter=...) "
                             "loads it (conf/encoder/minilm_tuned.yaml). Stores record the embedder's name, so a store "
                             "written with the base model is never searched with the tuned one.",
              "base_model": cfg.base_model, "command": "make train  (python train/embedder.py)"},
    )
