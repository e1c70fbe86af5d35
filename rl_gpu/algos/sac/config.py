"""SAC's hyper-parameters."""

from __future__ import annotations

from dataclasses import dataclass

from rl_gpu.algos.offpolicy.config import OffPolicyConfig


@dataclass(frozen=True)
class SACConfig(OffPolicyConfig):
    """SAC hyper-parameters (CleanRL's names); the learning rate (--learning-rate) drives the actor, the critics
    and the entropy coefficient."""

    alpha: float = 1.0
    """entropy coefficient: its initial value with --autotune, else fixed"""
    autotune: bool = True
    """tune the entropy coefficient so that the policy's entropy tracks --target-entropy"""
    target_entropy: float | None = None
    """entropy target of the normalised actions with --autotune; None: minus the number of action dimensions"""

    def __post_init__(self) -> None:
        self._check({"alpha": self.alpha > 0}, ", alpha > 0")
