"""A run's logger is chosen by its class in config (conf/logger/*.yaml) and built for the run's folder."""
from __future__ import annotations

import json

import pytest
from conftest import compose

from lightmem.metric_logger import DiskLogger, NullLogger, StdoutLogger, WandbLogger, make_run_logger

OPTIONS = {"none": NullLogger, "stdout": StdoutLogger, "disk": DiskLogger, "wandb": WandbLogger}


@pytest.mark.parametrize("option", ["none", "stdout", "disk"])
def test_each_logger_option_builds_its_class_for_the_run(tmp_path, option):
    cfg = compose("locomo", [f"logger={option}", "encoder=hashing"])
    logger = make_run_logger(cfg.logger, tmp_path, "locomo")
    assert type(logger) is OPTIONS[option]
    logger.log_config({"k": 10})
    logger.log_metrics({"eval/recall": 0.5}, step=1)
    logger.finish()
    written = (tmp_path / "metrics.jsonl").read_text().splitlines() if option == "disk" else []
    assert [json.loads(x) for x in written] == ([{"step": 1, "eval/recall": 0.5}] if option == "disk" else [])


def test_the_wandb_option_names_its_class_and_offline_mode():
    cfg = compose("locomo", ["logger=wandb", "encoder=hashing"])
    assert (cfg.logger._target_, cfg.logger.mode) == ("lightmem.metric_logger.WandbLogger", "offline")


def test_no_logger_node_logs_nothing_and_the_old_kind_key_is_refused_with_the_new_spelling(tmp_path):
    assert type(make_run_logger(None, tmp_path, "x")) is NullLogger
    with pytest.raises(ValueError, match="logger=none\\|stdout\\|disk\\|wandb"):
        make_run_logger({"kind": "wandb"}, tmp_path, "x")
    with pytest.raises(TypeError, match="not a MetricLogger"):
        make_run_logger({"_target_": "collections.OrderedDict"}, tmp_path, "x")
