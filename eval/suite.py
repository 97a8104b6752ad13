"""The whole evaluation suite in one command (LoCoMo baselines / ablations / stress tests with seeds and
paired bootstrap, MTM growth, LongMemEval) -> out_dir/suite.md, suite.json and plots.

    python eval/suite.py                                   # the dev suite (conf/suite.yaml)
    python eval/suite.py --config-name suite_demo          # the small, fast version (`make demo`)
    python eval/suite.py logger.kind=wandb                 # every run and the summary to W&B
"""
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lightmem.evaluation.suite_run import run_suite
from lightmem.metric_logger import quiet_third_party_logs


@hydra.main(version_base="1.3", config_path="../conf", config_name="suite")
def main(cfg: DictConfig) -> None:
    quiet_third_party_logs()
    summary = run_suite(cfg)
    print((__import__("pathlib").Path(cfg.out_dir) / "suite.md").read_text())
    print(f"suite took {summary['total_s'] / 60:.1f} min")


if __name__ == "__main__":
    main()
