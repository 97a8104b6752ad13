"""The training loop: accelerate for devices, gradient accumulation, evaluation every N steps,
early stopping, and resume from the last state after a kill.

The loop knows nothing of the task: a recipe hands it the examples, a batch builder, a
loss and an evaluation function. ``out_dir/last`` holds the resumable state (model,
optimizer, scheduler, RNG, position in the data); ``out_dir/best`` the best weights so far
(only the adapter and heads when the model is a peft model).

Under ``torchrun``/``accelerate launch`` with N processes the same loop runs on every rank: accelerate wraps the
model in DistributedDataParallel (gradients averaged over the ranks), each rank trains on its shard of every
epoch (``distributed.shard``), and rank 0 alone evaluates, logs, keeps ``best`` and writes ``last``; the others get
its metrics by broadcast, so every rank holds the same ``TrainState`` and stops at the same step.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from lightmem.metric_logger import MetricLogger
from lightmem.training import distributed

log = logging.getLogger(__name__)


@dataclass
class TrainSpec:
    epochs: float = 1.0
    max_steps: int | None = None  # optimizer steps; overrides epochs when set
    lr: float = 5e-4
    weight_decay: float = 0.01
    # The optimizer class and any settings of its own beyond lr and weight_decay, e.g.
    # optim.optimizer._target_=torch.optim.SGD +optim.optimizer.momentum=0.9
    optimizer: dict[str, Any] = field(default_factory=lambda: {"_target_": "torch.optim.AdamW"})
    warmup_ratio: float = 0.06
    batch_size: int = 8  # examples per micro-batch and process (a selector example is a whole group); the global
    # batch of an optimizer step is batch_size x grad_accum x the number of processes
    grad_accum: int = 1
    max_grad_norm: float = 1.0
    eval_every: int = 100  # optimizer steps
    patience: int = 3  # evaluations without improvement before stopping; 0 never stops early
    seed: int = 0
    mixed_precision: str = "no"  # no | fp16 | bf16 (GPU)
    cpu: bool = False  # force CPU even where CUDA is present
    resume: bool = True


@dataclass
class TrainResult:
    best: dict[str, float]
    steps: int
    epochs_done: float
    seconds: float
    seconds_per_epoch: float
    stopped_early: bool
    history: list[dict[str, float]]


def make_optimizer(spec: TrainSpec, params: list) -> torch.optim.Optimizer:
    """``spec.optimizer`` (a ``_target_`` node) over ``params`` at the spec's lr and weight decay."""
    from hydra.utils import instantiate

    opt = instantiate(dict(spec.optimizer), params, lr=spec.lr, weight_decay=spec.weight_decay)
    if not isinstance(opt, torch.optim.Optimizer):
        raise TypeError(f"optim.optimizer._target_={spec.optimizer.get('_target_')} is not a torch.optim.Optimizer")
    return opt


def _state_path(out: Path) -> Path:
    return out / "last" / "trainer_state.json"


@dataclass
class TrainState:
    """Where a run stands; saved beside the resumable state (``out_dir/last/trainer_state.json``)."""

    step: int = 0  # optimizer steps taken
    epoch: int = 0
    micro: int = 0  # micro-batches of the current epoch taken
    best: float = -math.inf  # the best value of the metric so far
    bad_evals: int = 0  # evaluations since it last improved
    history: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0  # training time before the last save


