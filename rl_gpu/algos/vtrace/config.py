"""APPO's and IMPALA's hyper-parameters: PPO's names, V-trace's truncation levels, and the defaults each paper uses."""

from __future__ import annotations

from dataclasses import dataclass

from rl_gpu.algos.ppo.config import PPOConfig


@dataclass(frozen=True)
class APPOConfig(PPOConfig):
    """APPO (Sample Factory's): PPO's clipped objective on V-trace advantages; the critic learns V-trace targets.
    Learning from the policy that collected (no lag) makes V-trace the on-policy lambda-return."""

    gae_lambda: float = 1.0
    """lambda of V-trace's traces (c_t = lambda * min(c_bar, ratio)); 1 is IMPALA's plain V-trace, and with no lag
    the targets are then the n-step returns"""
    rho_bar: float = 1.0
    """truncation of the importance weights in V-trace's targets and advantages (IMPALA's rho-bar)"""
    c_bar: float = 1.0
    """truncation of V-trace's traces (IMPALA's c-bar)"""
    decoupled_clip: bool = False
    """with a lagged rollout (--async), clip the ratio to the learner's policy as the update starts rather than to
    the collecting one (decoupled PPO, Hilton et al. 2021): the trust region around the policy that learns, the
    importance weight to the collecting policy carried by V-trace's advantages (rho_t); no effect without lag"""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("rho_bar", "c_bar"):
            if not getattr(self, name) > 0:
                raise ValueError(f"invalid {type(self).__name__.removesuffix('Config')} hyper-parameter: "
                                 f"{name}={getattr(self, name)!r} (V-trace's truncation levels are above 0)")


@dataclass(frozen=True)
class IMPALAConfig(APPOConfig):
    """IMPALA's V-trace actor-critic: the policy gradient rho_t * A_t * grad log pi (no clipping), the critic on
    V-trace targets, one pass over each rollout."""

    update_epochs: int = 1
    """passes over each rollout (IMPALA learns from each trajectory once)"""
    num_minibatches: int = 8
    """minibatches per pass, each one gradient step (IMPALA's learner steps on batches of trajectories as they
    arrive; one step per rollout of thousands of transitions learns slowly)"""
    norm_adv: bool = False
    """normalise advantages per minibatch (IMPALA does not)"""
    max_grad_norm: float = 40.0
    """clip the global gradient norm to this (IMPALA's 40)"""
