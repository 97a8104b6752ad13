"""The Stage-2 selector recipe: a MiniLM cross-encoder (or SmolLM2 yes/no) trained on groups
of one query and its candidates with pointwise BCE and/or a listwise softmax over the group
(``train_cross_encoder``; train/cross_encoder.py runs it).
"""
from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate

from lightmem.config import to_container
from lightmem.llm import prompts
from lightmem.metrics.ranking import nanmean, precision_at_k, recall_all_at_k, reciprocal_rank
from lightmem.seeding import seed_everything
from lightmem.training.job import read_jsonl, train_and_export
from lightmem.training.lora import LoraSpec, apply_lora
from lightmem.training.losses import ranking_loss
from lightmem.training.schemas import lora_spec, train_spec

_DATED = "["  # candidate_text() writes "[YYYY-MM-DD] text"


@dataclass
class SelectorTask:
    """How groups become batches and losses."""

    group_size: int = 16  # candidates per group in a training step (positives first, then sampled negatives)
    max_pos: int = 4
    loss: str = "both"  # a name in training.losses.RANKING_LOSSES
    listwise_weight: float = 1.0
    max_length: int = 128
    k: int = 10  # the K of precision@K / recall_all@K in evaluation


def sample_group(group: dict[str, Any], size: int, max_pos: int, rng: random.Random) -> tuple[list[str], list[int]]:
    """Up to ``max_pos`` positives and random negatives, ``size`` in all, shuffled."""
    pos = [i for i, y in enumerate(group["labels"]) if y]
    neg = [i for i, y in enumerate(group["labels"]) if not y]
    pick = rng.sample(pos, k=min(len(pos), max_pos))
    pick += rng.sample(neg, k=min(len(neg), size - len(pick)))
    rng.shuffle(pick)
    return [group["texts"][i] for i in pick], [group["labels"][i] for i in pick]


