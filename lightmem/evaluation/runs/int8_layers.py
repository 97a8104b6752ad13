"""One int8-sensitivity run from its config: the drift from fp32 of each quantization recipe of the configured
encoder (``lightmem.evaluation.int8_layers``; ``eval/int8_layers.py`` is the thin entry point)."""
from __future__ import annotations

import json
import random
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig

from lightmem.config import to_container
from lightmem.datasets import load_conversations
from lightmem.evaluation.int8_layers import drift_table, layer_sensitivity
from lightmem.metric_logger import quiet_third_party_logs
from lightmem.models.onnx_encoder import OnnxSession, fp32_matmuls
from lightmem.models.registry import ModelRegistry


def run(cfg: DictConfig) -> dict[str, Any]:
    quiet_third_party_logs()
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    texts = [t.text for c in load_conversations(cfg.corpus) for t in c.turns if t.text.strip()]
    random.Random(cfg.seed).shuffle(texts)
    texts = texts[: cfg.n_texts]
    encoder = instantiate(cfg.encoder, backend="onnx")
    if encoder.graph is None:
        raise ValueError("the int8 sensitivity needs an ONNX encoder (a SentenceTransformerEmbedder)")
    tokenizer, length = encoder.tokenizer, int(cfg.encoder.max_seq_length)

    def encode(graph: Path, batch: list[str]):
        return OnnxSession(graph, tokenizer, length, int(cfg.encoder.batch_size)).encode(batch)

    served = fp32_matmuls(ModelRegistry.canonical(cfg.encoder.model), "onnx_int8")
    with tempfile.TemporaryDirectory() as work:
        rows = layer_sensitivity(encoder.graph, encode, texts, Path(work), cfg.family, served)
    results = {"drift": [asdict(r) for r in rows], "n_texts": len(texts), "config": to_container(cfg)}
    (out / "results.json").write_text(json.dumps(results, indent=2))
    table = drift_table(rows)
    (out / "results.md").write_text(table + "\n")
    print(f"{cfg.encoder.model}: cosine to fp32 over {len(texts)} turns of {cfg.corpus}\n\n{table}")
    print(f"\nwrote {out}/results.json, results.md")
    return results
