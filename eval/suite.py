"""The whole evaluation suite in one command (LoCoMo baselines / ablations / stress tests with seeds and
paired bootstrap, MTM growth, LongMemEval) -> out_dir/suite.md, suite.json and plots.

    python eval/suite.py                                   # the dev suite (conf/suite.yaml)
    python eval/suite.py --config-name suite_demo          # the small, fast version (`make demo`)
    python eval/suite.py logger.kind=wandb                 # every run and the summary to W&B

It ends by printing where suite.md is and a few headline numbers, and exits 1 when any planned run
failed (after writing suite.md / suite.json of what did finish).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from lightmem.evaluation.schemas import register_configs
from lightmem.evaluation.suite_run import closing_summary, run_suite
from lightmem.metric_logger import quiet_third_party_logs


def run(cfg: DictConfig) -> dict[str, Any]:
    """Run the suite; the summary's ``failures`` names every planned run that did not complete."""
    quiet_third_party_logs()
    return run_suite(cfg)


def finish(summary: dict[str, Any], out_dir: str | Path) -> int:
    """Print the closing summary; returns the exit status (1 when a planned run failed, else 0)."""
    print("\n" + closing_summary(summary, Path(out_dir) / "suite.md"), flush=True)
    return 1 if summary["failures"] else 0


@hydra.main(version_base="1.3", config_path="../conf", config_name="suite")
def main(cfg: DictConfig) -> None:
    status = finish(run(cfg), cfg.out_dir)
    if status:
        raise SystemExit(status)  # propagates through @hydra.main as the process's exit status


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
