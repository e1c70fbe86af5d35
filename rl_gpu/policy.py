"""Actor-critic networks: a masked categorical head for discrete actions, a Gaussian head for continuous ones.

Shape legend: N = batch rows, O = observation size, A = discrete actions, D = continuous action dimensions.
Both classes share one interface, which is all that rollouts and updates use:

- ``act(obs, action_mask, generator, deterministic) -> PolicyOutput(action, log_prob, value)``
- ``evaluate(obs, action, action_mask) -> (log_prob, entropy, value)``
- ``value(obs) -> [N]``
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import torch
from torch import Tensor, nn

from rl_gpu import distributions as D


class PolicyOutput(NamedTuple):
    """What the policy decided for one batch of observations."""

    action: Tensor
    """``[N]`` int64 (discrete) or ``[N, D]`` float32 (continuous, as sampled, before any clipping)."""
    log_prob: Tensor
    """``[N]`` log-probability of ``action`` under the policy that chose it."""
    value: Tensor
    """``[N]`` critic estimate V(obs)."""


def layer_init(layer: nn.Linear, gain: float = math.sqrt(2.0), bias: float = 0.0) -> nn.Linear:
    """Orthogonal weights and constant bias, the PPO-implementation-details initialisation."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.constant_(layer.bias, bias)
    return layer


def mlp(in_size: int, hidden_sizes: Sequence[int], out_size: int, out_gain: float) -> nn.Sequential:
    """Tanh MLP with orthogonal initialisation; the last layer gets gain ``out_gain``."""
    layers: list[nn.Module] = []
    size = in_size
    for hidden in hidden_sizes:
        layers += [layer_init(nn.Linear(size, hidden)), nn.Tanh()]
        size = hidden
    layers.append(layer_init(nn.Linear(size, out_size), gain=out_gain))
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs; the actor's categorical head never puts mass on illegal actions.

    The defaults fit the roulette game (6 observation values, 3 actions).

    Args:
        obs_dim: O, the size of a flat observation.
        num_actions: A, the number of discrete actions.
        hidden_sizes: widths of the hidden tanh layers of each network.
    """

    is_continuous = False

    def __init__(self, obs_dim: int = 6, num_actions: int = 3, hidden_sizes: Sequence[int] = (64, 64)) -> None:
        super().__init__()
        if obs_dim <= 0 or num_actions <= 0 or any(h <= 0 for h in hidden_sizes):
            raise ValueError(
                f"obs_dim, num_actions and hidden sizes must be positive, got {obs_dim}, {num_actions}, "
                f"{tuple(hidden_sizes)}"
            )
        self.obs_dim = obs_dim
        self.num_actions = num_actions
        self.hidden_sizes = tuple(hidden_sizes)
        self.actor = mlp(obs_dim, hidden_sizes, num_actions, out_gain=0.01)
        self.critic = mlp(obs_dim, hidden_sizes, 1, out_gain=1.0)

    def value(self, obs: Tensor) -> Tensor:
        """``[N]`` critic estimate for ``[N, O]`` observations."""
        return self.critic(obs).squeeze(-1)

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """``(logits [N, A], value [N])``; logits are unmasked."""
        return self.actor(obs), self.value(obs)

    def act(
        self,
        obs: Tensor,
        action_mask: Tensor | None = None,
        generator: torch.Generator | None = None,
        deterministic: bool = False,
    ) -> PolicyOutput:
        """Choose one legal action per row: sampled, or the most probable legal one if ``deterministic``."""
        logits, value = self(obs)
        if deterministic:
            action = D.categorical_mode(logits, action_mask)
        else:
            action = D.categorical_sample(logits, action_mask, generator)
        return PolicyOutput(action, D.categorical_log_prob(logits, action_mask, action), value)

    def evaluate(
        self, obs: Tensor, action: Tensor, action_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(log_prob [N], entropy [N], value [N])`` of given actions, under the same mask as sampling."""
        logits, value = self(obs)
        return (
            D.categorical_log_prob(logits, action_mask, action),
            D.categorical_entropy(logits, action_mask),
            value,
        )

    def config(self) -> dict:
        """Constructor arguments, enough to rebuild the network from a checkpoint."""
        return {"kind": "categorical", "obs_dim": self.obs_dim, "num_actions": self.num_actions,
                "hidden_sizes": list(self.hidden_sizes)}


class GaussianActorCritic(nn.Module):
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
        self, obs_dim: int, action_dim: int, hidden_sizes: Sequence[int] = (64, 64), init_log_std: float = 0.0
    ) -> None:
        super().__init__()
        if obs_dim <= 0 or action_dim <= 0 or any(h <= 0 for h in hidden_sizes):
            raise ValueError(
                f"obs_dim, action_dim and hidden sizes must be positive, got {obs_dim}, {action_dim}, "
                f"{tuple(hidden_sizes)}"
            )
        self.obs_dim = obs_dim
        self.action_dim = action_dim
        self.hidden_sizes = tuple(hidden_sizes)
        self.init_log_std = init_log_std
        self.actor = mlp(obs_dim, hidden_sizes, action_dim, out_gain=0.01)
        self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)))
        self.critic = mlp(obs_dim, hidden_sizes, 1, out_gain=1.0)

    def value(self, obs: Tensor) -> Tensor:
        """``[N]`` critic estimate for ``[N, O]`` observations."""
        return self.critic(obs).squeeze(-1)

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """``(mean [N, D], value [N])``."""
        return self.actor(obs), self.value(obs)

    def act(
        self,
        obs: Tensor,
        action_mask: Tensor | None = None,
        generator: torch.Generator | None = None,
        deterministic: bool = False,
    ) -> PolicyOutput:
        """Sample an action (or take the mean if ``deterministic``); ``action_mask`` is ignored."""
        mean, value = self(obs)
        action = mean if deterministic else D.gaussian_sample(mean, self.log_std, generator)
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
                "hidden_sizes": list(self.hidden_sizes), "init_log_std": self.init_log_std}


def build_policy(config: dict) -> nn.Module:
    """Rebuild a policy from its :meth:`config` dictionary (as stored in checkpoints)."""
    kind = config.get("kind")
    kwargs = {k: v for k, v in config.items() if k != "kind"}
    if kind == "categorical":
        return ActorCritic(**kwargs)
    if kind == "gaussian":
        return GaussianActorCritic(**kwargs)
    raise ValueError(f"unknown policy kind {kind!r}; known: 'categorical', 'gaussian'")


def policy_for_env(env, hidden_sizes: Sequence[int] = (64, 64)) -> nn.Module:
    """A fresh actor-critic sized for ``env`` (flat observations)."""
    obs_dim = int(math.prod(env.obs_shape))
    if env.is_continuous:
        return GaussianActorCritic(obs_dim, int(math.prod(env.action_shape)), hidden_sizes)
    return ActorCritic(obs_dim, env.num_actions, hidden_sizes)


class UniformRandomPolicy:
    """Uniform over the legal actions; the default roulette opponent. Has no parameters and no value."""

    def act(
        self,
        obs: Tensor,
        action_mask: Tensor,
        generator: torch.Generator | None = None,
        deterministic: bool = False,
    ) -> PolicyOutput:
        logits = torch.zeros(action_mask.shape, device=obs.device)
        action = D.categorical_sample(logits, action_mask, generator)
        zeros = torch.zeros(obs.shape[0], device=obs.device)
        return PolicyOutput(action, D.categorical_log_prob(logits, action_mask, action), zeros)
