"""Fit the learned Stage-2 ranker on mined Stage-1 candidate groups; export ranker.json and its card.

    python train/ranker.py
    python train/ranker.py -m l2=1e-4,1e-3,1e-2
"""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig

from lightmem.config import SharedRuntime, build_embedder, build_memory, per_job, to_container
from lightmem.datasets import load_locomo, select_conversations
from lightmem.datasets.catalog import repo_root
from lightmem.datasets.longmemeval import load_longmemeval
from lightmem.metric_logger import quiet_third_party_logs
from lightmem.retrieval import features
from lightmem.training import distill
from lightmem.training import ranker as rk
from lightmem.training.export import export, git_commit, sha256_files
from lightmem.training.schemas import register_configs


def run(cfg: DictConfig) -> dict:
    quiet_third_party_logs()
    t0 = time.perf_counter()
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    embedder, shared = build_embedder(cfg), SharedRuntime(cfg)
    scratch = out / "stores"
    shutil.rmtree(scratch, ignore_errors=True)

    def make_memory(conv_id: str):
        return build_memory(cfg, scratch / conv_id, embedder=embedder, shared=shared)

    # Mining (ingest + Stage 1 for every question) is the slow part and does not depend on the fit's
    # settings: groups are cached under cache_dir by everything that does (pipeline, data, embedder).
    key = {name: to_container(cfg[name]) for name in ("encoder", "store", "retrieval", "controller", "writer", "sensory", "ltm",
                                                      "memory", "llm")}
    key["encoder"].pop("adapter", None)  # a machine's path; the embedder's name carries the adapter's fingerprint
    key.update(embedder=embedder.name, k=cfg.k, data=[Path(str(p)).name for p in (cfg.locomo_path, cfg.lme_path)],
               splits=[str(cfg.locomo_train), str(cfg.locomo_test), cfg.lme_max],
               features=hashlib.sha256(Path(features.__file__).read_bytes()).hexdigest())  # the feature code itself
    cache = Path(cfg.cache_dir) / hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
    cached = (cache / "groups.json").exists()
    if cached:
        groups = json.loads((cache / "groups.json").read_text())
    else:
        locomo = load_locomo(cfg.locomo_path)
        lme = load_longmemeval(cfg.lme_path)[: cfg.lme_max]
        progress = sys.stderr.isatty()
        mine = lambda convs, source, cats=None: rk.mine_groups(make_memory, convs, source, cfg.k, cats, progress)  # noqa: E731
        groups = {"train": mine(select_conversations(locomo, cfg.locomo_train), "locomo", (1, 2, 3, 4))
                  + mine([c for c in lme if distill.split_of(c.conv_id) == "train"], "longmemeval"),
                  "test_locomo": mine(select_conversations(locomo, cfg.locomo_test), "locomo", (1, 2, 3, 4)),
                  "test_longmemeval": mine([c for c in lme if distill.split_of(c.conv_id) == "test"], "longmemeval")}
        cache.mkdir(parents=True, exist_ok=True)
        tmp = cache / "groups.json.tmp"
        tmp.write_text(json.dumps(groups))
        tmp.rename(cache / "groups.json")  # a kill mid-write leaves no half cache
    train = groups["train"]
    test = {"locomo": groups["test_locomo"], "longmemeval": groups["test_longmemeval"]}
    mined_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    weights = rk.fit_linear(train, cfg.loss, cfg.l2, cfg.listwise_weight)
    fit_s = time.perf_counter() - t1
    metrics: dict[str, float] = {}
    for source, held_out in test.items():
        for name, w in (("stage1", None), ("ranker", weights)):
            metrics.update({f"test/{source}/{name}/{k}": v for k, v in rk.evaluate(held_out, w, cfg.k, cfg.budget).items()})
    shutil.rmtree(scratch, ignore_errors=True)
    groups_file = out / "ranker_groups.jsonl"
    groups_file.write_text("".join(json.dumps(g) + "\n" for g in train))
    card = {"name": "lightmem learned ranker (Stage 2)", "task": "linear listwise ranker of Stage-1 candidates",
            "description": "Scores each Stage-1 candidate from cheap features (lightmem/retrieval/features.py); "
                           "LearnedRanker loads it (conf/selector/ranker.yaml).",
            "base_model": f"features over the Stage-1 signals of {cfg.encoder.get('model')} "
                          f"(adapter: {'yes' if cfg.encoder.get('adapter') else 'no'})",
            "command": "make train  (python train/ranker.py)", "params": {"trainable": len(weights["coef"]) + 1,
                                                                          "total": len(weights["coef"]) + 1},
            "data_sha256": sha256_files([groups_file]), "commit": git_commit(), "metrics": metrics,
            "training": {"n_train_groups": len(train), "mine_seconds": round(mined_s, 1),
                         "groups_from_cache": str(cache) if cached else None, "fit_seconds": round(fit_s, 2)},
            "config": json.loads(json.dumps(to_container(cfg)).replace(str(repo_root()) + "/", ""))}  # no machine paths
    summary = {"weights": weights, "test": metrics, "card": card}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    (out / "best").mkdir(exist_ok=True)
    (out / "best" / "ranker.json").write_text(json.dumps(weights, indent=2))
    if cfg.export_dir:
        export(out / "best", cfg.export_dir, card)
    print(json.dumps({k: round(v, 4) for k, v in metrics.items() if "overall" in k}, indent=1))
    return summary


@hydra.main(version_base="1.3", config_path="../conf", config_name="train_ranker")
def main(cfg: DictConfig) -> float:
    cfg = per_job(cfg)
    return run(cfg)["test"].get("test/locomo/ranker/overall/recall_all@budget", float("nan"))


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
