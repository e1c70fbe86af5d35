"""Optimiser pieces every algorithm shares: Adam with a device-held learning rate, multi-tensor gradient
clipping, an optimiser step that can be undone on the device, and a state load that keeps the tensors compiled
code and CUDA graphs already read."""

from __future__ import annotations

import torch
from torch import Tensor

from rl_gpu.algos.schedules import CONSTANT, LINEAR, LRSchedule
from rl_gpu.runtime.distributed import all_reduce_grads_


def make_adam(params, learning_rate: Tensor, device: torch.device, eps: float = 1e-5) -> torch.optim.Adam:
    """Adam (``eps`` 1e-5 by default, PPO's) with the learning rate as a device tensor (updated in place, never
    re-traced): ``capturable`` on CUDA (its step counters live on the device, so it can be captured in a CUDA
    graph and never reads back to the host), fused on CPU (much faster than the per-tensor loop for small
    networks)."""
    if device.type == "cuda":
        return torch.optim.Adam(params, lr=learning_rate, eps=eps, capturable=True, foreach=True)
    if device.type == "cpu":
        return torch.optim.Adam(params, lr=learning_rate, eps=eps, fused=True)
    return torch.optim.Adam(params, lr=float(learning_rate), eps=eps)


def optimizer_tensors(optimizer: torch.optim.Optimizer, device: torch.device) -> list[Tensor]:
    """Every parameter and optimiser-state tensor on ``device`` (what one optimiser step may change)."""
    out = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            out.append(p.data)
            out.extend(v for v in optimizer.state.get(p, {}).values()
                       if isinstance(v, Tensor) and v.device == device)
    return out


def clip_grad_norm(grads: list[Tensor], max_norm: float) -> Tensor:
    """``nn.utils.clip_grad_norm_`` (L2, scale by ``max_norm / (norm + 1e-6)`` when that is below 1) in four
    multi-tensor operations: torch's version loops over the tensors on CPU."""
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    torch._foreach_mul_(grads, (max_norm / (norm + 1e-6)).clamp(max=1.0))
    return norm


def clip_grad_norms(groups: list[list[Tensor]], max_norm: float) -> Tensor:
    """:func:`clip_grad_norm` of the gradients of every group of parameters (a population member's) at once,
    each group by its own norm; returns the ``[G]`` norms before clipping. The groups hold the same number of
    parameters, each with a gradient. The per-tensor norms and the scaling are :func:`clip_grad_norm`'s
    operations, done once for all groups."""
    flat = [p.grad for group in groups for p in group]
    norms = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(flat)).view(len(groups), -1), dim=1)
    scales = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    torch._foreach_mul_(flat, [scale for scale, group in zip(scales.unbind(), groups) for _ in group])
    return norms


def fused_adam_ready(optimizer: torch.optim.Optimizer) -> bool:
    """``optimizer`` is :func:`make_adam`'s CPU form (fused Adam, one group, plain Adam's options) and has taken a
    step (its state exists), so :func:`fused_adam_steps` can step it."""
    if not isinstance(optimizer, torch.optim.Adam) or len(optimizer.param_groups) != 1:
        return False
    group = optimizer.param_groups[0]
    return (bool(group.get("fused")) and not group["amsgrad"] and not group["maximize"]
            and not group.get("differentiable") and not group.get("decoupled_weight_decay")
            and all(p.device.type == "cpu" and p.grad is not None and optimizer.state.get(p)
                    for p in group["params"]))


def fused_adam_steps(optimizers: list[torch.optim.Optimizer]) -> None:
    """``optimizer.step()`` of each :func:`fused_adam_ready` optimiser (each with its own learning rate): the
    same fused kernel on the same tensors, with the step counters of all advanced in one operation. For small
    networks the Python around ``step()`` costs several times the kernel."""
    steps, calls = [], []
    for optimizer in optimizers:
        group = optimizer.param_groups[0]
        params = group["params"]
        state = [optimizer.state[p] for p in params]
        steps += [s["step"] for s in state]
        calls.append((params, [p.grad for p in params], [s["exp_avg"] for s in state],
                      [s["exp_avg_sq"] for s in state], [s["step"] for s in state], group))
    torch._foreach_add_(steps, 1)
    for params, grads, exp_avgs, exp_avg_sqs, step, group in calls:
        beta1, beta2 = group["betas"]
        with torch.no_grad():
            torch._fused_adam_(params, grads, exp_avgs, exp_avg_sqs, [], step, amsgrad=False, lr=group["lr"],
                               beta1=float(beta1), beta2=float(beta2), weight_decay=group["weight_decay"],
                               eps=group["eps"], maximize=False, grad_scale=None, found_inf=None)


