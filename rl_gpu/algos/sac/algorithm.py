"""SAC as an :class:`~rl_gpu.algos.base.Algorithm`: a tanh-squashed Gaussian actor, an ensemble of Q critics
evaluated in one batched call with Polyak-averaged targets, and automatic entropy tuning, trained from the
on-device replay buffer (:mod:`rl_gpu.algos.offpolicy.algorithm`)."""

from __future__ import annotations

from functools import partial

import torch
from torch import Tensor, nn

from rl_gpu.algos.base import Setup
from rl_gpu.algos.offpolicy.algorithm import OffPolicyAlgorithm, check_env
from rl_gpu.algos.sac.config import SACConfig
from rl_gpu.algos.sac.loss import STATS, make_log_alpha, sac_loss
from rl_gpu.core.seeding import derive_seed
from rl_gpu.core.types import VecEnv
from rl_gpu.nn.ensemble import EnsembleMLP
from rl_gpu.nn.squashed import SquashedGaussianActor


class SAC(OffPolicyAlgorithm):
    """Soft actor-critic bound to ``env``.

    Args:
        policy: the squashed Gaussian actor (evaluated with its squashed mean, exported).
        critic: the Q ensemble over ``concat(normalised obs, normalised action)``.
        config: SAC hyper-parameters.
        env: the training environments.
        learning_rate: Adam's learning rate for the actor, the critics and the entropy coefficient.
        seed: seeds the exploration, sampling and update streams.
        compile, num_steps, anneal_lr: as in :class:`~rl_gpu.algos.offpolicy.algorithm.OffPolicyAlgorithm`.
    """

    NAME = "SAC"
    STATS = STATS

    def __init__(self, policy: SquashedGaussianActor, critic: EnsembleMLP, config: SACConfig, env: VecEnv,
                 learning_rate: float, seed: int, compile: str = "off", num_steps: int | None = None,
                 anneal_lr: bool = False) -> None:
        self.log_alpha = make_log_alpha(config.alpha, config.autotune, env.device)
        self.target_entropy = (float(config.target_entropy) if config.target_entropy is not None
                               else -float(policy.action_dim))
        parameters = [*policy.parameters(), *critic.parameters()]
        if config.autotune:
            parameters.append(self.log_alpha)
        super().__init__(policy, critic, parameters, config, env, learning_rate, seed, compile, num_steps,
                         anneal_lr)

    @classmethod
    def from_setup(cls, setup: Setup, config: SACConfig) -> SAC:
        """The runner's constructor: an actor and ``n_critics`` critics sized for ``setup.env``, bound to it."""
        env = setup.env
        check_env(env, cls.NAME)
        spec = env.spec
        policy = SquashedGaussianActor(spec.obs_size, spec.action_size, setup.hidden_sizes, setup.normalize_obs,
                                       spec.action_low, spec.action_high).to(env.device)
        critic = EnsembleMLP(config.n_critics, spec.obs_size + spec.action_size, setup.hidden_sizes).to(env.device)
        return cls(policy, critic, config, env, setup.learning_rate, derive_seed(setup.seed, "policy"),
                   setup.compile, setup.num_steps, setup.anneal_lr)

    def _loss_units(self):
        cfg = self.config
        return {True: partial(sac_loss, self._policy, self.critic, self.target_critic, self.log_alpha,
                              self.target_entropy, cfg.autotune, self.buffer)}

    def _draw_update_noise(self, count: int) -> Tensor:
        shape = (count, 2, self.config.batch_size, self._policy.action_dim)
        return torch.randn(shape, generator=self.update_rng, device=self.device)

    def _after_update(self, actor_step: bool) -> None:
        with torch.no_grad():
            torch._foreach_lerp_(list(self.target_critic.parameters()), list(self.critic.parameters()),
                                 self.config.tau)

    def _metrics(self, sums: Tensor | None, pattern: tuple[bool, ...]) -> dict[str, Tensor]:
        if sums is None:
            zero = torch.zeros((), device=self.device)
            out = {name: zero for name in STATS}
            out["alpha"] = self.log_alpha.detach().exp()
            return out
        means = sums / len(pattern)
        return {name: means[i] for i, name in enumerate(STATS)}

    def _networks(self) -> dict[str, nn.Module]:
        return {**super()._networks(), "log_alpha": _Holder(self.log_alpha)}


class _Holder(nn.Module):
    """``log_alpha`` as a module, so it is saved and loaded (in place) like the networks."""

    def __init__(self, value: Tensor) -> None:
        super().__init__()
        if isinstance(value, nn.Parameter):
            self.value = value
        else:
            self.register_buffer("value", value)
