"""LoCoMo retrieval evaluation.

    python eval/locomo.py data.conversations=0-4 out_dir=outputs/locomo_dev
    python eval/locomo.py data.path=/path/to/locomo10.json data.conversations=5-9 budget=600
    python eval/locomo.py -m retrieval=rrf,weighted,dense,bm25      # a Hydra sweep
"""
from __future__ import annotations

import json
import logging
import shutil
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from lightmem.config import SharedRuntime, build_embedder, build_memory, to_container
from lightmem.datasets import load_locomo, select_conversations
from lightmem.evaluation.locomo_retrieval import run_locomo_retrieval
from lightmem.evaluation.report import plot_recall, retrieval_table
from lightmem.metric_logger import make_logger, quiet_third_party_logs

log = logging.getLogger("lightmem.eval.locomo")


def run(cfg: DictConfig) -> dict:
    """Evaluate and write results.json, questions.jsonl, results.md and recall.png to out_dir."""
    quiet_third_party_logs()
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    convs = select_conversations(load_locomo(cfg.data.path), cfg.data.conversations)
    embedder = build_embedder(cfg)
    shared = SharedRuntime(cfg)  # one LLM runtime / spaCy pipeline for all conversations
    stores = out / "stores"
    shutil.rmtree(stores, ignore_errors=True)  # our own scratch stores from a previous run of this folder

    def make_memory(conv_id: str):
        return build_memory(cfg, stores / conv_id, embedder=embedder, shared=shared)

    ks = sorted(int(k) for k in cfg.ks)
    results, records = run_locomo_retrieval(
        make_memory, convs, ks=ks, budget=int(cfg.budget), categories=list(cfg.data.categories), show_progress=sys.stderr.isatty(),
        max_questions=cfg.data.max_questions
    )
    if not cfg.keep_stores:
        shutil.rmtree(stores, ignore_errors=True)
    results["config"] = to_container(cfg)
    results["config"]["conversation_ids"] = [c.conv_id for c in convs]
    (out / "results.json").write_text(json.dumps(results, indent=2))
    with open(out / "questions.jsonl", "w") as fh:
        for r in records:
            fh.write(json.dumps(r.__dict__) + "\n")
    table = retrieval_table(results, ks, int(cfg.budget))
    (out / "results.md").write_text(f"# LoCoMo retrieval ({', '.join(c.conv_id for c in convs)})\n\n{table}\n")
    plot_recall(results, ks, out / "recall.png")
    print(table)
    print(f"\nwrote {out}/results.json, results.md, questions.jsonl, recall.png")

    logger = make_logger(cfg.logger.kind, out, cfg.logger.project, cfg.logger.mode, cfg.logger.name)
    logger.log_config(results["config"])
    flat = {f"eval/{k}": v for k, v in results["retrieval"]["overall"].items()}
    flat.update({f"latency/{k}": v for k, v in results["latency"].items()})
    logger.log_metrics(flat)
    logger.log_artifact(out / "results.json")
    logger.finish()
    return results


@hydra.main(version_base="1.3", config_path="../conf", config_name="locomo")
def main(cfg: DictConfig) -> float:
    results = run(cfg)
    return results["retrieval"]["overall"]["recall_all@budget"]  # what a sweep maximises


if __name__ == "__main__":
    main()
