"""LongMemEval evaluation (any file of the format: oracle or S, plain or gzipped).

    python eval/longmemeval.py data.max_instances=100 out_dir=outputs/lme_oracle
    python eval/longmemeval.py data.path='${paths.data}/longmemeval/longmemeval_s_dev.json.gz' data.max_instances=50   # after `lightmem data fetch`
    python eval/longmemeval.py qa.enabled=true +qa.judge='{_target_: lightmem.llm.openai_backend.OpenAICompatLLM, base_url: http://host:8000/v1, model: gpt-4o}'
"""
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lightmem.evaluation.reports.failures import exit_on_failures
from lightmem.evaluation.runs.common import optimized_metric
from lightmem.evaluation.runs.longmemeval import metrics, run
from lightmem.evaluation.schemas import register_configs


@hydra.main(version_base="1.3", config_path="../conf", config_name="longmemeval")
def main(cfg: DictConfig) -> float | None:
    results = run(cfg)
    exit_on_failures(results, "LongMemEval", cfg.out_dir)  # exit 1 when the run recorded failures
    return optimized_metric(metrics(results), cfg)  # the metric a sweep optimises: cfg.optimized_metric


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
