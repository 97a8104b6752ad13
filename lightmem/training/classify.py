"""Recipes for the two MiniLM classifiers: query complexity (sequence, LOW/HIGH; ``train_complexity``) and the
word scorer (token, keep/drop per word; ``train_word_scorer``). train/complexity.py and train/word_scorer.py run them."""
from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from lightmem.config import to_container
from lightmem.datasets.splits import split_of
from lightmem.metrics.ranking import accuracy, binary_f1
from lightmem.models.registry import ModelRegistry
from lightmem.models.word_scorer import TokenClassifierWordScorer, keep_top_rate
from lightmem.roles.complexity import TrainedComplexity
from lightmem.seeding import seed_everything
from lightmem.training.job import read_jsonl, train_and_export
from lightmem.training.lora import LoraSpec, apply_lora
from lightmem.training.schemas import lora_spec, train_spec


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


def train_word_scorer(cfg: Any) -> dict[str, Any]:
    """Fit the word scorer (keep/drop per word) on ``compressor_train.jsonl`` of ``cfg.data_dir``, export the best
    adapter and its card, and score it on the held-out conversations against random scores.

    Validation turns come from the training conversations (a hash of the turn id); the test split is the held-out
    conversations.

    Args:
        cfg: A composed ``WordScorerTrainConfig`` (conf/train_word_scorer.yaml).

    Returns:
        The run's summary (``train_and_export``).
    """
    seed_everything(cfg.optim.seed)  # before the model is built: heads and LoRA matrices are drawn then
    data = Path(cfg.data_dir)
    rows = read_jsonl(data / "compressor_train.jsonl")
    train = [r for r in rows if split_of(r["id"], (0.9, 0.1, 0.0)) == "train"]
    val = [r for r in rows if split_of(r["id"], (0.9, 0.1, 0.0)) != "train"]
    test = read_jsonl(data / "compressor_test.jsonl")
    model, tok = build_classifier(str(ModelRegistry().path(cfg.base_model)), lora_spec(cfg.lora), "token")

    def evaluate(m):
        return evaluate_tokens(TokenClassifierWordScorer.from_objects(m, tok).word_probs, val, cfg.rate)

    def held_out(best: Path) -> dict[str, float]:
        scorer = TokenClassifierWordScorer(str(best), cfg.base_model, device="cpu" if cfg.optim.cpu else "auto")
        out = {f"test/trained/{k}": v for k, v in evaluate_tokens(scorer.word_probs, test, cfg.rate).items()}
        out.update({f"test/random/{k}": v for k, v in evaluate_tokens(random_word_probs(), test, cfg.rate).items()})
        return out

    weights = class_weights([y for r in train for y in r["labels"]]) if cfg.balance else None
    return train_and_export(
        name="word_scorer", model=model, train=train, make_batch=token_batcher(tok, cfg.max_length),
        loss_fn=weighted_ce(weights), evaluate=evaluate, test=held_out, metric=cfg.metric,
        spec=train_spec(cfg.optim), out_dir=cfg.out_dir, export_dir=cfg.export_dir, logger_cfg=cfg.logger,
        config=to_container(cfg), data_files=[data / "compressor_train.jsonl"],
        card={"name": "lightmem word scorer (token classification)", "task": "token classification keep/drop per word",
              "description": "LLMLingua-2-style keep/drop scores per word; TokenClassifierWordScorer loads it and keeps the "
                             "top r of words.",
              "base_model": cfg.base_model, "command": "make train  (python train/word_scorer.py)"},
    )


def train_complexity(cfg: Any) -> dict[str, Any]:
    """Fit the query-complexity classifier (LOW/HIGH; C_q = P(HIGH)) on ``complexity_train.jsonl`` of
    ``cfg.data_dir``, export the best adapter and its card, and score it per source and question type.

    Args:
        cfg: A composed ``ComplexityTrainConfig`` (conf/train_complexity.yaml).

    Returns:
        The run's summary (``train_and_export``).

    Raises:
        ValueError: ``cfg.sources`` leave no training or no validation rows.
    """
    seed_everything(cfg.optim.seed)  # before the model is built: heads and LoRA matrices are drawn then
    data = Path(cfg.data_dir)
    sources = set(cfg.sources)
    train, val = ([r for r in read_jsonl(data / f"complexity_{s}.jsonl") if r["source"] in sources] for s in ("train", "val"))
    test = read_jsonl(data / "complexity_test.jsonl")  # every source, trained on or not
    if not train or not val:
        raise ValueError(f"sources={sorted(sources)} leave no {'training' if not train else 'validation'} rows in {data}/complexity_*.jsonl "
                         "(LoCoMo has no validation split: add longmemeval or synth)")
    model, tok = build_classifier(str(ModelRegistry().path(cfg.base_model)), lora_spec(cfg.lora), "sequence")

    def evaluate(m):
        return evaluate_sequence(TrainedComplexity.from_objects(m, tok, cfg.max_length).probabilities, val)

    def held_out(best: Path) -> dict[str, float]:
        clf = TrainedComplexity(str(best), cfg.base_model, cfg.max_length, device="cpu" if cfg.optim.cpu else "auto")
        texts = sorted({r["text"] for r in test})
        p_high = {t: p for i in range(0, len(texts), 64) for t, p in zip(texts[i : i + 64], clf.probabilities(texts[i : i + 64]))}
        scored = lambda qs: [p_high[q] for q in qs]  # noqa: E731 - each question read once, for its source and its type
        out = {}
        for source in sorted({r["source"] for r in test}):
            rows = [r for r in test if r["source"] == source]
            out.update({f"test/{source}/{k}": v for k, v in evaluate_sequence(scored, rows).items()})
            for qtype in sorted({r.get("type", "") for r in rows} - {""}):  # accuracy within each question type
                of_type = [r for r in rows if r.get("type") == qtype]
                m = evaluate_sequence(scored, of_type)
                out.update({f"test/{source}/type/{qtype}/{k}": m[k] for k in ("accuracy", "majority", "n")})
        return out

    weights = class_weights([r["label"] for r in train]) if cfg.balance else None
    return train_and_export(
        name="complexity", model=model, train=train, make_batch=sequence_batcher(tok, cfg.max_length),
        loss_fn=weighted_ce(weights), evaluate=evaluate, test=held_out, metric=cfg.metric,
        spec=train_spec(cfg.optim), out_dir=cfg.out_dir, export_dir=cfg.export_dir, logger_cfg=cfg.logger,
        config=to_container(cfg), data_files=[data / "complexity_train.jsonl"],
        card={"name": "lightmem query-complexity classifier", "task": "sequence classification LOW/HIGH",
              "description": "C_q = P(HIGH): the question needs two or more evidence units (SimpleMem's adaptive depth); "
                                 "TrainedComplexity loads it.",
              "base_model": cfg.base_model, "command": "make train  (python train/complexity.py)"},
    )
