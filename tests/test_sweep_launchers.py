"""Sweeps beyond one process: a grid sent through Hydra's submitit launcher (``hydra/launcher=submitit_local``, the
SLURM launcher's path without a cluster), the SLURM launcher up to ``sbatch``, an Optuna study stored in SQLite, and
the W&B runs of a sweep grouped under its name. Each sweep is ``train/ranker.py`` on hashing vectors and the tiny
LoCoMo fixture, the cheapest trainer (a trial is ~3 s of fitting), run as a user runs it: a ``-m`` command; and
``eval/locomo.py`` on the same fixture, whose parallel jobs each write their results into a folder of their own."""
from __future__ import annotations

import json
import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, TINY_LOCOMO, compose
from test_train_scripts import _lme

pytestmark = pytest.mark.multiprocess

METRIC = "test/locomo/ranker/overall/recall_all@budget"  # what train/ranker.py's main() returns to a sweeper


def _sweep(tmp_path: Path, *overrides: str, path: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """``python train/ranker.py -m <overrides>`` in ``tmp_path`` (its sweeps land in tmp_path/multirun), tiny and offline."""
    lme = tmp_path / "lme.json"
    if not lme.exists():
        _lme(lme)
    tiny = ["export_dir=null", "encoder=hashing", f"locomo_path={TINY_LOCOMO}", "locomo_train=0", "locomo_test=1",
            f"lme_path={lme}", "k=3"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if path:
        env["PATH"] = f"{path}{os.pathsep}{env['PATH']}"
    done = subprocess.run([sys.executable, str(ROOT / "train/ranker.py"), "-m", *overrides, *tiny], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)
    if check:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def _the_sweep(tmp_path: Path) -> Path:
    """The one sweep folder a command made: multirun/train_ranker/<start time>."""
    (folder,) = (tmp_path / "multirun/train_ranker").iterdir()
    return folder


def _wandb_run_groups(folder: Path) -> list[str]:
    """The group of each offline W&B run under ``folder``, read from the runs' own transaction logs (``run-*.wandb``:
    a LevelDB-style log of 32 KiB blocks holding the run's protobuf records; wandb has no Python reader for it)."""
    from wandb.proto import wandb_internal_pb2

    groups = []
    for log_file in sorted(folder.glob("*/wandb/offline-run-*/run-*.wandb")):
        data, pos, chunk = log_file.read_bytes(), 7, b""  # 7: ":W&B", the magic number and the format version
        assert data[:4] == b":W&B"
        while pos + 7 <= len(data):
            left = 32768 - pos % 32768
            _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
            if left < 7 or (kind == 0 and length == 0):  # the block's padding
                pos += left
                continue
            chunk, pos = chunk + data[pos + 7:pos + 7 + length], pos + 7 + length
            if kind in (1, 4):  # a whole record, or a record's last piece
                record = wandb_internal_pb2.Record.FromString(chunk)
                chunk = b""
                if record.WhichOneof("record_type") == "run":
                    groups.append(record.run.run_group)
    return groups


def test_a_grid_sweep_runs_each_trial_as_a_submitit_job_and_groups_its_wandb_runs(tmp_path):
    _sweep(tmp_path, "hydra/launcher=submitit_local", "l2=0.01,0.1", "logger=wandb",
           # each trial mines its own groups: the ranker's cache has one temporary file name, which two trials
           # running at once and mining the same groups would both write
           "cache_dir=${hydra:runtime.output_dir}/groups")
    sweep = _the_sweep(tmp_path)
    results = [pickle.loads(p.read_bytes()) for p in sorted(sweep.glob(".submitit/*/*_result.pkl"))]
    assert len(results) == 2 and all(status == "success" for status, _ in results)  # two submitit jobs, both done
    by_trial = {ret.cfg["out_dir"]: ret for _, ret in results}
    assert sorted(ret.cfg["l2"] for ret in by_trial.values()) == [0.01, 0.1]
    for job in ("0", "1"):  # each trial in its own folder, its metric the one returned to the sweeper
        summary = json.loads((sweep / job / "summary.json").read_text())
        assert summary["test"][METRIC] == by_trial[str(sweep / job)].return_value
    assert _wandb_run_groups(sweep) == [f"ranker-{sweep.name}"] * 2  # one W&B group: <job>-<sweep start time>


def test_an_optuna_sweep_stores_its_study_in_sqlite_in_the_sweep_folder(tmp_path):
    import optuna

    _sweep(tmp_path, "hparams_search=ranker_optuna", "hydra.sweeper.n_trials=2", f"cache_dir={tmp_path}/groups")
    sweep = _the_sweep(tmp_path)
    study = optuna.load_study(study_name=f"ranker-{sweep.name}", storage=f"sqlite:///{sweep / 'optuna.db'}")
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 2
    for trial in study.trials:  # the study holds what each trial's run measured, under the parameters it ran with
        summary = json.loads((sweep / str(trial.number) / "summary.json").read_text())
        assert trial.value == summary["test"][METRIC] and set(trial.params) == {"l2", "loss"}


def _locomo(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    """``python eval/locomo.py <overrides>`` in ``tmp_path`` on hashing vectors and the tiny LoCoMo fixture."""
    tiny = [f"data.path={TINY_LOCOMO}", "data.conversations=0-1", "encoder=hashing", "ks=[1,3]", "vector_cache=null",
            f"out_dir={tmp_path}/locomo"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, str(ROOT / "eval/locomo.py"), *overrides, *tiny], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_the_jobs_of_an_eval_sweep_write_into_folders_of_their_own_and_a_single_run_into_out_dir(tmp_path):
    """Two trials of eval/locomo.py run at once (submitit_local) with the same out_dir configured: each writes its own
    results.json, with its own budget, into its job's folder; the configured out_dir is left alone."""
    _locomo(tmp_path, "-m", "hydra/launcher=submitit_local", "budget=40,300")
    assert not (tmp_path / "locomo").exists()
    (sweep,) = (tmp_path / "multirun/locomo").iterdir()
    returned = {ret.cfg["budget"]: ret.return_value for status, ret in
                (pickle.loads(p.read_bytes()) for p in sweep.glob(".submitit/*/*_result.pkl")) if status == "success"}
    assert sorted(returned) == [40, 300]  # two submitit jobs, both done
    budgets = []
    for job in ("0", "1"):
        saved = json.loads((sweep / job / "results.json").read_text())
        assert saved["config"]["out_dir"] == str(sweep / job)
        budgets.append(saved["config"]["budget"])
        rows = [json.loads(line) for line in (sweep / job / "questions.jsonl").read_text().splitlines()]
        assert rows and all(r["tokens"]["@budget"] <= saved["config"]["budget"] for r in rows)
        # the number each job handed the sweeper is the one its own results hold
        assert returned[saved["config"]["budget"]] == saved["retrieval"]["overall"]["recall_all@budget"]
        assert (sweep / job / "locomo.log").exists()  # Hydra's log of the job, beside its results
    assert sorted(budgets) == [40, 300]

    _locomo(tmp_path, "budget=40")  # one run: out_dir as configured, no sweep folder
    assert json.loads((tmp_path / "locomo" / "results.json").read_text())["config"]["out_dir"] == str(tmp_path / "locomo")
    assert [p.name for p in (tmp_path / "multirun/locomo").iterdir()] == [sweep.name]


def test_the_slurm_launcher_writes_the_job_array_with_the_cluster_fields(tmp_path):
    """As far as a machine without SLURM goes: the sweep reaches ``sbatch`` (a stand-in that keeps the script and
    refuses it), whose script carries the fields of conf/hydra/launcher/submitit_slurm.yaml."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")  # submitit looks for srun to tell it is on a cluster
    (bin_dir / "sbatch").write_text(f'#!/bin/sh\ncp "$1" {tmp_path}/submitted.sh\necho "sbatch: error: no cluster" >&2\nexit 1\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    done = _sweep(tmp_path, "hydra/launcher=submitit_slurm", "hydra.launcher.partition=gpu", "hydra.launcher.mem_gb=16",
                  "hydra.launcher.constraint=a100", "+hydra.launcher.additional_parameters.reservation=lab", "l2=0.01,0.1",
                  path=str(bin_dir), check=False)
    assert done.returncode != 0 and "no cluster" in done.stdout + done.stderr
    script = (tmp_path / "submitted.sh").read_text()
    for line in ("--array=0-1%2", "--partition=gpu", "--gpus-per-node=1", "--cpus-per-task=8", "--mem=16GB",
                 "--time=240", "--constraint=a100", "--reservation=lab", "--job-name=ranker"):
        assert f"#SBATCH {line}\n" in script, line
    assert "submitit.core._submit" in script


def test_the_wandb_group_is_null_outside_a_sweep_and_can_be_set():
    assert compose("train_ranker", ["logger=wandb"]).logger.group is None
    assert compose("train_ranker", ["logger=wandb", "logger.group=ablations"]).logger.group == "ablations"


# hydra-core 1.3 checks a config file against a structured config of the same name, and warns that it will stop:
# the files take the plugin's option names on purpose (hydra/launcher=submitit_slurm), and are complete without it
@pytest.mark.filterwarnings(r"ignore:\s*'hydra/launcher/submitit_\w+' is validated against ConfigStore schema")
@pytest.mark.parametrize("launcher", ["submitit_local", "submitit_slurm"])
def test_the_launcher_configs_compose_into_the_plugins_launchers(launcher):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.utils import instantiate

    from lightmem.training.schemas import register_configs

    register_configs()  # as train/ranker.py does before Hydra composes
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = hydra_compose("train_ranker", [f"hydra/launcher={launcher}"], return_hydra_config=True)
    built = instantiate(cfg.hydra.launcher)
    assert type(built).__name__ == {"submitit_local": "LocalLauncher", "submitit_slurm": "SlurmLauncher"}[launcher]
    assert built.params["submitit_folder"].endswith("/.submitit/%j") and built.params["nodes"] == 1
