"""``--policy tanh_gaussian``: PPO's Gaussian actor-critic with its actions squashed into the environment's bounds
by ``tanh`` (Brax's and MuJoCo Playground's PPO distribution), instead of sampled unbounded and clipped.

Shape legend: N = rows, O = observation size, D = action dimensions.

An action is ``a = bias + scale * tanh(u)`` with ``u ~ N(mean(obs), exp(log_std)^2)``, ``bias`` and ``scale`` the
middle and half-width of the bounds. Its log-density is that of ``a`` itself:

    log p(a) = log N(u; mean, std) - sum_d log(1 - tanh(u_d)^2) - sum_d log scale_d

and it is always computed from the action as stored (``u = atanh((a - bias) / scale)``, the normalised action
clamped to ``1 - 1e-6`` in size), when acting as when the update scores it: the ratio of a fresh update is exactly 1
even for an action whose ``tanh`` rounded to the bound. The Jacobian term does not depend on the policy's
parameters, so PPO's ratios are those of the Gaussian on ``u``; what the squashing changes is the action (bounded,
never clipped: a wide Gaussian does not turn into a bang-bang controller) and the entropy bonus.

Entropy: a tanh-squashed Gaussian has none in closed form. The estimate is one sample per row, the stored
action's, reparameterised (``u = mean + std * eps`` with ``eps`` the action's standardised noise, held fixed):

    H ~ sum_d (log_std_d + 0.5 log(2 pi e)) + sum_d log(1 - tanh(u_d)^2) + sum_d log scale_d

Its gradient pushes ``u`` away from the flat ends of ``tanh``, so unlike the plain Gaussian's (which grows without
bound with ``log_std``), the bonus has a maximum: an entropy coefficient widens the policy only up to the bounds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from rl_gpu.core.types import EnvSpec, PolicyOutput
from rl_gpu.nn import distributions as D
from rl_gpu.nn.actor_critic import GaussianActorCritic
from rl_gpu.nn.deploy import DeployedActor

_LIMIT = 1.0 - 1e-6
"""The largest normalised action ``|y|`` that is inverted: ``atanh`` of it is about 7.25."""
_ENTROPY_CONST = 0.5 + 0.5 * math.log(2.0 * math.pi)


class TanhGaussianActorCritic(GaussianActorCritic):
    """A :class:`~rl_gpu.nn.actor_critic.GaussianActorCritic` whose actions are ``bias + scale * tanh(u)``.

    Args:
        obs_dim, action_dim, hidden_sizes, init_log_std, normalize_obs, critic_obs_dim: as the Gaussian's
            (``init_log_std`` is that of ``u``).
        action_low, action_high: the environment's finite bounds, ``D`` each, low < high.
    """

    def __init__(
        self, obs_dim: int, action_dim: int, action_low: Sequence[float], action_high: Sequence[float],
        hidden_sizes: Sequence[int] = (64, 64), init_log_std: float = 0.0, normalize_obs: bool = False,
        critic_obs_dim: int = 0,
    ) -> None:
        super().__init__(obs_dim, action_dim, hidden_sizes, init_log_std, normalize_obs, critic_obs_dim)
        low, high = [float(x) for x in action_low], [float(x) for x in action_high]
        if len(low) != action_dim or len(high) != action_dim:
            raise ValueError(f"action_low and action_high need {action_dim} entries each, got {len(low)} and "
                             f"{len(high)}")
        if not all(math.isfinite(lo) and math.isfinite(hi) and lo < hi for lo, hi in zip(low, high)):
            raise ValueError(f"a tanh-squashed policy needs finite bounds with low < high in every dimension, got "
                             f"low {low} and high {high}")
        self.action_low, self.action_high = low, high
        low_t, high_t = torch.tensor(low), torch.tensor(high)  # built on the default device (meta when checked)
        self.register_buffer("action_scale", (high_t - low_t) / 2.0)
        self.register_buffer("action_bias", (high_t + low_t) / 2.0)

    def _pre_squash(self, action: Tensor) -> Tensor:
        """``[N, D]`` ``u`` of stored actions: ``atanh`` of the normalised action, clamped inside (-1, 1)."""
        y = (action.to(self.action_scale.dtype) - self.action_bias) / self.action_scale
        return torch.atanh(y.clamp(-_LIMIT, _LIMIT))

    def _log_prob(self, mean: Tensor, log_std: Tensor, u: Tensor) -> Tensor:
        """``[N]`` log-density of the actions whose pre-squash values (:meth:`_pre_squash`) are ``u``."""
        return (D.gaussian_log_prob(mean, log_std, u) - D.log1m_tanh_sq(u).sum(-1)
                - self.action_scale.log().sum())

    def act_from(
        self, mean: Tensor, value: Tensor, action_mask: Tensor | None = None,
        generator: torch.Generator | None = None, deterministic: bool = False, noise: Tensor | None = None,
        log_std: Tensor | None = None,
    ) -> PolicyOutput:
        """The squashed sample (from ``noise``, ``[N, D]`` standard normal, when given) or the squashed mean if
        ``deterministic``, with its log-density (module docstring); ``log_std`` as the Gaussian's."""
        log_std = self.log_std if log_std is None else log_std
        u = mean if deterministic else D.gaussian_sample(mean, log_std, generator, noise)
        action = self.action_bias + self.action_scale * torch.tanh(u)
        return PolicyOutput(action, self._log_prob(mean, log_std, self._pre_squash(action)), value)

    def evaluate(
        self, obs: Tensor, action: Tensor, action_mask: Tensor | None = None, critic_obs: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(log_prob [N], entropy [N], value [N])`` of given actions; the entropy is the one-sample estimate
        of the module docstring, at the given action."""
        mean, value = self(obs, critic_obs)
        u = self._pre_squash(action)
        std = self.log_std.exp()
        eps = ((u - mean) / std).detach()
        u_r = mean + std * eps  # equal to u; differentiable in mean and log_std
        entropy = ((self.log_std + _ENTROPY_CONST).sum() + D.log1m_tanh_sq(u_r).sum(-1)
                   + self.action_scale.log().sum())
        return self._log_prob(mean, self.log_std, u), entropy, value

    def export_module(self) -> DeployedActor:
        """The squashed mean as plain PyTorch, the normaliser folded in."""
        return DeployedActor(self.actor, self.obs_dim, action_dim=self.action_dim, obs_rms=self.obs_rms,
                             squash=(self.action_scale, self.action_bias))

    def config(self) -> dict:
        return {**super().config(), "kind": "tanh_gaussian", "action_low": list(self.action_low),
                "action_high": list(self.action_high)}


def tanh_gaussian_for_env(spec: EnvSpec, hidden_sizes: Sequence[int] = (64, 64), normalize_obs: bool = False,
                          init_log_std: float = 0.0) -> TanhGaussianActorCritic:
    """``--policy tanh_gaussian`` for an environment with vector observations and finite action bounds."""
    if len(spec.obs_shape) != 1:
        raise ValueError(f"policy kind 'tanh_gaussian' reads vector observations, got shape {spec.obs_shape}")
    if not spec.action_low or not spec.action_high:
        raise ValueError("policy kind 'tanh_gaussian' needs the environment's action bounds (its spec declares "
                         "none); use --policy gaussian")
    return TanhGaussianActorCritic(spec.obs_size, spec.action_size, spec.action_low, spec.action_high,
                                   hidden_sizes, init_log_std, normalize_obs, critic_obs_dim=spec.critic_obs_size)
