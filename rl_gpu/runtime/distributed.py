"""Data-parallel helpers over ``torch.distributed``: which process this is, and the reductions an on-policy
update needs so that every rank takes the same step.

With no process group (a plain single-process run) every helper is the identity, so algorithms call them
unconditionally. Under ``torchrun`` each rank collects its own rollouts; before the gradient is clipped the
gradients are averaged (:func:`all_reduce_grads_`), so the clip sees the global gradient's norm, and the
approximate KL that decides early stopping is averaged before it is compared (:func:`all_reduce_mean`), so no
rank stops while another goes on.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import Tensor


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
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)
