"""LoCoMo evaluation: evidence recall, and QA with the configured generator when qa.enabled.

    python eval/locomo.py data.conversations=0-4 out_dir=outputs/locomo_dev
    python eval/locomo.py data.path=/path/to/locomo10.json data.conversations=5-9 budget=600
    python eval/locomo.py qa.enabled=true data.categories=[1,2,3,4,5]          # + answers (SmolLM2)
    python eval/locomo.py qa.enabled=true llm=openai llm.base_url=http://host:8000/v1 \
        +qa.judge='{_target_: lightmem.llm.openai_backend.OpenAICompatLLM, base_url: http://host:8000/v1, model: gpt-4o-mini}'
    python eval/locomo.py +experiment=baseline_bm25                              # a baseline / ablation
    python eval/locomo.py -m retrieval=rrf,weighted,dense,bm25      # a Hydra sweep
"""
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lightmem.evaluation.reports.failures import exit_on_failures
from lightmem.evaluation.runs.common import optimized_metric
from lightmem.evaluation.runs.locomo import metrics, run
from lightmem.evaluation.schemas import register_configs


@hydra.main(version_base="1.3", config_path="../conf", config_name="locomo")
def main(cfg: DictConfig) -> float | None:
    results = run(cfg)
    exit_on_failures(results, "LoCoMo", cfg.out_dir)  # exit 1 when the run recorded failures
    return optimized_metric(metrics(results), cfg)  # the metric a sweep optimises: cfg.optimized_metric


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
