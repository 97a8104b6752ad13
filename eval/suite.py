"""The whole evaluation suite in one command (LoCoMo baselines / ablations / stress tests with seeds and
paired bootstrap, MTM growth, LongMemEval) -> out_dir/suite.md, suite.json and plots.

    python eval/suite.py                                   # the dev suite (conf/suite.yaml)
    python eval/suite.py --config-name suite_demo          # the small, fast version (`make demo`)
    python eval/suite.py logger=wandb                      # every run and the summary to W&B

It ends by printing where suite.md is and a few headline numbers, and exits 1 when any planned run
failed (after writing suite.md / suite.json of what did finish).
"""
from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

from lightmem.evaluation.runs.entry import register_configs
from lightmem.evaluation.runs.suite import closing_summary, run


@hydra.main(version_base="1.3", config_path="../conf", config_name="suite")
def main(cfg: DictConfig) -> None:
    summary = run(cfg)
    print("\n" + closing_summary(summary, Path(cfg.out_dir) / "suite.md"), flush=True)
    if summary["failures"]:
        raise SystemExit(1)  # propagates through @hydra.main as the process's exit status


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
