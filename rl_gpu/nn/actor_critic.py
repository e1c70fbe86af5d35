"""Actor-critic networks: a masked categorical head for discrete actions, a Gaussian head for continuous ones.

Shape legend: N = batch rows, O = observation size, A = discrete actions, D = continuous action dimensions.
Both classes share one interface, which is all that rollouts and updates use:

- ``act(obs, action_mask, generator, deterministic, noise) -> PolicyOutput(action, log_prob, value)``; ``noise``
  (pre-drawn with :func:`rl_gpu.nn.distributions.categorical_noise` or ``gaussian_noise``) replaces ``generator``
  so that compiled code holds no random-number generation
- ``evaluate(obs, action, action_mask) -> (log_prob, entropy, value)``
- ``value(obs) -> [N]``
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from rl_gpu.core.types import EnvSpec, PolicyOutput
from rl_gpu.nn import distributions as D
from rl_gpu.nn.layers import mlp
from rl_gpu.nn.normalization import RunningMeanStd


class _ActorCriticBase(nn.Module):
    """What both heads share: optional observation normalisation and the critic."""

    def _init_base(
        self, obs_dim: int, hidden_sizes: Sequence[int], normalize_obs: bool, out_name: str, out_size: int
    ) -> None:
        """Validate the sizes, then build the normaliser, the critic and the actor (``out_size`` outputs)."""
        if obs_dim <= 0 or out_size <= 0 or any(h <= 0 for h in hidden_sizes):
            raise ValueError(
                f"obs_dim, {out_name} and hidden sizes must be positive, got {obs_dim}, {out_size}, "
                f"{tuple(hidden_sizes)}"
            )
        self.obs_dim = obs_dim
        self.hidden_sizes = tuple(hidden_sizes)
        self.normalize_obs = normalize_obs
        self.obs_rms = RunningMeanStd(obs_dim) if normalize_obs else None
        self.critic = mlp(obs_dim, hidden_sizes, 1, out_gain=1.0)
        self.actor = mlp(obs_dim, hidden_sizes, out_size, out_gain=0.01)

    def preprocess(self, obs: Tensor) -> Tensor:
        """The network input: ``obs`` normalised by the running statistics, when enabled."""
        return self.obs_rms(obs) if self.obs_rms is not None else obs

    def update_normalizer(self, obs: Tensor, weight: Tensor | None = None) -> None:
        """Merge a rollout's observations (``[..., O]``, rows weighted by ``weight``) into the running
        statistics (no-op when disabled).

        Called after the update that used the rollout, so each rollout is collected and learned from under
        one fixed normalisation (the PPO ratio starts at exactly 1).
        """
        if self.obs_rms is not None:
            self.obs_rms.update(obs, weight)

    def value(self, obs: Tensor) -> Tensor:
        """``[N]`` critic estimate for ``[N, O]`` observations."""
        return self.critic(self.preprocess(obs)).squeeze(-1)

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """``(actor output [N, A] logits (unmasked) or [N, D] Gaussian mean, value [N])``."""
        x = self.preprocess(obs)
        return self.actor(x), self.critic(x).squeeze(-1)


class ActorCritic(_ActorCriticBase):
    """Separate actor and critic MLPs; the actor's categorical head never puts mass on illegal actions.

    Args:
        obs_dim: O, the size of a flat observation.
        num_actions: A, the number of discrete actions.
        hidden_sizes: widths of the hidden tanh layers of each network.
    """

    is_continuous = False

    def __init__(
        self,
        obs_dim: int,
        num_actions: int,
        hidden_sizes: Sequence[int] = (64, 64),
        normalize_obs: bool = False,
    ) -> None:
        super().__init__()
        self._init_base(obs_dim, hidden_sizes, normalize_obs, "num_actions", num_actions)
        self.num_actions = num_actions

    def act(
        self,
        obs: Tensor,
        action_mask: Tensor | None = None,
        generator: torch.Generator | None = None,
        deterministic: bool = False,
        noise: Tensor | None = None,
    ) -> PolicyOutput:
        """Choose one legal action per row: sampled (from ``noise``, ``[N, A]`` uniform, when given), or the most
        probable legal one if ``deterministic``."""
        logits, value = self(obs)
        if deterministic:
            action = D.categorical_mode(logits, action_mask)
        else:
            action = D.categorical_sample(logits, action_mask, generator, noise)
        return PolicyOutput(action, D.categorical_log_prob(logits, action_mask, action), value)

    def evaluate(
        self, obs: Tensor, action: Tensor, action_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(log_prob [N], entropy [N], value [N])`` of given actions, under the same mask as sampling."""
        logits, value = self(obs)
        log_prob, entropy = D.categorical_log_prob_entropy(logits, action_mask, action)
        return log_prob, entropy, value

    def config(self) -> dict:
        """Constructor arguments, enough to rebuild the network from a checkpoint."""
        return {"kind": "categorical", "obs_dim": self.obs_dim, "num_actions": self.num_actions,
                "hidden_sizes": list(self.hidden_sizes), "normalize_obs": self.normalize_obs}


