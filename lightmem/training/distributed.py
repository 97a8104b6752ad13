"""Data-parallel training over N processes (``torchrun --nproc_per_node N``, ``accelerate launch --multi_gpu``):
the few collective steps the loop and the trainers take, each a no-op in a single process.

One code path: a 1-process run calls the same functions, which then do nothing (``world()`` is ``(0, 1)``). The
launcher's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``) says whether
there are other processes; rank 0 is the one that logs, evaluates, saves, exports and prints.
"""
from __future__ import annotations

import contextlib
import datetime
import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")

# How long a rank waits at a barrier or broadcast: the other ranks wait while rank 0 evaluates, prepares data or
# scores held-out sets, which can take far longer than torch's 10-30 minute default on a CPU.
TIMEOUT = datetime.timedelta(hours=4)


class SingleProcessOnly(RuntimeError):
    """A trainer that has no data-parallel loop was started under a multi-process launcher."""


def world() -> tuple[int, int]:
    """``(rank, world_size)`` of this process: the process group's once it is up, the launcher's environment before."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def is_main() -> bool:
    """Whether this is rank 0, the process that logs, saves, exports and prints."""
    return world()[0] == 0


def init(cpu: bool = False) -> None:
    """Join the launcher's process group (gloo on CPU, nccl on CUDA) when ``WORLD_SIZE`` > 1; idempotent.

    Other ranks log warnings only, so a run's log and progress bar come from rank 0.
    """
    if int(os.environ.get("WORLD_SIZE", 1)) <= 1 or dist.is_initialized():
        return
    use_cuda = torch.cuda.is_available() and not cpu
    if use_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend="nccl" if use_cuda else "gloo", timeout=TIMEOUT)
    if not is_main():
        logging.getLogger().setLevel(logging.WARNING)


def close() -> None:
    """Leave the process group (what ``init`` joined), so the launcher sees a clean exit."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    """Wait until every rank is here."""
    if world()[1] > 1:
        dist.barrier()


def shard(items: Sequence[T], rank: int, world_size: int) -> list[T]:
    """This rank's share of ``items``: every ``world_size``-th from ``rank``, after repeating the first few so that
    every rank holds as many (each rank then takes as many steps, and no rank waits forever in an all-reduce).
    Micro-batch ``m`` of the ranks together holds what micro-batch ``m`` of one process with a ``world_size`` times
    larger batch holds."""
    items = list(items)
    items += items[: -len(items) % world_size]
    return items[rank::world_size]


def all_reduce_mean(value: torch.Tensor) -> torch.Tensor:
    """The mean of ``value`` over the ranks (``value`` itself in one process)."""
    if world()[1] == 1:
        return value
    out = value.detach().clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out / world()[1]


def broadcast(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank (a picklable object: metrics, a flag)."""
    if world()[1] == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


@contextlib.contextmanager
def main_first() -> Iterator[None]:
    """Rank 0 runs the block, then the others do (e.g. rank 0 writes a cache the others then read)."""
    if not is_main():
        barrier()
    yield
    if is_main():
        barrier()


def single_process_only(script: str, why: str) -> None:
    """Refuse to run under a multi-process launcher.

    Raises:
        SingleProcessOnly: ``WORLD_SIZE`` > 1.
    """
    if world()[1] > 1:
        raise SingleProcessOnly(f"{script} runs in one process ({why}): start it with `python {script}`, not torchrun or "
                                "accelerate launch")