def pad_groups(labels: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    n = max(len(y) for y in labels)
    lab = torch.zeros(len(labels), n)
    mask = torch.zeros(len(labels), n, dtype=torch.bool)
    for g, y in enumerate(labels):
        lab[g, : len(y)] = torch.tensor(y, dtype=torch.float)
        mask[g, : len(y)] = True
    return lab, mask


def unflatten(flat: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Scatter a flat score vector back into the padded ``[G, N]`` layout of ``mask``."""
    out = flat.new_zeros(mask.shape)
    out[mask] = flat
    return out


# --- the cross-encoder --------------------------------------------------------------------------


def build_cross_encoder(base_path: str, lora: LoraSpec | None, num_layers: int | None = None, dropout: float | None = None):
    """MiniLM with a one-logit classification head; LoRA on attention when ``lora`` is set;
    ``num_layers`` keeps only the first layers (None: all); ``dropout`` replaces the base's hidden and attention
    dropout (None: the base's own, 0.1 for MiniLM)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    kwargs: dict[str, Any] = {} if num_layers is None else {"num_hidden_layers": num_layers}
    if dropout is not None:
        kwargs.update(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    model = AutoModelForSequenceClassification.from_pretrained(base_path, num_labels=1, **kwargs)
    return apply_lora(model, lora, "SEQ_CLS"), AutoTokenizer.from_pretrained(base_path)


Sample = Callable[[dict[str, Any], random.Random], tuple[list[str], list[int]]]


def cross_encoder_batcher(tok, task: Any, sample: Sample | None = None) -> Callable[[Sequence[dict], random.Random], dict[str, Any]]:
    """Tokenised (query, candidate) pairs of the sampled groups with their padded labels and mask.
    ``sample`` draws a group's candidates (default: positives and random negatives, ``sample_group``)."""
    draw = sample or (lambda g, rng: sample_group(g, task.group_size, task.max_pos, rng))

    def make_batch(groups: Sequence[dict], rng: random.Random) -> dict[str, Any]:
        sampled = [draw(g, rng) for g in groups]
        queries = [g["query"] for g, (texts, _) in zip(groups, sampled) for _ in texts]
        texts = [t for texts, _ in sampled for t in texts]
        enc = tok(queries, texts, truncation=True, max_length=task.max_length, padding=True, return_tensors="pt")
        labels, mask = pad_groups([y for _, y in sampled])
        return {**enc, "labels": labels, "mask": mask}

    return make_batch


def cross_encoder_loss(task: SelectorTask) -> Callable[[torch.nn.Module, dict[str, Any]], torch.Tensor]:
    def loss_fn(model: torch.nn.Module, batch: dict[str, Any]) -> torch.Tensor:
        enc = {k: v for k, v in batch.items() if k not in ("labels", "mask")}
        logits = unflatten(model(**enc).logits[:, 0], batch["mask"])
        return ranking_loss(task.loss, logits, batch["labels"], batch["mask"], task.listwise_weight)

    return loss_fn


def cross_encoder_scorer(model, tok, max_length: int, batch_size: int = 64) -> Callable[[list[str], list[str]], list[float]]:
    """Scores with the very class retrieval uses, so evaluation measures the deployed path."""
    from lightmem.roles.selector import CrossEncoderSelector

    return CrossEncoderSelector.from_objects(model, tok, max_length=max_length, batch_size=batch_size).scores


# --- the generative variant (SmolLM2 yes/no) ----------------------------------------------------


def split_dated(candidate: str) -> tuple[str, str]:
    """``("YYYY-MM-DD", text)`` of a group candidate written by ``candidate_text`` (``("", candidate)`` otherwise)."""
    if candidate.startswith(_DATED) and "] " in candidate[:14]:
        return candidate[1:11], candidate[13:]
    return "", candidate


def selector_prompt(query: str, candidate: str) -> str:
    """The GenerativeSelector's prompt for one (query, "[date] text") pair."""
    date, text = split_dated(candidate)
    return prompts.SELECTOR.format(hqs=prompts.bullet([query]), date=date, memory=text)


def build_generative(model_name: str, lora: LoraSpec | None, quantize: str | None = None, device: str = "auto"):
    """SmolLM2 (or another packaged causal LM) with a LoRA adapter; ``quantize`` = ``4bit`` (NF4) or
    ``8bit`` loads the frozen base through bitsandbytes (CUDA only)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lightmem.llm.transformers_backend import TransformersLLM, auto_dtype
    from lightmem.models.registry import ModelRegistry, pick_device

    dev = pick_device(device)
    path = ModelRegistry().causal_lm_path(model_name)
    kwargs: dict[str, Any] = {"dtype": auto_dtype(dev)}
    if quantize:
        if quantize not in ("4bit", "8bit"):
            raise ValueError(f"quantize must be 4bit, 8bit or null, not {quantize!r}")
        if not dev.startswith("cuda"):
            raise ValueError(f"quantize={quantize} needs CUDA (bitsandbytes); leave it null on CPU")
        from peft import prepare_model_for_kbit_training
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = (
            BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=kwargs["dtype"])
            if quantize == "4bit" else BitsAndBytesConfig(load_in_8bit=True))
        kwargs["device_map"] = {"": dev}
    model = AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
    if quantize:
        model = prepare_model_for_kbit_training(model)
    model = apply_lora(model, lora, "CAUSAL_LM")
    return model, TransformersLLM.from_objects(model, AutoTokenizer.from_pretrained(str(path)))


def generative_batcher(task: SelectorTask) -> Callable[[Sequence[dict], random.Random], dict[str, Any]]:
    def make_batch(groups: Sequence[dict], rng: random.Random) -> dict[str, Any]:
        sampled = [sample_group(g, task.group_size, task.max_pos, rng) for g in groups]
        prompts_ = [selector_prompt(g["query"], t) for g, (texts, _) in zip(groups, sampled) for t in texts]
        labels, mask = pad_groups([y for _, y in sampled])
        return {"prompts": prompts_, "labels": labels, "mask": mask}

    return make_batch


def generative_loss(llm, task: SelectorTask) -> Callable[[torch.nn.Module, dict[str, Any]], torch.Tensor]:
    def loss_fn(model: torch.nn.Module, batch: dict[str, Any]) -> torch.Tensor:
        logits = unflatten(llm.yes_no_logits(batch["prompts"]), batch["mask"])
        return ranking_loss(task.loss, logits, batch["labels"], batch["mask"], task.listwise_weight)

    return loss_fn


def generative_scorer(llm) -> Callable[[list[str], list[str]], list[float]]:
    def score(queries: list[str], texts: list[str]) -> list[float]:
        out: list[float] = []
        for i in range(0, len(texts), llm.batch_size):
            out.extend(llm.yes_no_logits([selector_prompt(q, t) for q, t in zip(queries[i : i + llm.batch_size],
                                                                                texts[i : i + llm.batch_size])]).tolist())
        return out

    return score


# --- the model choices (conf/selector_recipe/*.yaml name one as _target_) ---------------------------


Scorer = Callable[[list[str], list[str]], list[float]]


class CrossEncoderRecipe:
    """LoRA on a packaged MiniLM cross-encoder with a 1-logit head; the exported adapter is what
    ``CrossEncoderSelector`` loads (conf/selector/cross_encoder.yaml)."""

    kind = "cross_encoder"

    def __init__(self, base_model: str = "all-MiniLM-L6-v2", dropout: float | None = None) -> None:
        self.base_model, self.dropout = base_model, dropout

    def build(self, task: SelectorTask, lora: LoraSpec | None, cpu: bool) -> None:
        """The model, its batcher and its loss (seeded by the caller: the head and LoRA are drawn here)."""
        from lightmem.models.registry import ModelRegistry

        self.task, self.cpu = task, cpu
        self.model, self.tok = build_cross_encoder(str(ModelRegistry().path(self.base_model)), lora, dropout=self.dropout)
        self.make_batch, self.loss_fn = cross_encoder_batcher(self.tok, task), cross_encoder_loss(task)

    def scorer(self, model) -> Scorer:
        return cross_encoder_scorer(model, self.tok, self.task.max_length)

    def exported_scorer(self, best) -> Scorer:
        """The exported weights as retrieval loads them."""
        from lightmem.roles.selector import CrossEncoderSelector

        return CrossEncoderSelector(str(best), base_model=self.base_model, max_length=self.task.max_length,
                                    device="cpu" if self.cpu else "auto").scores


class GenerativeRecipe:
    """LoRA on a packaged causal LM (SmolLM2) answering yes/no per candidate; ``quantize`` = ``4bit`` /
    ``8bit`` loads the frozen base through bitsandbytes (CUDA only)."""

    kind = "generative"

    def __init__(self, base_model: str = "SmolLM2-135M-Instruct", quantize: str | None = None) -> None:
        self.base_model, self.quantize = base_model, quantize

    def build(self, task: SelectorTask, lora: LoraSpec | None, cpu: bool) -> None:
        self.task = task
        self.model, self.llm = build_generative(self.base_model, lora, self.quantize, "cpu" if cpu else "auto")
        self.make_batch, self.loss_fn = generative_batcher(task), generative_loss(self.llm, task)

    def scorer(self, model) -> Scorer:
        return generative_scorer(self.llm)

    def exported_scorer(self, best) -> Scorer:
        return generative_scorer(self.llm)  # the trained model in memory: the adapter is the one exported


# --- evaluation ------------------------------------------------------------------------------------


def evaluate_groups(score: Callable[[list[str], list[str]], list[float]] | None, groups: Sequence[dict[str, Any]],
                    k: int) -> dict[str, float]:
    """precision@K, recall_all@K and MRR over whole candidate lists; ``score=None`` ranks by Stage 1.

    Only the candidates Stage 1 returned are ranked (positives it missed count as misses).
    """
    p, r, rr = [], [], []
    for g in groups:
        stage1 = [s for s in g.get("stage1", [0.0] * len(g["texts"])) if s != float("-inf")]  # -inf: added, not retrieved
        n = len(stage1)
        texts, labels = g["texts"][:n], g["labels"][:n]
        scores = stage1 if score is None else score([g["query"]] * n, texts)
        p.append(precision_at_k(labels, scores, k))
        r.append(recall_all_at_k(labels, scores, k, n_relevant=g.get("n_evidence") or sum(labels)))
        rr.append(reciprocal_rank(labels, scores))
    return {f"precision@{k}": nanmean(p), f"recall_all@{k}": nanmean(r), "mrr": nanmean(rr), "n": float(len(groups))}


def train_cross_encoder(cfg: Any) -> dict[str, Any]:
    """Fit the cross-encoder Stage-2 selector (or the generative one ``cfg.model`` names) on ``selector_train.jsonl``
    of ``cfg.data_dir``, export the best adapter and its card, and score Stage 1 alone against reranked on the
    held-out groups, per source.

    Args:
        cfg: A composed ``CrossEncoderTrainConfig`` (conf/train_cross_encoder.yaml); ``cfg.model`` is a recipe
            node (conf/selector_recipe/*.yaml) that Hydra instantiates.

    Returns:
        The run's summary (``train_and_export``).
    """
    seed_everything(cfg.optim.seed)  # before the model is built: heads and LoRA matrices are drawn then
    data = Path(cfg.data_dir)
    task, spec = SelectorTask(**to_container(cfg.task)), train_spec(cfg.optim)
    sources = set(cfg.sources)
    train = [g for g in read_jsonl(data / "selector_train.jsonl") if g["source"] in sources and any(g["labels"])]
    train = train[: cfg.max_train_groups] if cfg.max_train_groups else train
    val = [g for g in read_jsonl(data / "selector_val.jsonl") if g["source"] in sources][: cfg.max_eval_groups]
    test = read_jsonl(data / "selector_test.jsonl")
    if cfg.max_test_groups:  # per source (the generative variant is slow on CPU)
        test = [g for s in sorted({g["source"] for g in test}) for g in [x for x in test if x["source"] == s][: cfg.max_test_groups]]
    recipe = instantiate(cfg.model)  # conf/selector_recipe/*.yaml: the model choice and its own settings
    recipe.build(task, lora_spec(cfg.lora), spec.cpu)

    def held_out(best: Path) -> dict[str, float]:
        """Stage 1 alone versus reranked, per source, with the exported weights as retrieval loads them."""
        score = recipe.exported_scorer(best)
        out: dict[str, float] = {}
        for source in sorted({g["source"] for g in test}):
            groups = [g for g in test if g["source"] == source]
            for name, fn in (("stage1", None), ("selector", score)):
                out.update({f"test/{source}/{name}/{k}": v for k, v in evaluate_groups(fn, groups, task.k).items()})
        return out

    return train_and_export(
        name="cross_encoder", model=recipe.model, train=train, make_batch=recipe.make_batch, loss_fn=recipe.loss_fn,
        evaluate=lambda m: evaluate_groups(recipe.scorer(m), val, task.k), test=held_out, metric=cfg.metric, spec=spec,
        out_dir=cfg.out_dir, export_dir=cfg.export_dir, logger_cfg=cfg.logger, config=to_container(cfg),
        data_files=[data / "selector_train.jsonl"],
        card={"name": "lightmem cross-encoder selector", "task": f"{recipe.kind} reranker of Stage-1 candidates",
              "description": "Scores (query, \"[date] memory\") pairs; CrossEncoderSelector loads it (conf/selector/cross_encoder.yaml).",
              "base_model": recipe.base_model, "command": "make train-experimental  (python train/cross_encoder.py)"},
    )
