"""Fit the learned Stage-2 ranker on mined Stage-1 candidate groups; export ranker.json and its card.

    python train/ranker.py
    python train/ranker.py -m l2=1e-4,1e-3,1e-2
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig

from lightmem.config import per_job, to_container
from lightmem.datasets.catalog import repo_root
from lightmem.metric_logger import quiet_third_party_logs
from lightmem.training import ranker as rk
from lightmem.training.export import export, git_commit, sha256_files
from lightmem.training.schemas import register_configs


def run(cfg: DictConfig) -> dict:
    quiet_third_party_logs()
    t0 = time.perf_counter()
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    groups, cache, cached = rk.mined_groups(cfg, out / "stores")
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
    lost = {source: rk.where_lost(held_out, weights, cfg.budget) for source, held_out in test.items()}
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
    summary = {"weights": weights, "test": metrics, "where_lost": lost, "card": card}
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
