"""TD3's hyper-parameters."""

from __future__ import annotations

from dataclasses import dataclass

from rl_gpu.algos.offpolicy.config import OffPolicyConfig


@dataclass(frozen=True)
class TD3Config(OffPolicyConfig):
    """TD3 hyper-parameters (CleanRL's names); noise scales are fractions of the action half-range."""

    learning_starts: int = 25_000
    """transitions collected with uniformly random actions, and no update made, before learning starts"""
    policy_noise: float = 0.2
    """target policy smoothing: std of the Gaussian noise added to the target actor's actions"""
    noise_clip: float = 0.5
    """target policy smoothing: the noise is clipped to [-noise_clip, noise_clip]"""
    policy_frequency: int = 2
    """delayed policy updates: the actor and the targets are updated once every this many critic updates"""
    exploration_noise: float = 0.1
    """std of the Gaussian noise added to the actor's actions while collecting"""

    def __post_init__(self) -> None:
        self._check({"policy_noise": self.policy_noise >= 0, "noise_clip": self.noise_clip >= 0,
                     "policy_frequency": self.policy_frequency >= 1,
                     "exploration_noise": self.exploration_noise >= 0},
                    ", policy_noise, noise_clip and exploration_noise >= 0, policy_frequency >= 1")
