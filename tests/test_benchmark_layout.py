"""A benchmark is three files: ``lightmem/evaluation/runs/<name>.py``, ``conf/<name>.yaml`` and the stub ``eval/<name>.py``
that ``lightmem.evaluation.runs.entry.hydra_entry`` makes (the layout of every eval/ script, and a new one end to end)."""
from __future__ import annotations

import ast
import dataclasses
import importlib
import json
import os
import subprocess
import sys
import textwrap

import pytest
import yaml
from conftest import ROOT

SCRIPTS = sorted(p.stem for p in (ROOT / "eval").glob("*.py"))
# Scripts that are not a hydra_entry stub, and why.
NOT_STUBS = {"suite": "runs every benchmark and ends with its own summary and exit status (lightmem.evaluation.runs.suite)"}
STUBS = [s for s in SCRIPTS if s not in NOT_STUBS]


def stub_call(script: str) -> tuple[list, dict]:
    """The literal arguments of ``main = hydra_entry(__file__, ...)`` in eval/<script>.py, after checking that the
    script is that stub: its docstring, the import, ``main = ...``, at most ``run = main.run``, and ``main()``."""
    tree = ast.parse((ROOT / "eval" / f"{script}.py").read_text())
    body = tree.body
    assert ast.get_docstring(tree) and f"python eval/{script}.py" in ast.get_docstring(tree)  # its usage lines
    imports = [n for n in body if isinstance(n, ast.ImportFrom)]
    assert [(n.module, [a.name for a in n.names]) for n in imports if n.module != "__future__"] == [
        ("lightmem.evaluation.runs.entry", ["hydra_entry"])]
    assigns = {n.targets[0].id: n.value for n in body if isinstance(n, ast.Assign)}
    assert set(assigns) <= {"main", "run"} and ast.unparse(assigns.get("run", ast.parse("main.run").body[0].value)) == "main.run"
    call = assigns["main"]
    assert isinstance(call, ast.Call) and ast.unparse(call.func) == "hydra_entry"
    assert ast.unparse(call.args[0]) == "__file__"
    guard = body[-1]
    assert isinstance(guard, ast.If) and ast.unparse(guard.test) == "__name__ == '__main__'"
    assert [ast.unparse(s) for s in guard.body] == ["main()"]
    assert len(body) == 1 + len(imports) + len(assigns) + 1  # nothing else
    return [ast.literal_eval(a) for a in call.args[1:]], {k.arg: ast.literal_eval(k.value) for k in call.keywords}


def defaults_of(config: str) -> list[str]:
    """The plain entries of conf/<config>.yaml's defaults list, with those of the top-level configs it extends."""
    found = []
    for entry in yaml.safe_load((ROOT / "conf" / f"{config}.yaml").read_text()).get("defaults") or []:
        if isinstance(entry, str) and entry != "_self_":
            found.append(entry)
            if (ROOT / "conf" / f"{entry}.yaml").exists():
                found += defaults_of(entry)
    return found


def test_the_exceptions_are_scripts_and_every_other_script_is_listed():
    assert set(NOT_STUBS) <= set(SCRIPTS) and STUBS


@pytest.mark.parametrize("script", STUBS)
def test_every_eval_script_is_a_stub_with_a_config_and_a_runs_module(script):
    from lightmem.evaluation.schemas import SCHEMAS

    args, kwargs = stub_call(script)
    assert args[0] == script  # the benchmark's name is the script's
    assert set(kwargs) <= {"config_name", "module"}
    config = kwargs.get("config_name", script)
    assert (ROOT / "conf" / f"{config}.yaml").is_file()
    runner = importlib.import_module(kwargs.get("module", f"lightmem.evaluation.runs.{script}"))
    assert callable(runner.run) and callable(runner.metrics)
    own = getattr(runner, "SCHEMA", None)
    if own is not None:
        name, node = own
        assert name.startswith("schema_") and dataclasses.is_dataclass(node) and name not in SCHEMAS
    # what main() registers (the shared schemas and its own) is every schema its config names
    named = {d for d in defaults_of(config) if d.startswith("schema_")}
    assert named and named <= set(SCHEMAS) | ({own[0]} if own else set())


