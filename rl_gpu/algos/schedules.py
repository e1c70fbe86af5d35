"""Schedules of the learning rate and of PPO's entropy coefficient over training, as device-tensor maths.

``fraction`` is training progress in ``[0, 1]`` (steps or updates done over the budget): a Python number, or a
0-dim tensor on the device (a step budget is counted there), in which case every value below stays a device
tensor, written in place into the optimiser's learning-rate tensor: no host read, no re-trace of compiled code.

Learning-rate schedules (``lr = initial * factor(fraction)``):

- ``constant``: 1.
- ``linear``: ``1 - f`` (CleanRL's ``anneal_lr``).
- ``cosine``: ``0.5 (1 + cos(pi f))`` (``CosineAnnealingLR`` over the whole run, down to 0).
- ``step``: ``gamma ** floor(f / every)`` (``StepLR``, its step a fraction of the run).
- ``adaptive-kl``: no function of progress. After each PPO minibatch's forward pass, before its optimiser step,
  the rate follows the minibatch's KL to the rollout's policy (rsl_rl's rule): divided by 1.5 when the KL is above
  twice ``desired_kl``, multiplied by 1.5 when it is below half of it, kept within ``[min_lr, max_lr]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where it is used: the algorithm registry reads LR_SCHEDULES without it
    from torch import Tensor

LR_SCHEDULES = ("constant", "linear", "cosine", "step", "adaptive-kl")
"""The ``--lr-schedule`` choices."""


def _floor(x: float | Tensor) -> float | Tensor:
    return x.floor() if hasattr(x, "floor") else float(math.floor(x))


def _cos(x: float | Tensor) -> float | Tensor:
    return x.cos() if hasattr(x, "cos") else math.cos(x)


@dataclass(frozen=True)
class LRSchedule:
    """How the learning rate moves over training (module docstring)."""

    kind: str = "constant"
    step_every: float = 0.25
    """``step``: the fraction of training between two drops"""
    step_gamma: float = 0.5
    """``step``: the factor of each drop"""
    desired_kl: float = 0.01
    """``adaptive-kl``: the KL per minibatch the rate is steered toward"""
    min_lr: float = 1e-5
    """``adaptive-kl``: the lowest rate"""
    max_lr: float = 1e-2
    """``adaptive-kl``: the highest rate"""

    def __post_init__(self) -> None:
        if self.kind not in LR_SCHEDULES:
            raise ValueError(f"--lr-schedule must be one of {', '.join(LR_SCHEDULES)}, got {self.kind!r}")
        if not 0 < self.step_every <= 1:
            raise ValueError(f"--lr-step-every is a fraction of training in (0, 1], got {self.step_every!r}")
        if not 0 < self.step_gamma <= 1:
            raise ValueError(f"--lr-step-gamma must be in (0, 1], got {self.step_gamma!r}")
        if not 0 < self.desired_kl <= 1:
            raise ValueError(f"--desired-kl is a KL per minibatch in (0, 1] (rsl_rl uses 0.01), got "
                             f"{self.desired_kl!r}")
        if not 0 < self.min_lr <= self.max_lr:
            raise ValueError(f"adaptive-kl bounds must satisfy 0 < min_lr <= max_lr, got {self.min_lr!r}, "
                             f"{self.max_lr!r}")

    @property
    def follows_progress(self) -> bool:
        """The rate is a function of training progress (set before each iteration)."""
        return self.kind in ("linear", "cosine", "step")

    def factor(self, fraction: float | Tensor) -> float | Tensor:
        """The learning rate over its initial value at progress ``fraction``."""
        if self.kind == "linear":
            return 1.0 - fraction
        if self.kind == "cosine":
            return 0.5 * (1.0 + _cos(math.pi * fraction))
        if self.kind == "step":
            # The small epsilon keeps 0.5 / 0.25 from landing just under 2 in floating point.
            return self.step_gamma ** _floor(fraction / self.step_every + 1e-9)
        return 1.0


CONSTANT, LINEAR = LRSchedule("constant"), LRSchedule("linear")


def adapt_to_kl(lr: Tensor, kl: Tensor, schedule: LRSchedule) -> Tensor:
    """rsl_rl's adaptive rule: the next learning rate (0-dim tensor) from the current one and a minibatch's KL."""
    import torch

    lower = torch.clamp(lr / 1.5, min=schedule.min_lr)
    higher = torch.clamp(lr * 1.5, max=schedule.max_lr)
    return torch.where(kl > 2.0 * schedule.desired_kl, lower,
                       torch.where((kl < 0.5 * schedule.desired_kl) & (kl > 0.0), higher, lr))


def linear_value(start: float, end: float, fraction: float | Tensor) -> float | Tensor:
    """``start`` moved linearly to ``end`` at progress ``fraction`` (the entropy coefficient's schedule)."""
    return start + (end - start) * fraction
