"""Supervision from the dev data: selector groups (Stage-1 candidates), compressor word labels,
complexity labels; written per split to ``out_dir``.

    python data_gen/distill.py out_dir=outputs/data
    python data_gen/distill.py lme_max=40 out_dir=/tmp/d      # a quick subset
"""
from __future__ import annotations

import json
import logging
import shutil
import sys
from collections import Counter
from pathlib import Path

import hydra
from omegaconf import DictConfig

from lightmem.config import SharedRuntime, build_embedder, build_memory
from lightmem.datasets import load_locomo, select_conversations
from lightmem.datasets.formats import read_json
from lightmem.datasets.longmemeval import load_longmemeval
from lightmem.datasets.splits import split_of
from lightmem.metric_logger import quiet_third_party_logs
from lightmem.training import distill
from lightmem.training.schemas import register_configs

log = logging.getLogger("lightmem.data_gen.distill")


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def run(cfg: DictConfig) -> dict:
    quiet_third_party_logs()
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    progress = sys.stderr.isatty()
    embedder, shared = build_embedder(cfg), SharedRuntime(cfg)
    scratch = out / "stores"
    shutil.rmtree(scratch, ignore_errors=True)

    def make_memory(conv_id: str):
        return build_memory(cfg, scratch / conv_id, embedder=embedder, shared=shared)

    locomo_all = load_locomo(cfg.locomo_path)
    raw = read_json(cfg.locomo_path)
    by_split = {"train": select_conversations(locomo_all, cfg.locomo_train), "test": select_conversations(locomo_all, cfg.locomo_test)}
    lme = load_longmemeval(cfg.lme_path)[: cfg.lme_max]
    lme_split = {s: [c for c in lme if split_of(c.conv_id) == s] for s in ("train", "val", "test")}
    synth = {s: _read_jsonl(Path(cfg.synth_dir) / f"{s}.jsonl") for s in ("train", "val", "test")}

    selector, complexity, compressor = {}, {}, {}
    for split in ("train", "val", "test"):
        groups = distill.synth_groups(synth[split])
        groups += distill.mine_selector_groups(make_memory, lme_split[split], "longmemeval", k=cfg.k,
                                               add_missed=split == "train", show_progress=progress)
        cx = distill.complexity_examples_synth(synth[split]) + distill.complexity_examples_lme(lme_split[split])
        locomo = by_split.get(split, [])
        if locomo:
            groups += distill.mine_selector_groups(make_memory, locomo, "locomo", k=cfg.k, categories=(1, 2, 3, 4),
                                                   add_missed=split == "train", show_progress=progress)
            cx += distill.complexity_examples_locomo(locomo)
        ids = {c.conv_id for c in locomo}
        comp = distill.compressor_examples([r for r in raw if r.get("sample_id") in ids])
        if split == "val":  # LoCoMo has no validation conversation: the compressor validates on LongMemEval-free held-in turns
            comp = []
        selector[split], complexity[split], compressor[split] = groups, cx, comp
        _write(out / f"selector_{split}.jsonl", groups)
        _write(out / f"complexity_{split}.jsonl", cx)
        _write(out / f"compressor_{split}.jsonl", comp)
    shutil.rmtree(scratch, ignore_errors=True)
    card = {
        "selector": {s: dict(Counter(g["source"] for g in v)) for s, v in selector.items()},
        "complexity": {s: {"n": len(v), "high": sum(x["label"] for x in v)} for s, v in complexity.items()},
        "compressor": {s: {"turns": len(v), "keep_rate": sum(sum(x["labels"]) for x in v) / max(1, sum(len(x["labels"]) for x in v))}
                       for s, v in compressor.items()},
        "locomo_train": [c.conv_id for c in by_split["train"]], "locomo_test": [c.conv_id for c in by_split["test"]],
        "k": cfg.k,
    }
    (out / "distill_card.json").write_text(json.dumps(card, indent=2))
    print(json.dumps(card, indent=1))
    return card


@hydra.main(version_base="1.3", config_path="../conf", config_name="distill")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