def test_register_configs_registers_every_schema_a_config_names():
    from hydra.core.config_store import ConfigStore

    from lightmem.evaluation.runs.entry import register_configs
    from lightmem.training.schemas import SCHEMAS as TRAINING

    register_configs()
    stored = {name.removesuffix(".yaml") for name in ConfigStore.instance().repo if name.startswith("schema_")}
    elsewhere = {"schema_int8_layers"}  # experiments/int8_layers/run.py registers its own
    named = {d for p in (ROOT / "conf").glob("*.yaml") for d in defaults_of(p.stem) if d.startswith("schema_")}
    assert named - set(TRAINING) - elsewhere <= stored
    assert {runner.SCHEMA[0] for runner in map(importlib.import_module, (f"lightmem.evaluation.runs.{s}" for s in STUBS))
            if hasattr(runner, "SCHEMA")} <= stored


# -- a new benchmark, made of three files, run as a user would ----------------------------------------------------
RUNS_MODULE = '''
"""The toy benchmark: its config, its measurement, its results."""
import json
from dataclasses import dataclass
from pathlib import Path


@dataclass
class ToyConfig:
    scale: int = 1
    fail: bool = False
    out_dir: str = "outputs/toy"
    optimized_metric: str | None = "toy/score"


SCHEMA = ("schema_toy", ToyConfig)


def run(cfg):
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = {"score": 1.5 * cfg.scale, "failures": ["toy: asked to fail"] if cfg.fail else []}
    (out / "results.json").write_text(json.dumps(results))
    return results


def metrics(results):
    return {"toy/score": results["score"]}
'''
CONFIG = '''
defaults:
  - schema_toy
  - _self_

scale: 2
hydra:
  run:
    dir: ${out_dir}
'''
SCRIPT = '''
"""A toy benchmark.

    python eval/toy.py scale=3
"""
from lightmem.evaluation.runs.entry import hydra_entry

main = hydra_entry(__file__, "toy", "Toy benchmark", module="toy_runs")

if __name__ == "__main__":
    main()
'''
# Not part of the benchmark: a Hydra callback the test adds on the command line, to see what main's task returned.
PROBE = '''
import json
from pathlib import Path

from hydra.experimental.callback import Callback


class Record(Callback):
    def __init__(self, path):
        self.path = path

    def on_job_end(self, config, job_return, **kwargs):
        Path(self.path).write_text(json.dumps(job_return.return_value))
'''


@pytest.mark.multiprocess
def test_a_new_benchmark_of_three_files_runs_through_the_entry_helper(tmp_path):
    for path, text in {"conf/toy.yaml": CONFIG, "eval/toy.py": SCRIPT, "lib/toy_runs.py": RUNS_MODULE, "probe/probe.py": PROBE}.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(textwrap.dedent(text).lstrip())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "lib"), str(tmp_path / "probe"), os.environ.get("PYTHONPATH", "")])}

    def toy(*overrides: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(tmp_path / "eval" / "toy.py"), *overrides], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)

    out = tmp_path / "out"
    proc = toy("scale=4", f"out_dir={out}", "+hydra.callbacks.record._target_=probe.Record", f"+hydra.callbacks.record.path={tmp_path}/ret.json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((tmp_path / "ret.json").read_text()) == 6.0  # optimized_metric: toy/score of scale=4
    assert json.loads((out / "results.json").read_text())["score"] == 6.0
    assert yaml.safe_load((out / ".hydra" / "config.yaml").read_text())["scale"] == 4
    assert (out / "toy.log").exists()  # Hydra names the job after the script
    # a run whose results list failures exits 1 after writing them, naming the benchmark
    failed = toy("fail=true", f"out_dir={tmp_path}/failed")
    assert failed.returncode == 1 and "Toy benchmark" in failed.stderr and (tmp_path / "failed" / "results.json").exists()
