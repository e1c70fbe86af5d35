"""Actor-critic networks: a masked categorical head for discrete actions, a Gaussian head for continuous ones.

Shape legend: N = batch rows, O = observation size, A = discrete actions, D = continuous action dimensions.
Both classes share one interface, which is all that rollouts and updates use:

- ``act(obs, action_mask, generator, deterministic, noise) -> PolicyOutput(action, log_prob, value)``; ``noise``
  (pre-drawn with :func:`rl_gpu.distributions.categorical_noise` or ``gaussian_noise``) replaces ``generator``
  so that compiled code holds no random-number generation
- ``evaluate(obs, action, action_mask) -> (log_prob, entropy, value)``
- ``value(obs) -> [N]``
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor, nn
from torch.nn import functional as F

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


def _tanh_by_sigmoid(x: Tensor) -> Tensor:
    return torch.sigmoid(2.0 * x).mul_(2.0).sub_(1.0)


class _TanhBySigmoid(torch.autograd.Function):
    """``2 sigmoid(2x) - 1`` as one autograd node that saves only its output, as ``tanh`` does, with ``tanh``'s
    own fused backward kernel (``grad * (1 - y^2)`` as three operations cost 4x more at [4096, 64])."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        y = _tanh_by_sigmoid(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)


class Tanh(nn.Module):
    """``tanh``, computed on CPU for large inputs as ``2 sigmoid(2x) - 1`` (derivative ``1 - tanh(x)^2``).

    PyTorch's CPU ``tanh`` forward kernel is slow: on a 2-core AVX-512 machine 4x slower than this form from
    [512, 64] up, eager and compiled (benchmarks/cpu_tanh.py), and it dominated the MLP's cost in rollouts and
    updates. Below ``SIGMOID_FROM`` elements (a rollout step or an evaluation of a few dozen rows) the
    form's extra operations cost more than they save, so ``torch.tanh`` runs. The two agree to 2e-7 absolute
    (the form rounds near 0 to float32's spacing at 1.0). Other devices use ``torch.tanh``. No parameters, so
    checkpoints are unaffected; exported models use ``nn.Tanh``.
    """

    SIGMOID_FROM = 8192

    def forward(self, x: Tensor) -> Tensor:
        if x.device.type != "cpu" or x.numel() < self.SIGMOID_FROM:
            return torch.tanh(x)
        if torch.is_grad_enabled() and x.requires_grad:
            return _TanhBySigmoid.apply(x)
        return _tanh_by_sigmoid(x)


class MLP(nn.Sequential):
    """``nn.Sequential`` of layers whose forward calls each ``nn.Linear``'s function directly (no per-layer
    module call, so no forward hooks on the layers). On CPU the module calls cost about 2 us a layer: a third
    of a rollout step's actor-critic forward for a few dozen rows. Same parameters and ``state_dict`` keys."""

    def forward(self, x: Tensor) -> Tensor:
        for layer in self:
            x = F.linear(x, layer.weight, layer.bias) if type(layer) is nn.Linear else layer.forward(x)
        return x


def mlp(in_size: int, hidden_sizes: Sequence[int], out_size: int, out_gain: float) -> MLP:
    """Tanh MLP with orthogonal initialisation; the last layer gets gain ``out_gain``."""
    layers: list[nn.Module] = []
    size = in_size
    for hidden in hidden_sizes:
        layers += [layer_init(nn.Linear(size, hidden)), Tanh()]
        size = hidden
    layers.append(layer_init(nn.Linear(size, out_size), gain=out_gain))
    return MLP(*layers)


class RunningMeanStd(nn.Module):
    """Running mean and variance of observations (Chan et al.'s parallel merge), kept as buffers so they travel
    with ``state_dict`` and checkpoints."""

    def __init__(self, size: int, clip: float = 10.0, epsilon: float = 1e-8) -> None:
        super().__init__()
        self.clip = clip
        self.epsilon = epsilon
        self.register_buffer("mean", torch.zeros(size, dtype=torch.float64))
        self.register_buffer("var", torch.ones(size, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: Tensor, weight: Tensor | None = None) -> None:
        """Merge the statistics of ``x`` (``[..., size]``) into the running ones; rows where ``weight``
        (``[...]``) is 0 are left out. Pure tensor maths: no host synchronisation."""
        x = x.reshape(-1, self.mean.shape[0]).double()
        w = torch.ones_like(x[:, 0]) if weight is None else weight.reshape(-1).double()
        n = w.sum()
        batch_mean = (w[:, None] * x).sum(0) / n.clamp(min=1)
        batch_var = (w[:, None] * (x - batch_mean).square()).sum(0) / n.clamp(min=1)
        total = self.count + n
        delta = batch_mean - self.mean
        self.mean += delta * (n / total)
        self.var.copy_((self.var * self.count + batch_var * n + delta.square() * self.count * n / total) / total)
        self.count.copy_(total)

    def forward(self, x: Tensor) -> Tensor:
        """``(x - mean) / sqrt(var + eps)``, clipped to ``[-clip, clip]``; identity before the first update."""
        scale = torch.rsqrt(self.var + self.epsilon).to(x.dtype)
        normalized = ((x - self.mean.to(x.dtype)) * scale).clamp(-self.clip, self.clip)
        return torch.where(self.count > 0, normalized, x)


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

    The defaults fit the roulette game (6 observation values, 3 actions).

    Args:
        obs_dim: O, the size of a flat observation.
        num_actions: A, the number of discrete actions.
        hidden_sizes: widths of the hidden tanh layers of each network.
    """

    is_continuous = False

    def __init__(
        self,
        obs_dim: int = 6,
        num_actions: int = 3,
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
    env, hidden_sizes: Sequence[int] = (64, 64), normalize_obs: bool = False, init_log_std: float = 0.0
) -> nn.Module:
    """A fresh actor-critic sized for ``env`` (flat observations)."""
    obs_dim = int(math.prod(env.obs_shape))
    if env.is_continuous:
        return GaussianActorCritic(
            obs_dim, int(math.prod(env.action_shape)), hidden_sizes, init_log_std, normalize_obs
        )
    return ActorCritic(obs_dim, env.num_actions, hidden_sizes, normalize_obs)


class UniformRandomPolicy:
    """Uniform over the legal actions; the default roulette opponent. Has no parameters and no value."""

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