class Trainer:
    """One training run (a torchtune-style recipe): ``train`` loops over ``step``, ``evaluate`` and
    ``save``; everything it must remember between them is a ``TrainState``.

    Args:
        model: The model; its trainable parameters are optimised.
        examples: Training examples, shuffled per epoch.
        make_batch: A list of examples → tensors (given an RNG seeded per step, so sampled negatives
            are the same after a resume).
        loss_fn: (model, batch) → scalar loss.
        evaluate: Metrics of the unwrapped model in eval mode.
        metric: The metric to maximise; the weights that do are kept in ``out_dir/best``.
        out_dir: Where ``last`` (resumable state) and ``best`` go.
        spec: Optimisation and schedule settings.
        logger: Where training and evaluation metrics go.
    """

    def __init__(self, model: torch.nn.Module, examples: Sequence[Any],
                 make_batch: Callable[[Sequence[Any], random.Random], dict[str, Any]],
                 loss_fn: Callable[[torch.nn.Module, dict[str, Any]], torch.Tensor],
                 evaluate: Callable[[torch.nn.Module], dict[str, float]], metric: str, out_dir: str | Path,
                 spec: TrainSpec, logger: MetricLogger | None = None) -> None:
        from accelerate import Accelerator
        from accelerate.utils import DataLoaderConfiguration, set_seed

        if not examples:
            raise ValueError("no training examples: check the data paths and splits")
        self.examples, self.make_batch, self.loss_fn, self.eval_fn = examples, make_batch, loss_fn, evaluate
        self.metric, self.out, self.spec, self.logger = metric, Path(out_dir), spec, logger
        cpu = spec.cpu or not torch.cuda.is_available()
        distributed.init(cpu)
        # cpu=True where there is no CUDA: accelerate otherwise leaves a torchrun start on a CPU machine undistributed
        # (each rank would train alone). split_batches: the schedule below counts optimizer steps of the global batch,
        # so the scheduler steps once per step (accelerate's default steps it once per process).
        self.acc = acc = Accelerator(gradient_accumulation_steps=spec.grad_accum, mixed_precision=spec.mixed_precision,
                                     cpu=cpu, dataloader_config=DataLoaderConfiguration(split_batches=True))
        set_seed(spec.seed)
        self.micro_per_epoch = math.ceil(len(examples) / spec.batch_size / acc.num_processes)
        self.steps_per_epoch = max(1, self.micro_per_epoch // spec.grad_accum)
        self.total = total = spec.max_steps or max(1, round(self.steps_per_epoch * spec.epochs))
        self.params = [p for p in model.parameters() if p.requires_grad]
        opt = make_optimizer(spec, self.params)
        warm = max(1, int(spec.warmup_ratio * total))
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / warm, max(0.0, (total - s) / max(1, total - warm))))
        self.model, self.opt, self.sched = acc.prepare(model, opt, sched)
        self.state = TrainState()
        if spec.resume:
            self._finish_interrupted_save()
        if spec.resume and _state_path(self.out).exists():
            acc.load_state(str(self.out / "last"))
            self.state = TrainState(**json.loads(_state_path(self.out).read_text()))
            log.info("resumed from %s at step %d", self.out / "last", self.state.step)

    def _finish_interrupted_save(self) -> None:
        """A kill between the old checkpoint's removal and the new one's rename (``save``) leaves a complete
        ``last.tmp`` (its trainer_state.json is written last) and no ``last``: it becomes ``last``, so the run resumes
        from it instead of starting over."""
        tmp = self.out / "last.tmp"
        if self.acc.is_main_process and not (self.out / "last").exists() and (tmp / "trainer_state.json").exists():
            tmp.rename(self.out / "last")
        self.acc.wait_for_everyone()

    def step(self, batch: dict[str, Any]) -> torch.Tensor:
        """One micro-batch forward and backward; the optimizer steps when the accumulation is complete."""
        acc = self.acc
        batch = {k: v.to(acc.device) if torch.is_tensor(v) else v for k, v in batch.items()}
        with acc.accumulate(self.model):
            loss = self.loss_fn(self.model, batch)
            acc.backward(loss)
            if acc.sync_gradients:
                acc.clip_grad_norm_(self.params, self.spec.max_grad_norm)
            self.opt.step()
            self.sched.step()
            self.opt.zero_grad()
        return loss

    def evaluate(self) -> bool:
        """Evaluate (on rank 0, which tells the others), keep the best weights; True when patience has run out."""
        st, acc = self.state, self.acc
        unwrapped = acc.unwrap_model(self.model)
        metrics = None
        if acc.is_main_process:  # the numbers of a 1-process run: the whole validation set, the same weights
            unwrapped.eval()
            with torch.no_grad():
                metrics = self.eval_fn(unwrapped)
            unwrapped.train()
        metrics = distributed.broadcast(metrics)
        st.history.append({"step": st.step, **metrics})
        if self.logger and acc.is_main_process:
            self.logger.log_metrics({f"eval/{k}": v for k, v in metrics.items()}, step=st.step)
        score = metrics[self.metric]
        if score > st.best:
            st.best, st.bad_evals = score, 0
            if acc.is_main_process:
                shutil.rmtree(self.out / "best", ignore_errors=True)
                unwrapped.save_pretrained(str(self.out / "best"))
                (self.out / "best" / "metrics.json").write_text(json.dumps({"step": st.step, **metrics}, indent=2))
        else:
            st.bad_evals += 1
        log.info("step %d: %s (best %s %.4f)", st.step, metrics, self.metric, st.best)
        return self.spec.patience > 0 and st.bad_evals >= self.spec.patience

    def save(self) -> None:
        """The resumable state to ``out_dir/last``; a kill mid-save leaves the previous one intact."""
        acc, out = self.acc, self.out
        acc.wait_for_everyone()
        if acc.is_main_process:
            shutil.rmtree(out / "last.tmp", ignore_errors=True)
        acc.wait_for_everyone()  # no rank writes its RNG state into last.tmp before rank 0 has cleared it
        acc.save_state(str(out / "last.tmp"))  # rank 0 the weights and optimizer; every rank its RNG state
        acc.wait_for_everyone()  # every rank's files are in last.tmp before it becomes last
        if acc.is_main_process:
            (out / "last.tmp" / "trainer_state.json").write_text(json.dumps(dataclasses.asdict(self.state)))
            shutil.rmtree(out / "last", ignore_errors=True)
            (out / "last.tmp").rename(out / "last")

    def _epoch_order(self) -> list[int]:
        """This process's share of the epoch's shuffled examples (equal shards: every process takes the same steps)."""
        order = list(range(len(self.examples)))
        random.Random(self.spec.seed * 1_000_003 + self.state.epoch).shuffle(order)
        return distributed.shard(order, self.acc.process_index, self.acc.num_processes)

    def train(self, show_progress: bool = True) -> TrainResult:
        """Train until ``epochs``/``max_steps`` or early stop (from where a resumed run stood)."""
        st, spec, acc = self.state, self.spec, self.acc
        self.model.train()
        t_start = time.perf_counter() - st.seconds
        stopped = False
        bar = tqdm(total=self.total, initial=st.step, desc="train", disable=not (show_progress and acc.is_main_process))
        if st.step == 0 and not st.history:
            stopped = self.evaluate()  # the untrained baseline, so every run shows what training bought
        while st.step < self.total and not stopped:
            order = self._epoch_order()
            for m in range(st.micro, self.micro_per_epoch):
                rows = [self.examples[i] for i in order[m * spec.batch_size : (m + 1) * spec.batch_size]]
                loss = self.step(self.make_batch(rows, random.Random(hash((spec.seed, st.epoch, m)) & 0xFFFFFFFF)))
                st.micro = m + 1
                if not acc.sync_gradients:
                    continue
                st.step += 1
                bar.update(1)
                loss = distributed.all_reduce_mean(loss.detach())  # the global batch's loss, as one process logs it
                if self.logger and acc.is_main_process:
                    self.logger.log_metrics({"train/loss": float(loss), "train/lr": self.sched.get_last_lr()[0]},
                                            step=st.step)
                if st.step % spec.eval_every == 0 or st.step >= self.total:
                    st.seconds = time.perf_counter() - t_start
                    stopped = self.evaluate()
                    self.save()
                if stopped or st.step >= self.total:
                    break
            if st.micro >= self.micro_per_epoch:
                st.epoch, st.micro = st.epoch + 1, 0
        bar.close()
        seconds = time.perf_counter() - t_start
        epochs_done = st.step / self.steps_per_epoch
        best = next((h for h in st.history if h.get(self.metric) == st.best), {})
        return TrainResult(best, st.step, epochs_done, seconds, seconds / max(epochs_done, 1e-9), stopped, st.history)


def fit(
    model: torch.nn.Module,
    examples: Sequence[Any],
    make_batch: Callable[[Sequence[Any], random.Random], dict[str, Any]],
    loss_fn: Callable[[torch.nn.Module, dict[str, Any]], torch.Tensor],
    evaluate: Callable[[torch.nn.Module], dict[str, float]],
    metric: str,
    out_dir: str | Path,
    spec: TrainSpec,
    logger: MetricLogger | None = None,
    show_progress: bool = True,
) -> TrainResult:
    """Train until ``epochs``/``max_steps`` or early stop; keep the weights that maximise ``metric``
    (a ``Trainer`` run from start to end, or from where a killed one stopped)."""
    return Trainer(model, examples, make_batch, loss_fn, evaluate, metric, out_dir, spec, logger).train(show_progress)
