"""TD3 as an :class:`~rl_gpu.algos.base.Algorithm`: a deterministic tanh actor with Gaussian exploration, an
ensemble of Q critics evaluated in one batched call, target policy smoothing and delayed actor and target
updates, trained from the on-device replay buffer (:mod:`rl_gpu.algos.offpolicy.algorithm`)."""

from __future__ import annotations

import copy
from functools import partial

import torch
from torch import Tensor, nn

from rl_gpu.algos.base import Setup
from rl_gpu.algos.offpolicy.algorithm import OffPolicyAlgorithm, check_env
from rl_gpu.algos.td3.config import TD3Config
from rl_gpu.algos.td3.loss import STATS, td3_loss
from rl_gpu.core.seeding import derive_seed
from rl_gpu.core.types import VecEnv
from rl_gpu.nn.ensemble import EnsembleMLP
from rl_gpu.nn.squashed import DeterministicActor


class TD3(OffPolicyAlgorithm):
    """Twin delayed DDPG bound to ``env``.

    Args:
        policy: the deterministic actor (its ``exploration_noise`` is the config's).
        critic: the Q ensemble over ``concat(normalised obs, normalised action)``.
        config: TD3 hyper-parameters.
        env: the training environments.
        learning_rate: Adam's learning rate for the actor and the critics.
        seed: seeds the exploration, sampling and update streams.
        compile, num_steps, anneal_lr: as in :class:`~rl_gpu.algos.offpolicy.algorithm.OffPolicyAlgorithm`.
    """

    NAME = "TD3"
    STATS = STATS

    def __init__(self, policy: DeterministicActor, critic: EnsembleMLP, config: TD3Config, env: VecEnv,
                 learning_rate: float, seed: int, compile: str = "off", num_steps: int | None = None,
                 anneal_lr: bool = False) -> None:
        self.target_actor = copy.deepcopy(policy.actor).requires_grad_(False)
        super().__init__(policy, critic, [*policy.parameters(), *critic.parameters()], config, env,
                         learning_rate, seed, compile, num_steps, anneal_lr)
        self._last_actor_loss = torch.zeros((), device=self.device)

    @classmethod
    def from_setup(cls, setup: Setup, config: TD3Config) -> TD3:
        """The runner's constructor: an actor and ``n_critics`` critics sized for ``setup.env``, bound to it."""
        env = setup.env
        check_env(env, cls.NAME)
        spec = env.spec
        policy = DeterministicActor(spec.obs_size, spec.action_size, setup.hidden_sizes, setup.normalize_obs,
                                    spec.action_low, spec.action_high, config.exploration_noise).to(env.device)
        critic = EnsembleMLP(config.n_critics, spec.obs_size + spec.action_size, setup.hidden_sizes).to(env.device)
        return cls(policy, critic, config, env, setup.learning_rate, derive_seed(setup.seed, "policy"),
                   setup.compile, setup.num_steps, setup.anneal_lr)

    def _loss_units(self):
        loss = partial(td3_loss, self._policy, self.target_actor, self.critic, self.target_critic, self.config,
                       self.buffer)
        return {flag: partial(loss, flag) for flag in (True, False)}

    def _pattern(self, start: int, count: int) -> tuple[bool, ...]:
        """Delayed policy updates: update ``i`` (counted from the first) updates the actor when
        ``i % policy_frequency == 0``."""
        return tuple((start + i) % self.config.policy_frequency == 0 for i in range(count))

    def _draw_update_noise(self, count: int) -> Tensor:
        shape = (count, self.config.batch_size, self._policy.action_dim)
        return torch.randn(shape, generator=self.update_rng, device=self.device)

    def _after_update(self, actor_step: bool) -> None:
        if not actor_step:
            return
        tau = self.config.tau
        with torch.no_grad():
            torch._foreach_lerp_(list(self.target_critic.parameters()), list(self.critic.parameters()), tau)
            torch._foreach_lerp_(list(self.target_actor.parameters()), list(self._policy.actor.parameters()), tau)

    def _metrics(self, sums: Tensor | None, pattern: tuple[bool, ...]) -> dict[str, Tensor]:
        if sums is None:
            zero = torch.zeros((), device=self.device)
            return {name: zero for name in STATS}
        actor_steps = sum(pattern)
        out = {"q_loss": sums[0] / len(pattern), "q_value": sums[2] / len(pattern)}
        # An iteration without an actor step reports the last actor loss measured.
        if actor_steps:
            self._last_actor_loss = sums[1] / actor_steps
        out["actor_loss"] = self._last_actor_loss
        return out

    def _networks(self) -> dict[str, nn.Module]:
        return {**super()._networks(), "target_actor": self.target_actor}

    def state_dict(self) -> dict:
        """The shared state, and the last actor loss (what an iteration without an actor step reports)."""
        return {**super().state_dict(), "last_actor_loss": self._last_actor_loss}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self._last_actor_loss = state["last_actor_loss"].to(self.device)
