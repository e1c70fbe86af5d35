"""NeuRD's hyper-parameters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rl_gpu.core.schema import check_fields

MAX_AVERAGE_STEPS = 1000
"""Upper bound of --average-steps."""


@dataclass(frozen=True)
class NeuRDConfig:
    """NeuRD hyper-parameters; --learning-rate is the policy network's plain gradient step (not Adam's: the
    update must stay proportional to the advantages)."""

    logit_threshold: float = 4.0
    """NeuRD's threshold: an advantage no longer pushes a logit that is already this far above (or below) the
    policy's mean logit at its information state"""
    average: Literal["linear", "uniform"] = "linear"
    """weight of iterate t in the average policy, times the acting seat's own reach of each information state:
    t (CFR+'s linear averaging) or 1"""
    average_lr: float = 1e-3
    """Adam learning rate of the average-policy network (the policy that is validated, saved and exported)"""
    average_steps: int = 1
    """Adam steps of the average-policy network towards the average policy per iteration"""

    def __post_init__(self) -> None:
        label = lambda name: f"NeuRD hyper-parameter {name}"  # noqa: E731
        check_fields(self, label=label)
        bad = {"logit_threshold": self.logit_threshold > 0, "average_lr": self.average_lr > 0,
               "average_steps": 1 <= self.average_steps <= MAX_AVERAGE_STEPS}
        wrong = [f"{name}={getattr(self, name)!r}" for name, ok in bad.items() if not ok]
        if wrong:
            raise ValueError(f"invalid NeuRD hyper-parameters: {', '.join(wrong)} (logit_threshold and average_lr "
                             f"> 0, average_steps in [1, {MAX_AVERAGE_STEPS}])")

    def storage_elements(self, num_envs: int, num_steps: int, obs_size: int, action_size: int,
                         hidden_sizes: tuple[int, ...]) -> int:
        """No rollout or replay storage: the game tree is small by construction (at most
        :data:`rl_gpu.envs.game_tree.MAX_NODES` nodes)."""
        return 0
