"""LoCoMo with annotated aggregate memories written after ingestion: ``eval/locomo.py``'s run, its config and its
overrides, plus the aggregates (``experiments/aggregates/annotated.py``) under ``+aggregates.*``:

    python -m experiments.aggregates.run data.conversations=0-2 out_dir=outputs/agg/ceiling
    python -m experiments.aggregates.run data.conversations=0-2 +aggregates.enabled=false out_dir=outputs/agg/defaults
    python -m experiments.aggregates.run data.conversations=0-2 "data.categories=[1]" qa.enabled=true llm=qwen15 \
        llm.requantize=null out_dir=outputs/agg/qa15_mh_agg          # the 1.5B reader on the multi-hop questions
    python -m experiments.aggregates.run ... +aggregates.tau=0.45 +aggregates.max_facts=10

``python -m experiments.aggregates.compare A B`` pairs two runs' questions.
"""
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from experiments.aggregates.annotated import AnnotatedAggregates
from lightmem.datasets.catalog import repo_root
from lightmem.evaluation.reports.failures import exit_on_failures
from lightmem.evaluation.runs.entry import register_configs
from lightmem.evaluation.runs.locomo import run


@hydra.main(version_base="1.3", config_path=str(repo_root() / "conf"), config_name="locomo")
def main(cfg: DictConfig) -> None:
    opts = cfg.get("aggregates") or {}
    hook = None
    if bool(opts.get("enabled", True)):
        hook = AnnotatedAggregates(cfg.data.path, tau=float(opts.get("tau", 0.55)), max_facts=int(opts.get("max_facts", 6)))
    results = run(cfg, after_ingest=hook)
    exit_on_failures(results, "LoCoMo", cfg.out_dir)


if __name__ == "__main__":
    register_configs()
    main()
