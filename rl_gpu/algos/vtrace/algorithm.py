"""APPO and IMPALA as algorithms: PPO's collection, storage and update loop with V-trace in place of GAE.

Shape legend: T = steps, N = environments.

Each update computes V-trace (:func:`~rl_gpu.data.vtrace.compute_vtrace`) once over the rollout, from the
importance ratios of the learner's policy as it is when the update starts to the policy that collected
(``log_rho``; :meth:`APPO.behaviour_gap`). Collected by that same policy (the synchronous loop: no lag),
``log_rho`` is exactly 0 and no forward pass is spent on it: the targets are the on-policy lambda-returns; with
``--async-collect`` the rollout is one version old and the ratios are measured. APPO then takes PPO's clipped
objective on V-trace's advantages (ratios to the collecting policy, as Sample Factory's APPO), IMPALA the plain
policy gradient ``rho_t A_t grad log pi`` (:func:`~rl_gpu.algos.vtrace.loss.impala_loss`).
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from rl_gpu.algos.base import Setup
from rl_gpu.algos.ppo.algorithm import PPO
from rl_gpu.algos.vtrace.config import APPOConfig
from rl_gpu.algos.vtrace.loss import impala_loss
from rl_gpu.data.rollout import Rollout
from rl_gpu.data.vtrace import compute_vtrace


class APPO(PPO):
    """PPO's clipped objective on V-trace advantages; the critic learns V-trace targets."""

    name = "appo"

    @classmethod
    def from_setup(cls, setup: Setup, config: APPOConfig) -> APPO:
        spec = setup.env.spec
        if spec.num_players > 1 or spec.num_agents > 1:
            raise ValueError(f"--algo {cls.name} learns single-agent tasks (V-trace over one decision per step); "
                             f"{type(setup.env).__name__} has several players or agents")
        if setup.memory_size:
            raise ValueError(f"--algo {cls.name} trains feed-forward policies: a policy with memory is --algo ppo's")
        return super().from_setup(setup, config)

    def __init__(self, policy, config: APPOConfig, *args, **kwargs) -> None:
        super().__init__(policy, config, *args, **kwargs)
        if self.recurrent:
            raise ValueError(f"--algo {self.name} trains feed-forward policies: a policy with memory is --algo ppo's")
        self.units.gae = self.targets
        self._gap: tuple[Tensor, Tensor] | None = None
        if config.decoupled_clip and (self._async is None or self.loss_fn is impala_loss):
            raise ValueError(f"--decoupled-clip moves the clipping of a lagged rollout's ratio: --algo {self.name} "
                             + ("does not clip" if self.loss_fn is impala_loss else "learns from lagged rollouts "
                                "only with --async"))

    def _update_body(self, rollout: Rollout, permutations: Tensor, weighted: bool = True):
        if not (self.config.decoupled_clip and self.policy_lag > 0):
            return super()._update_body(rollout, permutations, weighted)
        # Decoupled clipping: the ratio's reference becomes the proximal policy (the learner now), whose
        # log-probabilities are the collecting ones plus log_rho; V-trace still sees the gap to the collector.
        self._gap = self.behaviour_gap(rollout)
        try:
            proximal = dataclasses.replace(rollout, log_prob=rollout.log_prob + self._gap[0])
            return super()._update_body(proximal, permutations, weighted)
        finally:
            self._gap = None

    def behaviour_gap(self, batch: Rollout) -> tuple[Tensor, Tensor]:
        """``(log_rho, value)``, ``[T, N]`` each: log importance ratios of the learner's policy now to the one that
        collected ``batch``, and the learner's values of its observations. A rollout of the learner's own current
        policy (``policy_lag`` 0) needs no forward pass: 0 and the stored values. Otherwise the values after an
        episode end and after the last step stay the collecting critic's (the rollout keeps no final observations)."""
        if self._gap is not None:  # measured once for this update (decoupled clipping)
            return self._gap
        if self.policy_lag == 0:
            return torch.zeros_like(batch.reward), batch.value
        t, n = batch.reward.shape
        extra = {} if batch.critic_obs is None else {"critic_obs": batch.critic_obs.flatten(0, 1)}
        mask = None if self._policy.is_continuous else batch.action_mask.flatten(0, 1)
        with torch.no_grad():
            log_prob, _, value = self._policy.evaluate(batch.obs.flatten(0, 1), batch.action.flatten(0, 1), mask,
                                                       **extra)
        return log_prob.view(t, n) - batch.log_prob, value.view(t, n)

    def targets(self, batch: Rollout, weighted: bool = False) -> tuple[Tensor, Tensor]:
        """``(advantage, vs)`` of ``batch`` by V-trace (the update's stand-in for GAE)."""
        if weighted:
            raise ValueError(f"--algo {self.name}: V-trace here has one learner decision per step")
        c = self.config
        log_rho, value = self.behaviour_gap(batch)
        return compute_vtrace(log_rho, batch.reward * c.reward_scale, value, batch.terminated, batch.truncated,
                              batch.final_value, batch.bootstrap_value, c.gamma, c.gae_lambda, c.rho_bar, c.c_bar)


class IMPALA(APPO):
    """IMPALA's V-trace actor-critic."""

    name = "impala"
    loss_fn = staticmethod(impala_loss)
