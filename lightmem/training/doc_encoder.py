"""The document-encoder recipe: a small encoder distilled into the served embedder's vector space.

Searching embeds one question; writing embeds every memory, so on 2 CPU cores the write side's model bounds how many
turns a second are indexed. This recipe keeps the served encoder for questions and trains all-MiniLM-L6-v2 (LoRA)
with a linear map from its 384-d mean-pooled output to the served 768-d space, so that a memory embedded by the
student lands where the served encoder would have put it: the loss is one minus the cosine of the two unit vectors.
The texts are the memories of the dev data's training splits as the configured writer renders them, the targets the
served encoder's vectors of those texts; ``models.split.SplitEmbedder`` serves the pair.
"""
from __future__ import annotations

import json
import random
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lightmem.models.embedder import PROJECTION_FILE


@dataclass
class DocEncoderTask:
    """How texts become batches."""

    max_length: int = 128  # tokens per text: what the served encoder reads (conf/encoder/*: max_seq_length)
    init_sample: int = 3000  # texts the projection's least-squares start is fitted on
    chunk: int = 32  # texts of similar length per training example (a batch pads to its longest text)


class DistilledEncoder(torch.nn.Module):
    """A transformer (LoRA-wrapped or not), mean pooling, a linear map, L2 normalisation."""

    def __init__(self, encoder: torch.nn.Module, dim_in: int, dim_out: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.projection = torch.nn.Linear(dim_in, dim_out)

    def pooled(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **rest: torch.Tensor) -> torch.Tensor:
        h = self.encoder(input_ids=input_ids, attention_mask=attention_mask, **rest).last_hidden_state
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        return (h * m).sum(1) / m.sum(1).clamp(min=1e-9)

    def forward(self, **inputs: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.normalize(self.projection(self.pooled(**inputs)), dim=-1)

    def save_pretrained(self, path: str) -> None:
        """The adapter as peft saves it, and the projection beside it (what ``SentenceTransformerEmbedder`` loads)."""
        from safetensors.torch import save_file

        Path(path).mkdir(parents=True, exist_ok=True)
        self.encoder.save_pretrained(path)
        save_file({"weight": self.projection.weight.detach().cpu().contiguous(),
                   "bias": self.projection.bias.detach().cpu().contiguous()}, str(Path(path) / PROJECTION_FILE))


def tokenize(tok, texts: Sequence[str], max_length: int, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    enc = tok(list(texts), truncation=True, max_length=max_length, padding=True, return_tensors="pt")
    return {k: v.to(device) for k, v in enc.items()}


@torch.no_grad()
def init_projection(model: DistilledEncoder, tok, texts: Sequence[str], targets: np.ndarray, task: DocEncoderTask,
                    seed: int = 0, batch_size: int = 64) -> float:
    """Start the projection at the least-squares map from the untrained pooled vectors to the targets, on a sample
    of ``task.init_sample`` texts; returns the mean cosine it reaches there."""
    rng = random.Random(seed)
    idx = sorted(rng.sample(range(len(texts)), min(task.init_sample, len(texts))))
    was = model.training
    model.eval()
    x = torch.cat([model.pooled(**tokenize(tok, [texts[i] for i in idx[j : j + batch_size]], task.max_length))
                   for j in range(0, len(idx), batch_size)]).double()
    y = torch.as_tensor(targets[idx]).double()
    x1 = torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], 1)
    w = torch.linalg.lstsq(x1, y, driver="gelsd").solution
    model.projection.weight.copy_(w[:-1].T.float())
    model.projection.bias.copy_(w[-1].float())
    model.train(was)
    return float(torch.nn.functional.cosine_similarity(x1 @ w, y).mean())


def length_chunks(tok, texts: Sequence[str], targets: np.ndarray, task: DocEncoderTask) -> list[list[tuple[str, np.ndarray]]]:
    """The training examples: chunks of ``task.chunk`` (text, target) pairs of similar token length, so a batch of
    short LoCoMo turns is not padded to a long LongMemEval answer (the loop shuffles the chunks each epoch)."""
    lengths = [len(ids) for ids in tok(list(texts), truncation=True, max_length=task.max_length)["input_ids"]]
    order = sorted(range(len(texts)), key=lambda i: (lengths[i], i))
    return [[(texts[i], targets[i]) for i in order[j : j + task.chunk]] for j in range(0, len(order), task.chunk)]


def batcher(tok, task: DocEncoderTask) -> Callable[[Sequence[Sequence[tuple[str, np.ndarray]]], random.Random], dict[str, Any]]:
    """Chunks of (text, target vector) pairs → the tokenized texts and the stacked targets."""

    def make_batch(chunks: Sequence[Sequence[tuple[str, np.ndarray]]], rng: random.Random) -> dict[str, Any]:
        pairs = [p for c in chunks for p in c]
        return {"inputs": tokenize(tok, [t for t, _ in pairs], task.max_length),
                "targets": torch.as_tensor(np.stack([v for _, v in pairs]))}

    return make_batch


def cosine_loss(model: torch.nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    """One minus the cosine of the student's and the served encoder's unit vectors, averaged."""
    device = next(model.parameters()).device
    out = model(**{k: v.to(device) for k, v in batch["inputs"].items()})
    return (1.0 - (out * batch["targets"].to(device)).sum(-1)).mean()


@torch.no_grad()
def fidelity(model: torch.nn.Module, tok, texts: Sequence[str], targets: np.ndarray, task: DocEncoderTask,
             batch_size: int = 64) -> dict[str, float]:
    """Mean and 5th-percentile cosine of the model's vectors to the targets (the validation metric)."""
    was = model.training
    model.eval()
    device = next(model.parameters()).device
    cos = []
    for j in range(0, len(texts), batch_size):
        out = model(**tokenize(tok, texts[j : j + batch_size], task.max_length, device))
        cos.append((out.cpu() * torch.as_tensor(targets[j : j + batch_size])).sum(-1))
    model.train(was)
    c = torch.cat(cos).numpy() if cos else np.zeros(0)
    return {"cosine": float(c.mean()) if len(c) else float("nan"), "cosine_p5": float(np.percentile(c, 5)) if len(c) else float("nan")}


def vector_fidelity(student: np.ndarray, teacher: np.ndarray) -> dict[str, float]:
    """Mean / 5th-percentile / minimum cosine of aligned unit vectors (served student against the served encoder)."""
    c = np.sum(student * teacher, axis=1)
    return {"cosine": float(c.mean()), "cosine_p5": float(np.percentile(c, 5)), "cosine_min": float(c.min())}


def recall_with(query_vecs: np.ndarray, doc_vecs: np.ndarray, evidence: Sequence[Sequence[int]], k: int) -> float:
    """Share of questions whose every evidence document is among the ``k`` nearest by inner product (one corpus)."""
    if not len(evidence):
        return float("nan")
    scores = query_vecs @ doc_vecs.T
    top = np.argsort(-scores, axis=1)[:, :k]
    return float(np.mean([set(ev) <= set(row.tolist()) for ev, row in zip(evidence, top)]))


def memory_texts(writer: Any, convs: Sequence[Any]) -> list[tuple[str, list[str]]]:
    """(text, source turn ids) of every memory ``writer`` makes of ``convs``, a session per call as the write path
    hands it turns."""
    out: list[tuple[str, list[str]]] = []
    for conv in convs:
        for s in conv.sessions:
            out.extend((d.text, list(d.provenance)) for d in writer.write(s.turns) if d.text.strip())
    return out


def corpora(cfg: Any) -> dict[str, list[Any]]:
    """The conversations of each split: ``train`` (LoCoMo ``locomo_train``, the LongMemEval oracle and
    LongMemEval_S train questions), ``val`` (both LongMemEval val splits), ``test_locomo`` and ``test_longmemeval``."""
    from lightmem.datasets import load_locomo, select_conversations
    from lightmem.datasets.longmemeval import load_longmemeval
    from lightmem.datasets.splits import split_of

    locomo = load_locomo(cfg.locomo_path)
    lme = load_longmemeval(cfg.lme_path) + (load_longmemeval(cfg.lme_s_path) if cfg.lme_s_path else [])
    by = lambda split: [c for c in lme if split_of(c.conv_id) == split]  # noqa: E731
    return {"train": select_conversations(locomo, cfg.locomo_train) + by("train"), "val": by("val"),
            "test_locomo": select_conversations(locomo, cfg.locomo_test), "test_longmemeval": by("test")}


def _unique(items: Sequence[tuple[str, list[str]]]) -> list[str]:
    return list(dict.fromkeys(t for t, _ in items))


def held_out_metrics(teacher: Any, student: Any, writer: Any, tests: dict[str, Sequence[Any]], k: int = 10) -> dict[str, float]:
    """Per held-out source: the served student's cosine to the teacher's vectors of the same memories, and
    recall_all@k of the teacher's question vectors over each conversation's memories embedded by either
    (``teacher_recall_all@k`` is the ceiling the student is trained towards)."""
    from lightmem.metrics.evidence import normalize_evidence

    out: dict[str, float] = {}
    for source, convs in tests.items():
        categories = (1, 2, 3, 4) if source.endswith("locomo") else None  # LoCoMo's answerable categories
        cos_t, cos_s, n, found_t, found_s = [], [], 0, 0.0, 0.0
        for conv in convs:
            items = memory_texts(writer, [conv])
            if not items:
                continue
            texts = [t for t, _ in items]
            t_vecs, s_vecs = teacher.encode(texts), student.encode(texts)
            cos_t.append(t_vecs)
            cos_s.append(s_vecs)
            asked = [(q.question, [i for i, (_, prov) in enumerate(items) if set(prov) & set(normalize_evidence(q.evidence))])
                     for q in conv.qa if q.evidence and (categories is None or q.category in categories)]
            asked = [(question, ev) for question, ev in asked if ev]
            if not asked:
                continue
            q_vecs = teacher.encode([question for question, _ in asked], is_query=True)
            ev = [e for _, e in asked]
            n += len(asked)  # recall_with is a mean over a conversation's questions: summed back per question here
            found_t += len(asked) * recall_with(q_vecs, t_vecs, ev, k)
            found_s += len(asked) * recall_with(q_vecs, s_vecs, ev, k)
        if cos_t:
            fid = vector_fidelity(np.concatenate(cos_s), np.concatenate(cos_t))
            out.update({f"test/{source}/{name}": v for name, v in fid.items()})
        if n:
            out[f"test/{source}/teacher_recall_all@{k}"] = found_t / n
            out[f"test/{source}/student_recall_all@{k}"] = found_s / n
            out[f"test/{source}/n_questions"] = float(n)
    return out


SET_FORMAT = 1


def save_distill_set(path: str | Path, *, teacher: str, texts: Sequence[str], targets: np.ndarray, val: Sequence[str],
                     val_targets: np.ndarray, recipe: dict[str, Any] | None = None) -> Path:
    """The teacher's half of the recipe in one file: the training and validation texts and the teacher's vectors of
    them (float16), so the student can be fitted where the teacher cannot run (a GPU machine the served encoder's
    weights were not copied to) and a sweep does not re-embed. Written to a temporary file and renamed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = json.dumps({"format": SET_FORMAT, "teacher": teacher, "recipe": recipe or {}, "texts": list(texts), "val": list(val)},
                      default=str)
    import os
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)  # two sweep jobs: two files
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez_compressed(f, meta=np.frombuffer(meta.encode(), dtype=np.uint8),
                                targets=np.asarray(targets, dtype=np.float16), val_targets=np.asarray(val_targets, dtype=np.float16))
        Path(tmp).replace(path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path


def load_distill_set(path: str | Path) -> dict[str, Any]:
    """What ``save_distill_set`` wrote; the vectors back as unit float32 rows.

    Raises:
        InvalidInputError: Not such a file, another format, or texts and vectors that do not line up.
    """
    from lightmem.errors import InvalidInputError

    try:
        with np.load(path) as z:
            meta = json.loads(bytes(z["meta"]).decode())
            targets, val_targets = z["targets"].astype(np.float32), z["val_targets"].astype(np.float32)
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise InvalidInputError(f"{path} is not a distillation set written by train/doc_encoder.py ({exc})") from exc
    if meta.get("format") != SET_FORMAT or len(meta["texts"]) != len(targets) or len(meta["val"]) != len(val_targets):
        raise InvalidInputError(f"{path}: format {meta.get('format')} (expected {SET_FORMAT}) or texts and vectors differ in number")
    unit = lambda v: v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)  # noqa: E731
    return {"teacher": meta["teacher"], "recipe": meta.get("recipe", {}), "texts": meta["texts"], "targets": unit(targets),
            "val": meta["val"], "val_targets": unit(val_targets)}


def set_recipe(cfg: Any) -> dict[str, Any]:
    """What decides a distillation set's texts besides the teacher: the writer, the splits, the data files (by
    name and content), the validation sample."""
    from lightmem.config import to_container
    from lightmem.training.export import sha256_files

    files = [Path(str(p)) for p in (cfg.locomo_path, cfg.lme_path, cfg.lme_s_path) if p]
    return {"writer": to_container(cfg.writer), "locomo_train": str(cfg.locomo_train),
            "data": {f.name: sha256_files([f]) if f.exists() else None for f in files},
            "val_texts": cfg.val_texts, "seed": cfg.optim.seed}


def distill_set(cfg: Any, teacher: Any | None, writer: Any | None) -> dict[str, Any]:
    """The texts and the teacher's vectors: read from ``cfg.distill_set`` when that file exists, else embedded by
    ``teacher`` from the writer's memories of the training and validation splits (and saved there when it is set)."""
    if cfg.get("distill_set") and Path(cfg.distill_set).exists():
        from lightmem.errors import InvalidInputError
        from lightmem.training.job import as_json

        data = load_distill_set(cfg.distill_set)
        if teacher is not None and data["teacher"] != teacher.name:
            raise InvalidInputError(f"{cfg.distill_set} holds vectors of {data['teacher']}, not of the configured "
                                    f"encoder {teacher.name}: delete it or point distill_set elsewhere")
        if data["recipe"] != as_json(set_recipe(cfg)):
            raise InvalidInputError(f"{cfg.distill_set} was made with another writer, split or data file "
                                    f"({data['recipe']}): delete it or point distill_set elsewhere")
        return data
    if teacher is None or writer is None:
        raise FileNotFoundError(f"distill_set={cfg.get('distill_set')} does not exist and no teacher was built to make it")
    splits = corpora(cfg)
    texts = _unique(memory_texts(writer, splits["train"]))
    val = _unique(memory_texts(writer, splits["val"]))
    val = random.Random(cfg.optim.seed).sample(val, min(cfg.val_texts, len(val)))
    data = {"teacher": teacher.name, "texts": texts, "targets": teacher.encode(texts), "val": val,
            "val_targets": teacher.encode(val), "recipe": set_recipe(cfg)}
    if cfg.get("distill_set"):
        save_distill_set(cfg.distill_set, **data)
        data = load_distill_set(cfg.distill_set)  # the float16 round trip, so a run from the file fits the same targets
    return data


def train_doc_encoder(cfg: Any) -> dict[str, Any]:
    """Build (or read) the texts and the teacher's vectors, fit the student (or take an earlier fitted run's weights,
    ``cfg.fitted``), score it served (int8) on held-out memories unless ``cfg.held_out`` is false, export adapter +
    projection + card to ``cfg.export_dir``."""
    from hydra.utils import instantiate
    from transformers import AutoModel, AutoTokenizer

    from lightmem.config import build_embedder, to_container
    from lightmem.models.embedder import SentenceTransformerEmbedder
    from lightmem.models.registry import ModelRegistry
    from lightmem.seeding import seed_everything
    from lightmem.training import distributed
    from lightmem.training.job import train_and_export
    from lightmem.training.lora import apply_lora
    from lightmem.training.schemas import lora_spec, train_spec

    seed_everything(cfg.optim.seed)
    task, spec = DocEncoderTask(**to_container(cfg.task)), train_spec(cfg.optim)
    # The teacher runs only where it must: to make a missing distillation set, or to score held-out memories.
    have_set = bool(cfg.get("distill_set") and Path(cfg.distill_set).exists())
    need_teacher = (cfg.held_out and not cfg.get("prepare_only")) or not have_set
    teacher = build_embedder(cfg) if need_teacher else None
    writer = instantiate(cfg.writer)
    with distributed.main_first():  # rank 0 writes a missing distillation set; the others then read it
        data = distill_set(cfg, teacher, writer)
    if cfg.get("prepare_only"):
        return {"train": {}, "test": {"n_texts": float(len(data["texts"])), "n_val": float(len(data["val"]))}}
    texts, targets, val, val_targets = data["texts"], data["targets"], data["val"], data["val_targets"]
    if cfg.max_texts:
        keep = sorted(random.Random(cfg.optim.seed).sample(range(len(texts)), min(cfg.max_texts, len(texts))))
        texts, targets = [texts[i] for i in keep], targets[keep]
    dim = targets.shape[1]

    base = str(ModelRegistry().embedder_path(cfg.base_model))
    tok = AutoTokenizer.from_pretrained(base)
    encoder = apply_lora(AutoModel.from_pretrained(base), lora_spec(cfg.lora), "FEATURE_EXTRACTION")
    model = DistilledEncoder(encoder, encoder.config.hidden_size, dim)
    start = init_projection(model, tok, texts, targets, task, cfg.optim.seed)

    def held_out(best: Path) -> dict[str, float]:
        if not cfg.held_out:
            return {"test/projection_start_cosine": start}
        student = SentenceTransformerEmbedder(cfg.base_model, adapter=str(best), backend=cfg.encoder.backend,
                                              max_seq_length=cfg.encoder.max_seq_length, query_cache_size=0,
                                              device="cpu" if spec.cpu else cfg.encoder.device)
        tests = {k: v for k, v in corpora(cfg).items() if k.startswith("test_")}
        return {"test/projection_start_cosine": start, **held_out_metrics(teacher, student, writer, tests)}

    data_file = Path(cfg.out_dir) / "texts.json"  # the training texts, so the card's digest names what was fitted
    data_file.parent.mkdir(parents=True, exist_ok=True)
    if distributed.is_main():
        data_file.write_text(json.dumps(texts))
    return train_and_export(
        name="doc_encoder", model=model, train=length_chunks(tok, texts, targets, task), make_batch=batcher(tok, task),
        loss_fn=cosine_loss, evaluate=lambda m: fidelity(m, tok, val, val_targets, task), test=held_out,
        metric=cfg.metric, spec=spec, out_dir=cfg.out_dir, export_dir=cfg.export_dir, logger_cfg=cfg.logger,
        config=to_container(cfg), data_files=[data_file], fitted=cfg.get("fitted"),
        card={"name": "lightmem document encoder", "task": "memory -> the served embedder's vector (distillation)",
              "description": f"A LoRA adapter merged into {cfg.base_model} and a linear map from its mean-pooled output "
                             f"to the {dim}-d space of {data['teacher']}; SplitEmbedder serves it as the "
                             "document side of encoder=experimental/mpnet_split (conf/encoder/experimental/mpnet_split.yaml), the served encoder "
                             "embedding the questions.",
              "base_model": cfg.base_model, "teacher": data["teacher"],
              "command": "make train  (python train/doc_encoder.py)"},
    )