def clip_global_grad_norm(params: list[Tensor], max_norm: float) -> Tensor:
    """Average the gradients over every rank (a no-op in a single process), then clip them by their global
    norm; returns the norm before clipping. Averaging first makes every rank clip the same global gradient."""
    grads = [p.grad for p in params if p.grad is not None]
    all_reduce_grads_(grads)
    return clip_grad_norm(grads, max_norm)


def undoable_step(optimizer: torch.optim.Optimizer, params: list[Tensor], keep: Tensor | None) -> None:
    """``optimizer.step()``, undone on the device where ``keep`` (0-dim bool) is False: parameters and every
    optimiser-state tensor on ``keep``'s device are restored. No host synchronisation."""
    # Before the optimiser's first step it has no state to restore, and that step is never undone.
    if keep is None or any(not optimizer.state.get(p) for p in params):
        optimizer.step()
        return
    # A CPU-held step counter of a non-capturable optimiser on CUDA cannot be restored without a host read;
    # it is left counting (only Adam's bias correction sees it). make_adam's optimiser is capturable there.
    tensors = optimizer_tensors(optimizer, keep.device)
    saved = [t.clone() for t in tensors]
    optimizer.step()
    for t, old in zip(tensors, saved):
        t.copy_(torch.where(keep, t, old))


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float | Tensor) -> None:
    """Write ``lr`` (a number or a 0-dim tensor on the optimiser's device) into every group: in place into a
    device tensor, so no re-tracing and, for a tensor ``lr``, no host synchronisation."""
    for group in optimizer.param_groups:
        if isinstance(group["lr"], Tensor):
            group["lr"].copy_(lr) if isinstance(lr, Tensor) else group["lr"].fill_(lr)
        else:
            group["lr"] = float(lr)


class LearningRateSchedule:
    """What an algorithm's learning rate does over training, for a class holding ``optimizer``,
    ``initial_learning_rate`` and ``anneal_lr``; ``lr_schedule`` (:class:`~rl_gpu.algos.schedules.LRSchedule`,
    set by :meth:`~rl_gpu.algos.registry.AlgorithmSpec.build` from ``Setup.lr_schedule``) replaces ``anneal_lr``
    when given."""

    optimizer: torch.optim.Optimizer
    initial_learning_rate: float
    anneal_lr: bool
    lr_schedule: LRSchedule | None = None

    @property
    def schedule(self) -> LRSchedule:
        """The schedule in force: ``lr_schedule``, else linear with ``anneal_lr``, else constant."""
        if self.lr_schedule is not None:
            return self.lr_schedule
        return LINEAR if self.anneal_lr else CONSTANT

    def set_learning_rate(self, lr: float | Tensor) -> None:
        """Write ``lr`` into the device tensor Adam reads (no re-tracing, no host synchronisation)."""
        set_learning_rate(self.optimizer, lr)

    def set_progress(self, fraction: float | Tensor) -> None:
        """A schedule that follows progress sets the learning rate to ``initial * factor(fraction)``
        (``fraction`` a number or a 0-dim float64 tensor on the device)."""
        schedule = self.schedule
        if schedule.follows_progress:
            self.set_learning_rate(self.initial_learning_rate * schedule.factor(fraction))


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict, lr: Tensor) -> None:
    """Load ``state`` into ``optimizer`` keeping its flags, its learning-rate tensor ``lr`` and (where it already
    had state) its state tensors, with the saved values copied in: compiled units and captured CUDA graphs read
    those very tensors."""
    flags = [{k: g[k] for k in ("foreach", "fused", "capturable") if k in g} for g in optimizer.param_groups]
    held = {p: dict(s) for p, s in optimizer.state.items()}
    optimizer.load_state_dict(state)
    for group, own in zip(optimizer.param_groups, flags):
        saved_lr = group["lr"]
        group.update(own)
        group["lr"] = lr
        if isinstance(saved_lr, Tensor):
            lr.copy_(saved_lr)
        else:
            lr.fill_(saved_lr)
        on_device = group.get("capturable") or group.get("fused")
        for p in group["params"]:
            loaded = optimizer.state.get(p, {})
            for name, value in list(loaded.items()):
                if not isinstance(value, Tensor):
                    continue
                if name == "step":
                    value = value.to(device=p.device if on_device else "cpu", dtype=torch.float32)
                old = held.get(p, {}).get(name)
                if isinstance(old, Tensor) and old.shape == value.shape and old.device == value.device:
                    old.copy_(value)
                    value = old
                loaded[name] = value
