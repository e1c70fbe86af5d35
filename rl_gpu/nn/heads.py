"""Action heads: features to a distribution over actions, sampled, scored and made deterministic.

Shape legend: B = leading dimensions, F = features, A = discrete actions, D = continuous action dimensions.

Both heads offer ``act(features, action_mask, generator, deterministic, noise) -> (action, log_prob)`` (``noise``
pre-drawn with :func:`rl_gpu.nn.distributions.categorical_noise` or ``gaussian_noise`` replaces the generator, so
compiled code holds no random-number generation), ``log_prob_entropy(features, action, action_mask)`` and
``deploy_layers()`` (what an export's actor ends in: the logits, or the mean).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from rl_gpu.nn import distributions as D
from rl_gpu.nn.layers import layer_init


class CategoricalHead(nn.Module):
    """Masked categorical over A actions: ``[*B, F]`` -> logits ``[*B, A]`` (illegal actions get no mass)."""

    is_continuous = False

    def __init__(self, in_size: int, num_actions: int) -> None:
        super().__init__()
        if num_actions <= 0:
            raise ValueError(f"num_actions must be positive, got {num_actions}")
        self.num_actions = num_actions
        self.logits = layer_init(nn.Linear(in_size, num_actions), gain=0.01)

    def act(self, features: Tensor, action_mask: Tensor | None, generator: torch.Generator | None,
            deterministic: bool, noise: Tensor | None) -> tuple[Tensor, Tensor]:
        return D.categorical_act(self.logits(features), action_mask, generator, deterministic, noise)

    def log_prob_entropy(self, features: Tensor, action: Tensor, action_mask: Tensor | None) -> tuple[Tensor, Tensor]:
        return D.categorical_log_prob_entropy(self.logits(features), action_mask, action)

    def deploy_layers(self) -> nn.Module:
        return self.logits


class GaussianHead(nn.Module):
    """Diagonal Gaussian over D dimensions: ``[*B, F]`` -> mean ``[*B, D]``, with a state-independent learned
    log standard deviation (initially ``init_log_std``)."""

    is_continuous = True

    def __init__(self, in_size: int, action_dim: int, init_log_std: float = 0.0) -> None:
        super().__init__()
        if action_dim <= 0:
            raise ValueError(f"action_dim must be positive, got {action_dim}")
        self.action_dim = action_dim
        self.mean = layer_init(nn.Linear(in_size, action_dim), gain=0.01)
        self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)))

    def act(self, features: Tensor, action_mask: Tensor | None, generator: torch.Generator | None,
            deterministic: bool, noise: Tensor | None) -> tuple[Tensor, Tensor]:
        mean = self.mean(features)
        action = mean if deterministic else D.gaussian_sample(mean, self.log_std, generator, noise)
        return action, D.gaussian_log_prob(mean, self.log_std, action)

    def log_prob_entropy(self, features: Tensor, action: Tensor, action_mask: Tensor | None) -> tuple[Tensor, Tensor]:
        mean = self.mean(features)
        return D.gaussian_log_prob(mean, self.log_std, action), D.gaussian_entropy(self.log_std, mean.shape[:-1])

    def deploy_layers(self) -> nn.Module:
        return self.mean


def make_head(in_size: int, num_actions: int = 0, action_dim: int = 0, init_log_std: float = 0.0) -> nn.Module:
    """A categorical head for ``num_actions`` > 0, else a Gaussian one for ``action_dim``."""
    if (num_actions > 0) == (action_dim > 0):
        raise ValueError(f"give num_actions (discrete) or action_dim (continuous), got {num_actions} and "
                         f"{action_dim}")
    return CategoricalHead(in_size, num_actions) if num_actions else GaussianHead(in_size, action_dim, init_log_std)
