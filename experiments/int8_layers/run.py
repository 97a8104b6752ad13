"""Which weight matrices keep the encoder's int8 vectors close to fp32 (writes numbers, asserts nothing).

    python -m experiments.int8_layers.run                                  # the default (mpnet) embedder, 300 LoCoMo turns
    python -m experiments.int8_layers.run encoder=minilm_tuned n_texts=600

The config is conf/int8_layers.yaml; ``sensitivity.py`` beside this file does the measuring.
"""
from __future__ import annotations

import json
import random
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig

from experiments.int8_layers.sensitivity import FFN_OUTPUT, drift_table, layer_sensitivity
from lightmem.config import PathsConfig, register_schemas, to_container
from lightmem.datasets import load_conversations
from lightmem.metric_logger import quiet_third_party_logs
from lightmem.models.onnx_encoder import OnnxSession, fp32_matmuls
from lightmem.models.registry import ModelRegistry

CONF = Path(__file__).resolve().parents[2] / "conf"


@dataclass
class Int8LayersConfig:
    """How far each int8 recipe of the encoder moves its vectors from fp32.

    Attributes:
        encoder: The encoder node (conf/encoder/); it must export to ONNX (a SentenceTransformerEmbedder).
        paths: Where the data lives.
        corpus: The conversations whose turns are encoded (the drift depends on the activations real text causes).
        n_texts: How many of their turns, drawn at random with ``seed``.
        family: Regex of the MatMuls measured one by one (default: the feed-forward output projections).
        seed: Seed of the draw of turns.
        out_dir: Where results.json and results.md go.
    """

    encoder: Any = None
    paths: PathsConfig = field(default_factory=PathsConfig)
    corpus: str = "${paths.data}/locomo/locomo_dev.json.gz"
    n_texts: int = 300
    family: str = FFN_OUTPUT
    seed: int = 0
    out_dir: str = "outputs/int8_layers"


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


def register_configs() -> None:
    """The schema conf/int8_layers.yaml names, and lightmem's resolvers (idempotent)."""
    register_schemas({"schema_int8_layers": Int8LayersConfig})


@hydra.main(version_base="1.3", config_path=str(CONF), config_name="int8_layers")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    register_configs()  # before Hydra composes
    main()