class GaussianActorCritic(_ActorCriticBase):
    """Actor-critic for continuous actions: a diagonal Gaussian with a learned, state-independent log-std.

    The log-probability is that of the action actually sampled (before clipping to the action bounds);
    environments clip out-of-bounds actions themselves, as Gymnasium's do.

    Args:
        obs_dim: O, the size of a flat observation.
        action_dim: D, the number of action dimensions.
        hidden_sizes: widths of the hidden tanh layers of each network.
        init_log_std: initial log standard deviation of every action dimension.
    """

    is_continuous = True

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden_sizes: Sequence[int] = (64, 64),
        init_log_std: float = 0.0,
        normalize_obs: bool = False,
    ) -> None:
        super().__init__()
        self._init_base(obs_dim, hidden_sizes, normalize_obs, "action_dim", action_dim)
        self.action_dim = action_dim
        self.init_log_std = init_log_std
        self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)))

    def act(
        self,
        obs: Tensor,
        action_mask: Tensor | None = None,
        generator: torch.Generator | None = None,
        deterministic: bool = False,
        noise: Tensor | None = None,
    ) -> PolicyOutput:
        """Sample an action (from ``noise``, ``[N, D]`` standard normal, when given), or take the mean if
        ``deterministic``; ``action_mask`` is ignored."""
        mean, value = self(obs)
        action = mean if deterministic else D.gaussian_sample(mean, self.log_std, generator, noise)
        return PolicyOutput(action, D.gaussian_log_prob(mean, self.log_std, action), value)

    def evaluate(
        self, obs: Tensor, action: Tensor, action_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(log_prob [N], entropy [N], value [N])`` of given actions."""
        mean, value = self(obs)
        return (
            D.gaussian_log_prob(mean, self.log_std, action),
            D.gaussian_entropy(self.log_std, value.shape),
            value,
        )

    def config(self) -> dict:
        """Constructor arguments, enough to rebuild the network from a checkpoint."""
        return {"kind": "gaussian", "obs_dim": self.obs_dim, "action_dim": self.action_dim,
                "hidden_sizes": list(self.hidden_sizes), "init_log_std": self.init_log_std,
                "normalize_obs": self.normalize_obs}


def build_policy(config: dict) -> nn.Module:
    """Rebuild a policy from its :meth:`config` dictionary (as stored in checkpoints)."""
    kind = config.get("kind")
    kwargs = {k: v for k, v in config.items() if k != "kind"}
    if kind == "categorical":
        return ActorCritic(**kwargs)
    if kind == "gaussian":
        return GaussianActorCritic(**kwargs)
    raise ValueError(f"unknown policy kind {kind!r}; known: 'categorical', 'gaussian'")


def policy_for_env(
    spec: EnvSpec, hidden_sizes: Sequence[int] = (64, 64), normalize_obs: bool = False, init_log_std: float = 0.0
) -> nn.Module:
    """A fresh actor-critic sized for an environment's :class:`~rl_gpu.core.types.EnvSpec` (flat
    observations)."""
    if spec.is_continuous:
        return GaussianActorCritic(spec.obs_size, spec.action_size, hidden_sizes, init_log_std, normalize_obs)
    return ActorCritic(spec.obs_size, spec.num_actions, hidden_sizes, normalize_obs)


class UniformRandomPolicy:
    """Uniform over the legal actions; the default opponent of turn-based games. Has no parameters and no
    value."""

    is_continuous = False

    def act(
        self,
        obs: Tensor,
        action_mask: Tensor,
        generator: torch.Generator | None = None,
        deterministic: bool = False,
        noise: Tensor | None = None,
    ) -> PolicyOutput:
        logits = torch.zeros(action_mask.shape, device=obs.device)
        action = D.categorical_sample(logits, action_mask, generator, noise)
        zeros = torch.zeros(obs.shape[0], device=obs.device)
        return PolicyOutput(action, D.categorical_log_prob(logits, action_mask, action), zeros)

    def value(self, obs: Tensor) -> Tensor:
        """``[N]`` zeros: a random player has no critic."""
        return torch.zeros(obs.shape[0], device=obs.device)
