"""LongMemEval evaluation (any file of the format: oracle or S, plain or gzipped).

    python eval/longmemeval.py data.max_instances=100 out_dir=outputs/lme_oracle
    python eval/longmemeval.py data.path='${paths.data}/longmemeval/longmemeval_s_dev.json.gz' data.max_instances=50   # after `lightmem data fetch`
    python eval/longmemeval.py qa.enabled=true +qa.judge='{_target_: lightmem.llm.openai_backend.OpenAICompatLLM, base_url: http://host:8000/v1, model: gpt-4o}'
"""
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lightmem.evaluation.failures import exit_on_failures
from lightmem.evaluation.longmemeval_run import run_lme
from lightmem.evaluation.schemas import register_configs


@hydra.main(version_base="1.3", config_path="../conf", config_name="longmemeval")
def main(cfg: DictConfig) -> float:
    results = run_lme(cfg)
    exit_on_failures(results, "LongMemEval", cfg.out_dir)
    return results["retrieval"]["overall"].get("session_recall_all@10") or 0.0


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
