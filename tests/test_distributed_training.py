"""train/cross_encoder.py under ``torchrun --nproc_per_node 2`` (gloo, CPU) against one process of the same run:
rank 0 alone logs and exports, and the numbers match.

The two runs see the same global batch in the same order: one process takes micro-batches of 4 groups, each of the
two takes 2 (``distributed.shard``: micro-batch m of the two ranks together holds micro-batch m of the one process).
DistributedDataParallel averages the ranks' gradients, and the loss is a mean over groups of equal size, so the
average of the two half-batch gradients is the whole batch's gradient. Dropout is off (its masks would be drawn
differently) and every group keeps all its candidates (no sampled negatives, only their order, which the losses
ignore). What remains is float rounding: the order of the sums in the all-reduce and in the padded tokenisation of
a smaller batch, about 1e-7 per step; over 4 AdamW steps the losses agree within 1e-4 and the ranking metrics exactly.

A 2-process run killed with SIGKILL after its step-2 save and started again resumes from ``last/`` at step 2 (not 0),
ends where the uninterrupted 2-process run ends and exports once.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, compose

sys.path.insert(0, str(ROOT))

pytestmark = pytest.mark.multiprocess

TOL = 1e-4  # see the module docstring: float reduction order, not a modelling difference


def _groups(n: int, seed: int) -> list[dict]:
    """Groups of 4 candidates, one or two of them positive; the positives name the query's topic."""
    topics = ["cat", "job", "trip", "sister", "garden", "guitar", "bakery", "marathon"]
    out = []
    for i in range(n):
        topic = topics[(i + seed) % len(topics)]
        others = [t for t in topics if t != topic]
        texts = [f"[2023-05-0{j + 1}] Ann: my {topic if j < 1 + i % 2 else others[(i + j) % len(others)]} story {i}"
                 for j in range(4)]
        labels = [int(j < 1 + i % 2) for j in range(4)]
        out.append({"query": f"what about my {topic}?", "texts": texts, "labels": labels, "n_evidence": sum(labels),
                    "stage1": [float(4 - j) for j in range(4)][::-1], "source": "synth"})
    return out


def _overrides(tmp_path, name: str, batch_size: int) -> list[str]:
    return [f"data_dir={tmp_path}/data", "sources=[synth]", f"out_dir={tmp_path}/{name}", f"export_dir={tmp_path}/{name}_export",
            "logger=disk", "optim.cpu=true", "optim.max_steps=4", "optim.eval_every=2", f"optim.batch_size={batch_size}",
            "optim.lr=3e-3", "optim.patience=0", "task.group_size=4", "task.max_pos=4", "task.max_length=32", "task.k=2",
            "metric=recall_all@2", "max_eval_groups=6", "model.dropout=0.0", "lora.dropout=0.0"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _metrics(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _torchrun(tmp_path, name: str) -> list[str]:
    """``torchrun --nproc_per_node 2 train/cross_encoder.py`` of the tiny run, 2 groups per process."""
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
            "--master_port", str(_free_port()), str(ROOT / "train" / "cross_encoder.py"),
            *_overrides(tmp_path, name, batch_size=2)]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess, float]:
    """The data and an uninterrupted 2-process run of it (``<dir>/two``), shared by the tests that compare with it."""
    tmp_path = tmp_path_factory.mktemp("distributed")
    data = tmp_path / "data"
    data.mkdir()
    for split, n, seed in (("train", 16, 0), ("val", 6, 3), ("test", 6, 5)):
        (data / f"selector_{split}.jsonl").write_text("".join(json.dumps(g) + "\n" for g in _groups(n, seed)))
    t0 = time.perf_counter()
    proc = subprocess.run(_torchrun(tmp_path, "two"), cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp_path, proc, time.perf_counter() - t0


def test_two_processes_log_once_export_once_and_match_one_process(two_process_run):
    tmp_path, proc, two_s = two_process_run
    from train import cross_encoder

    t0 = time.perf_counter()
    one = cross_encoder.run(compose("train_cross_encoder", _overrides(tmp_path, "one", batch_size=4)))
    one_s = time.perf_counter() - t0

    # rank 0 alone printed the held-out metrics, logged each evaluation once and exported once
    assert proc.stdout.count('"test/synth/selector/recall_all@2"') == 1, proc.stdout
    evals = [m for m in _metrics(tmp_path / "two") if any(k.startswith("eval/") for k in m)]
    assert [m["step"] for m in evals] == [0, 2, 4]
    assert [m["step"] for m in _metrics(tmp_path / "two") if "train/loss" in m] == [1, 2, 3, 4]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("two_export")) == ["two_export"]
    card = json.loads((tmp_path / "two_export" / "card.json").read_text())
    assert card["training"]["device"] == "cpu x 2" and card["training"]["steps"] == 4

    # the same numbers as one process: validation at every evaluation, the training loss, the held-out metrics
    one_evals = [m for m in _metrics(tmp_path / "one") if any(k.startswith("eval/") for k in m)]
    for a, b in zip(one_evals, evals, strict=True):
        assert a.keys() == b.keys() and all(b[k] == pytest.approx(v, abs=TOL) for k, v in a.items())
    one_loss = [m["train/loss"] for m in _metrics(tmp_path / "one") if "train/loss" in m]
    two_loss = [m["train/loss"] for m in _metrics(tmp_path / "two") if "train/loss" in m]
    assert two_loss == pytest.approx(one_loss, abs=TOL)
    assert evals[-1]["eval/recall_all@2"] > evals[0]["eval/recall_all@2"]  # it learned: not two untouched models compared
    two = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert two["test"] == pytest.approx(one["test"], abs=TOL)
    print(f"1 process: {one_s:.1f} s, 2 processes (torchrun): {two_s:.1f} s; held-out {two['test']}")


