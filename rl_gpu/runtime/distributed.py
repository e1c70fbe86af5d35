"""Data-parallel helpers over ``torch.distributed``: joining the process group ``torchrun`` sets up, which process
this is, and the reductions that make every rank take the same step.

:func:`process_group` joins (gloo on the CPU, NCCL on ``cuda:LOCAL_RANK``) when the process was started by
``torchrun`` and leaves a plain run alone. With no process group every helper is the identity, so algorithms call
them unconditionally. Under ``torchrun`` each rank collects its own rollouts; before the gradient is clipped the
gradients are averaged (:func:`all_reduce_grads_`), so the clip sees the global gradient's norm; the approximate
KL that decides early stopping is averaged before it is compared (:func:`all_reduce_mean`), so no rank stops while
another goes on; running statistics merge every rank's batch (:func:`merge_moments`). Host-side agreements (stop
signals, evaluation episodes, checkpoint state) go over gloo even when the gradients go over NCCL.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from rl_gpu.core.errors import UsageError


def is_distributed() -> bool:
    """True inside an initialised process group of more than one process."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    """This process's index (0 without a process group)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def world_size() -> int:
    """Number of processes (1 without a process group)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def is_main_process() -> bool:
    """The process that writes files (rank 0)."""
    return rank() == 0


def all_reduce_mean(x: Tensor) -> Tensor:
    """The mean of ``x`` over every rank (a new tensor; ``x`` itself without a process group)."""
    if not is_distributed():
        return x
    out = x.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out / dist.get_world_size()


def all_reduce_grads_(grads: Sequence[Tensor]) -> None:
    """Average gradients over every rank in place, as one flat all-reduce (call before clipping)."""
    if not is_distributed() or not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat /= dist.get_world_size()
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def broadcast_parameters_(tensors: Sequence[Tensor], src: int = 0) -> None:
    """Give every rank rank ``src``'s values (parameters and buffers at the start of training)."""
    if not is_distributed():
        return
    for t in tensors:
        dist.broadcast(t, src)


def all_agree(flag: bool) -> bool:
    """True on every rank when ``flag`` is True on any rank (a stop request agreed at an update boundary)."""
    if not is_distributed():
        return flag
    t = torch.tensor([1.0 if flag else 0.0])
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=_control)
    return bool(t.item() > 0)


class RanksLost(RuntimeError):
    """Another process of the run failed, was killed or stopped answering: this one stops rather than wait."""


TIMEOUT_ENV = "RL_GPU_DIST_TIMEOUT"
"""Seconds a collective may wait for the other processes before it fails (default :data:`DEFAULT_TIMEOUT_S`).
A process that dies is noticed at once (its sockets close); the timeout is for one that hangs."""

DEFAULT_TIMEOUT_S = 1800

TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
"""What ``torchrun`` sets in every process it starts (the ``env://`` rendezvous reads them)."""

_control: dist.ProcessGroup | None = None
"""A gloo group over the same processes when the main group is NCCL: small host-side agreements (stop
requests, evaluation episodes, checkpoint state) go through it without touching the GPUs."""


def launched_by_torchrun() -> bool:
    """Whether this process was started by ``torchrun`` (or anything else that sets its variables)."""
    return all(name in os.environ for name in TORCHRUN_VARIABLES)


def _timeout() -> datetime.timedelta:
    raw = os.environ.get(TIMEOUT_ENV, str(DEFAULT_TIMEOUT_S))
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < 10**7:
        raise UsageError(f"{TIMEOUT_ENV}={raw!r}: give the seconds a collective may wait, a number above 0")
    return datetime.timedelta(seconds=seconds)


