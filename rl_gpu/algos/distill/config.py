"""Distillation's hyper-parameters."""

from __future__ import annotations

from dataclasses import dataclass

from rl_gpu.core.schema import check_fields


@dataclass(frozen=True)
class DistillConfig:
    """A student learns to act as a trained teacher does, on the student's own rollouts (DAgger): each step the
    teacher labels the state the student reached, and the student maximises the likelihood of the teacher's
    actions. --learning-rate is the student's Adam rate."""

    teacher: str = ""
    """the teacher's checkpoint (RUN/seed-N/best.pt): trained on an environment whose observation of the same
    state the student's lacks (privileged values, velocities, clean sensors)"""
    update_epochs: int = 4
    """passes over each rollout's (observation, teacher action) pairs"""
    num_minibatches: int = 4
    """minibatches per pass"""
    max_grad_norm: float = 1.0
    """the student's gradient is clipped to this global norm"""

    def __post_init__(self) -> None:
        check_fields(self, label=lambda name: f"distill hyper-parameter {name}")
        bad = [f"{name}={getattr(self, name)!r}" for name, ok in (("update_epochs", self.update_epochs >= 1),
                                                                 ("num_minibatches", self.num_minibatches >= 1),
                                                                 ("max_grad_norm", self.max_grad_norm > 0)) if not ok]
        if bad:
            raise ValueError(f"invalid distill hyper-parameters: {', '.join(bad)} (epochs and minibatches >= 1, "
                             "max_grad_norm > 0)")
