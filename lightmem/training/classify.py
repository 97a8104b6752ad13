"""Recipes for the two MiniLM classifiers: query complexity (sequence, LOW/HIGH) and the
compressor (token, keep/drop per word)."""
from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from lightmem.metrics.ranking import accuracy, binary_f1
from lightmem.models.word_scorer import keep_top_rate
from lightmem.training.lora import LoraSpec, apply_lora


def build_classifier(base_path: str, lora: LoraSpec | None, kind: str):
    """``kind``: ``sequence`` or ``token``; two labels either way."""
    from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification, AutoTokenizer

    auto = {"sequence": AutoModelForSequenceClassification, "token": AutoModelForTokenClassification}[kind]
    model = auto.from_pretrained(base_path, num_labels=2)
    return apply_lora(model, lora, "SEQ_CLS" if kind == "sequence" else "TOKEN_CLS"), AutoTokenizer.from_pretrained(base_path)


def class_weights(labels: Sequence[int]) -> torch.Tensor:
    """Inverse-frequency weights of the two classes (both are rare somewhere in our data)."""
    n1 = max(1, sum(labels))
    n0 = max(1, len(labels) - n1)
    return torch.tensor([len(labels) / (2 * n0), len(labels) / (2 * n1)], dtype=torch.float)


# --- complexity (sequence) -------------------------------------------------------------------


def sequence_batcher(tok, max_length: int) -> Callable[[Sequence[dict], random.Random], dict[str, Any]]:
    def make_batch(rows: Sequence[dict], rng: random.Random) -> dict[str, Any]:
        enc = tok([r["text"] for r in rows], truncation=True, max_length=max_length, padding=True, return_tensors="pt")
        return {**enc, "labels": torch.tensor([int(r["label"]) for r in rows])}

    return make_batch


def weighted_ce(weights: torch.Tensor | None) -> Callable[[torch.nn.Module, dict[str, Any]], torch.Tensor]:
    def loss_fn(model: torch.nn.Module, batch: dict[str, Any]) -> torch.Tensor:
        enc = {k: v for k, v in batch.items() if k != "labels"}
        logits = model(**enc).logits.float()
        w = weights.to(logits.device) if weights is not None else None
        return F.cross_entropy(logits.reshape(-1, 2), batch["labels"].reshape(-1), weight=w, ignore_index=-100)

    return loss_fn


def evaluate_sequence(prob: Callable[[list[str]], list[float]], rows: Sequence[dict]) -> dict[str, float]:
    probs = []
    for i in range(0, len(rows), 64):
        probs.extend(prob([r["text"] for r in rows[i : i + 64]]))
    pred = [int(p >= 0.5) for p in probs]
    gold = [int(r["label"]) for r in rows]
    return {"accuracy": accuracy(pred, gold), "f1": binary_f1(pred, gold), "majority": max(sum(gold), len(gold) - sum(gold)) / max(1, len(gold)),
            "n": float(len(rows))}


# --- compressor (token) ----------------------------------------------------------------------


def token_batcher(tok, max_length: int) -> Callable[[Sequence[dict], random.Random], dict[str, Any]]:
    """Label the first sub-token of each word; the rest and special tokens are ignored (-100)."""

    def make_batch(rows: Sequence[dict], rng: random.Random) -> dict[str, Any]:
        enc = tok([r["words"] for r in rows], is_split_into_words=True, truncation=True, max_length=max_length, padding=True,
                  return_tensors="pt")
        labels = torch.full(enc["input_ids"].shape, -100, dtype=torch.long)
        for b, r in enumerate(rows):
            seen = set()
            for pos, w in enumerate(enc.word_ids(b)):
                if w is not None and w not in seen:
                    seen.add(w)
                    labels[b, pos] = int(r["labels"][w])
        return {**enc, "labels": labels}

    return make_batch


def evaluate_tokens(word_probs: Callable[[list[str]], list[float]], rows: Sequence[dict], rate: float) -> dict[str, float]:
    """Word-level keep F1 at p ≥ 0.5, and at ``rate``: keep F1 and the share of answer words kept."""
    pred, gold, pred_r = [], [], []
    ans_kept = ans_total = kept = total = 0
    for r in rows:
        p = word_probs(r["words"])
        pred += [int(x >= 0.5) for x in p]
        gold += list(r["labels"])
        keep = keep_top_rate(p, rate)
        pred_r += keep
        kept += sum(keep)
        total += len(keep)
        for k, a in zip(keep, r.get("answer", [])):
            ans_total += a
            ans_kept += k * a
    return {"token_f1": binary_f1(pred, gold), "accuracy": accuracy(pred, gold), f"token_f1@r{rate}": binary_f1(pred_r, gold),
            f"answer_kept@r{rate}": ans_kept / max(1, ans_total), f"kept@r{rate}": kept / max(1, total), "n": float(len(rows))}


def random_word_probs(seed: int = 0) -> Callable[[list[str]], list[float]]:
    """The baseline a trained compressor must beat: a random keep order."""
    rng = random.Random(seed)
    return lambda words: [rng.random() for _ in words]