def _kill_launch(proc: subprocess.Popen) -> None:
    """SIGKILL torchrun and its workers at once, as a lost node or an OOM killer would. torchrun starts each worker
    in a session of its own, so killing torchrun's process group alone would leave them training."""
    import psutil  # a dependency of accelerate

    workers = psutil.Process(proc.pid).children(recursive=True)
    for pgid in {proc.pid} | {os.getpgid(w.pid) for w in workers}:
        os.killpg(pgid, signal.SIGKILL)
    proc.wait(timeout=30)
    _, alive = psutil.wait_procs(workers, timeout=30)
    assert not alive, f"workers still running after SIGKILL: {alive}"  # none goes on writing into out_dir


def test_a_two_process_run_killed_after_a_save_resumes_to_the_uninterrupted_numbers(two_process_run):
    tmp_path = two_process_run[0]
    out, state = tmp_path / "killed", tmp_path / "killed" / "last" / "trainer_state.json"
    # last/ appears only by renaming last.tmp once every rank's files and trainer_state.json are in it: a complete save
    t0 = time.perf_counter()
    with open(tmp_path / "killed.log", "w") as log:
        proc = subprocess.Popen(_torchrun(tmp_path, "killed"), cwd=ROOT, env=_env(), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        while not state.exists():
            assert proc.poll() is None and time.perf_counter() - t0 < 240, (tmp_path / "killed.log").read_text()[-3000:]
            time.sleep(0.01)
        _kill_launch(proc)
    killed_s = time.perf_counter() - t0
    saved = json.loads(state.read_text())["step"]
    before = _metrics(out)  # what the killed run logged, up to the moment it died
    assert saved == 2 and not (out / "summary.json").exists()
    assert not (tmp_path / "killed_export").exists()  # killed before the end: nothing exported yet

    t0 = time.perf_counter()
    proc = subprocess.run(_torchrun(tmp_path, "killed"), cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=240)
    resumed_s = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resumed from {out / 'last'} at step 2" in proc.stdout  # Hydra logs to stdout

    # metrics.jsonl is appended to: the killed run's lines stay, the resumed run's follow. Killed right after the
    # step-2 save, it can have logged at most the loss of step 3, which the resumed run logs again; every
    # evaluation is in the log once.
    ref, after = _metrics(tmp_path / "two"), _metrics(out)
    assert after[: len(before)] == before
    kept = [m for m in before if m["step"] <= saved]
    assert all(m["step"] == saved + 1 and "train/loss" in m for m in before if m["step"] > saved)
    assert [m["step"] for m in after if any(k.startswith("eval/") for k in m)] == [0, 2, 4]
    for a, b in zip(ref, kept + after[len(before):], strict=True):  # the same lines and numbers as without the kill
        assert a["step"] == b["step"] and a.keys() == b.keys()
        assert all(b[k] == pytest.approx(v, abs=TOL) for k, v in a.items() if k != "step")
    two, resumed = (json.loads((d / "summary.json").read_text()) for d in (tmp_path / "two", out))
    assert resumed["test"] == pytest.approx(two["test"], abs=TOL)
    assert resumed["train"]["steps"] == 4 and len(resumed["train"]["history"]) == 3
    # one export, by rank 0 of the resumed run, of the model trained to step 4
    assert proc.stdout.count('"test/synth/selector/recall_all@2"') == 1, proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("killed_export")) == ["killed_export"]
    card = json.loads((tmp_path / "killed_export" / "card.json").read_text())
    assert card["training"]["device"] == "cpu x 2" and card["training"]["steps"] == 4
    print(f"2 processes killed after the step-2 save: {killed_s:.1f} s, resumed to step 4: {resumed_s:.1f} s")


def test_shards_cover_the_global_batch_in_one_process_order():
    from lightmem.training.distributed import shard

    order = list(range(11))
    ranks = [shard(order, r, 2) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) == 6  # padded with the first example: both ranks take 6 micro-steps
    for m in range(3):  # micro-batch m of 2 per rank together = micro-batch m of 4 in one process
        assert sorted(ranks[0][2 * m : 2 * m + 2] + ranks[1][2 * m : 2 * m + 2]) == sorted((order + [0])[4 * m : 4 * m + 4])


def test_the_ranker_refuses_to_run_under_a_multi_process_launcher(monkeypatch):
    from lightmem.training.distributed import SingleProcessOnly
    from lightmem.training.ranker import train_ranker

    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(SingleProcessOnly, match="python train/ranker.py"):
        train_ranker(compose("train_ranker", ["model=trees"]))