@contextlib.contextmanager
def process_group(device: str) -> Iterator[None]:
    """Join the process group ``torchrun`` set up (the identity for a plain run): gloo when training on the CPU,
    NCCL on ``cuda:LOCAL_RANK`` (made the current device, so ``torch.device("cuda")`` is this process's GPU).

    ``device`` is the run's ``--device`` (``auto``, ``cpu`` or ``cuda``). On a normal exit every process waits
    for the others (so no process ends while rank 0 still writes), then the group is destroyed. A failed
    collective (a process that died or timed out) is raised as :class:`RanksLost`.
    """
    global _control
    if not launched_by_torchrun() or (dist.is_available() and dist.is_initialized()):
        yield
        return
    if not dist.is_available():
        raise UsageError("launched by torchrun, but this build of torch has no torch.distributed")
    local_rank = int(os.environ["LOCAL_RANK"])
    cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if cuda:
        count = torch.cuda.device_count()
        if local_rank >= count:
            raise UsageError(f"process {local_rank} on this machine has no GPU of its own: {count} visible; "
                             f"start at most {count} processes per machine (--nproc-per-node)")
        torch.cuda.set_device(local_rank)
    backend = "nccl" if cuda else "gloo"
    timeout = _timeout()
    dist.init_process_group(backend, timeout=timeout)
    _control = dist.new_group(backend="gloo", timeout=timeout) if backend == "nccl" else None
    finished = False
    try:
        yield
        finished = True
    except RuntimeError as e:
        if _from_collective(e):
            raise RanksLost(_lost_message(e)) from None
        raise
    finally:
        try:
            if finished:
                barrier()
        except RuntimeError as e:
            raise RanksLost(_lost_message(e)) from None
        finally:
            _control = None
            dist.destroy_process_group()


def _from_collective(error: BaseException) -> bool:
    """Whether ``error`` was raised inside ``torch.distributed`` (gloo reports a dead peer as a plain
    ``RuntimeError``; a bug elsewhere keeps its traceback)."""
    if isinstance(error, dist.DistError):
        return True
    tb = error.__traceback__
    while tb is not None:
        if f"torch{os.sep}distributed{os.sep}" in tb.tb_frame.f_code.co_filename:
            return True
        tb = tb.tb_next
    return False


def _lost_message(error: BaseException) -> str:
    first = str(error).strip().splitlines()[0][:300] if str(error).strip() else type(error).__name__
    return (f"process {rank()} of {world_size()} lost contact with the others ({first}); another process failed, "
            f"was killed or did not answer within {TIMEOUT_ENV}={_timeout().total_seconds():g} s. This process "
            "stops; the last checkpoint rank 0 wrote is intact (continue with --resume under the same number of "
            "processes)")


def barrier() -> None:
    """Wait until every process gets here (host-side; nothing waits for a GPU)."""
    if is_distributed():
        dist.barrier(group=_control)


def merge_moments(count: Tensor, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The count, mean and (population) variance of every rank's data together, from each rank's own: ``count``
    0-dim, ``mean`` and ``var`` ``[S]``, float64. Identity without a process group.

    Chan's parallel formula over the K ranks' ``(n_k, m_k, v_k)``::

        n = sum n_k,   m = sum n_k m_k / n,   v = (sum n_k v_k + sum n_k (m_k - m)^2) / n

    which equals the statistics of the concatenated data (up to rounding). One all-gather; every rank computes
    the same result from the same gathered values.
    """
    if not is_distributed():
        return count, mean, var
    packed = torch.cat([count.reshape(1), mean, var]).double()
    parts = [torch.empty_like(packed) for _ in range(world_size())]
    dist.all_gather(parts, packed)
    table = torch.stack(parts)  # [K, 1 + 2S]
    size = mean.shape[0]
    n_k, m_k, v_k = table[:, :1], table[:, 1:1 + size], table[:, 1 + size:]
    n = n_k.sum()
    safe = n.clamp(min=1)
    m = (n_k * m_k).sum(0) / safe
    v = ((n_k * v_k).sum(0) + (n_k * (m_k - m).square()).sum(0)) / safe
    return n.to(count.dtype), m.to(mean.dtype), v.to(var.dtype)


def agree_signal(signum: int | None) -> int | None:
    """The stop signal every rank acts on: the largest one any rank received (None when none did)."""
    if not is_distributed():
        return signum
    t = torch.tensor([float(signum or 0)])
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=_control)
    return int(t.item()) or None


def all_gather_objects(obj: Any) -> list[Any]:
    """Every rank's ``obj`` (picklable; tensors on the CPU), in rank order: ``[obj]`` without a process group."""
    if not is_distributed():
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj, group=_control)
    return out


def gather_objects(obj: Any) -> list[Any] | None:
    """Every rank's ``obj`` in rank order on rank 0, None elsewhere: ``[obj]`` without a process group."""
    if not is_distributed():
        return [obj]
    out: list[Any] | None = [None] * world_size() if rank() == 0 else None
    dist.gather_object(obj, out, dst=0, group=_control)
    return out


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` on every rank (picklable; tensors on the CPU)."""
    if not is_distributed():
        return obj
    box = [obj if rank() == src else None]
    dist.broadcast_object_list(box, src=src, group=_control)
    return box[0]
