"""Off-policy actors whose actions are squashed into the environment's bounds by ``tanh``: SAC's Gaussian and
TD3's deterministic one. Both are the ``policy`` their algorithm hands to evaluation and export.

Shape legend: N = batch rows, O = observation size, D = action dimensions.

The actor network maps (normalised) observations to pre-squash values; ``y = tanh(.)`` is the *normalised*
action in ``(-1, 1)^D`` and the environment receives ``bias + scale * y`` with ``scale = (high - low) / 2`` and
``bias = (high + low) / 2``. Critics read ``y`` (the same scale for every task). The deterministic action,
what evaluation and export use, is ``bias + scale * tanh(mean)`` for both.

Both classes act like an actor-critic (``act(obs, action_mask, generator, deterministic, noise) ->
PolicyOutput``) so that collectors, evaluation and export need nothing else; they have no value function, so
``value`` and the ``value`` of ``act`` are zeros.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from rl_gpu.core.types import PolicyOutput
from rl_gpu.nn import distributions as D
from rl_gpu.nn.deploy import DeployedActor
from rl_gpu.nn.layers import relu_mlp
from rl_gpu.nn.normalization import RunningMeanStd, to_float

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
"""Range of SAC's log standard deviation (CleanRL's), reached smoothly through a tanh."""


class SquashedActor(nn.Module):
    """What both actors share: sizes, bounds, the optional observation normaliser and the actor network.

    Args:
        obs_dim: O.
        action_dim: D.
        hidden_sizes: widths of the actor's hidden ReLU layers.
        normalize_obs: normalise observations by running statistics (kept as buffers, exported with the policy).
        action_low: ``D`` lower bounds of the environment's actions.
        action_high: ``D`` upper bounds.
        out_size: outputs of the actor network (``D`` or ``2 D``).
    """

    is_continuous = True

    def __init__(self, obs_dim: int, action_dim: int, hidden_sizes: Sequence[int], normalize_obs: bool,
                 action_low: Sequence[float], action_high: Sequence[float], out_size: int) -> None:
        super().__init__()
        if obs_dim <= 0 or action_dim <= 0 or any(h <= 0 for h in hidden_sizes):
            raise ValueError(f"obs_dim, action_dim and hidden sizes must be positive, got {obs_dim}, "
                             f"{action_dim}, {tuple(hidden_sizes)}")
        low, high = [float(x) for x in action_low], [float(x) for x in action_high]
        if len(low) != action_dim or len(high) != action_dim:
            raise ValueError(f"action bounds need {action_dim} values each, got {len(low)} and {len(high)}")
        if not all(lo < hi for lo, hi in zip(low, high)):
            raise ValueError(f"action bounds must satisfy low < high, got low {low}, high {high}")
        self.obs_dim = obs_dim
        self.action_dim = action_dim
        self.hidden_sizes = tuple(hidden_sizes)
        self.normalize_obs = normalize_obs
        self.action_low, self.action_high = low, high
        self.obs_rms = RunningMeanStd(obs_dim) if normalize_obs else None
        self.actor = relu_mlp(obs_dim, hidden_sizes, out_size)
        low_t, high_t = torch.tensor(low), torch.tensor(high)
        self.register_buffer("action_scale", (high_t - low_t) / 2)
        self.register_buffer("action_bias", (high_t + low_t) / 2)

    def preprocess(self, obs: Tensor) -> Tensor:
        """The network input: ``obs`` normalised by the running statistics, when enabled."""
        obs = to_float(obs)
        return self.obs_rms(obs) if self.obs_rms is not None else obs

    def update_normalizer(self, obs: Tensor, weight: Tensor | None = None) -> None:
        """Merge observations ``[..., O]`` into the running statistics (no-op when disabled)."""
        if self.obs_rms is not None:
            self.obs_rms.update(to_float(obs), weight)

    def to_env(self, y: Tensor) -> Tensor:
        """``[N, D]`` environment actions from normalised actions ``y`` in ``[-1, 1]``."""
        return self.action_bias + self.action_scale * y

    def from_env(self, action: Tensor) -> Tensor:
        """``[N, D]`` normalised actions from environment actions (the inverse of :meth:`to_env`)."""
        return (action - self.action_bias) / self.action_scale

    def mean(self, x: Tensor) -> Tensor:
        """``[N, D]`` pre-squash mean for preprocessed observations ``x`` ``[N, O]``."""
        return self.actor(x)[..., : self.action_dim]

    def value(self, obs: Tensor, critic_obs: Tensor | None = None) -> Tensor:
        """``[N]`` zeros: the critics are the algorithm's, not the policy's."""
        return torch.zeros(obs.shape[0], device=obs.device)

    def export_module(self) -> DeployedActor:
        """The deterministic action (the squashed mean) as plain PyTorch, the normaliser folded in."""
        return DeployedActor(self.actor, self.obs_dim, action_dim=self.action_dim, obs_rms=self.obs_rms,
                             squash=(self.action_scale, self.action_bias))

    def _config(self, kind: str) -> dict:
        return {"kind": kind, "obs_dim": self.obs_dim, "action_dim": self.action_dim,
                "hidden_sizes": list(self.hidden_sizes), "normalize_obs": self.normalize_obs,
                "action_low": list(self.action_low), "action_high": list(self.action_high)}


class SquashedGaussianActor(SquashedActor):
    """SAC's actor: ``u ~ N(mean, std)`` with a state-dependent ``log std`` in ``[LOG_STD_MIN, LOG_STD_MAX]``,
    action ``bias + scale * tanh(u)``. ``log_prob`` is the density of the normalised action ``tanh(u)``
    (:func:`rl_gpu.nn.distributions.squashed_gaussian_sample`)."""

    def __init__(self, obs_dim: int, action_dim: int, hidden_sizes: Sequence[int] = (256, 256),
                 normalize_obs: bool = False, action_low: Sequence[float] | None = None,
                 action_high: Sequence[float] | None = None) -> None:
        low = action_low if action_low is not None else [-1.0] * action_dim
        high = action_high if action_high is not None else [1.0] * action_dim
        super().__init__(obs_dim, action_dim, hidden_sizes, normalize_obs, low, high, 2 * action_dim)

    def heads(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``(mean [N, D], log_std [N, D])`` for preprocessed observations ``x``."""
        out = self.actor(x)
        mean, raw = out[..., : self.action_dim], out[..., self.action_dim:]
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(raw) + 1.0)
        return mean, log_std

    def sample(self, x: Tensor, noise: Tensor) -> tuple[Tensor, Tensor]:
        """``(y [N, D] normalised action, log_prob [N])`` for preprocessed observations and ``[N, D]`` standard
        normal ``noise``."""
        mean, log_std = self.heads(x)
        return D.squashed_gaussian_sample(mean, log_std, noise)

    def act(self, obs: Tensor, action_mask: Tensor | None = None, generator: torch.Generator | None = None,
            deterministic: bool = False, noise: Tensor | None = None,
            critic_obs: Tensor | None = None) -> PolicyOutput:
        """Environment actions ``[N, D]``: sampled (from ``noise``, ``[N, D]`` standard normal, when given, else
        drawn with ``generator``), or ``bias + scale * tanh(mean)`` if ``deterministic`` (its ``log_prob`` is
        that of the mean's pre-squash value). ``action_mask`` and ``critic_obs`` (an environment's ``critic`` group,
        which the actor does not read) are ignored."""
        mean, log_std = self.heads(self.preprocess(obs))
        if deterministic:
            u = mean
        else:
            if noise is None:
                noise = D.gaussian_noise(mean.shape, generator, mean.device, mean.dtype)
            u = mean + log_std.exp() * noise
        log_prob = D.squashed_gaussian_log_prob(mean, log_std, u)
        return PolicyOutput(self.to_env(torch.tanh(u)), log_prob, torch.zeros_like(log_prob))

    def fisher_log_prob(self, obs: Tensor, generator: torch.Generator | None) -> Tensor:
        """``[N]`` log-density of one exploring sample per row (held fixed), differentiable in the parameters:
        the mean of its squared gradient estimates the Fisher diagonal (EWC, :mod:`rl_gpu.algos.anchor`). The
        density is the pre-squash Gaussian's: ``tanh`` and the bounds are a fixed bijection of the sample, which
        leaves the Fisher unchanged."""
        mean, log_std = self.heads(self.preprocess(obs))
        noise = D.gaussian_noise(mean.shape, generator, mean.device, mean.dtype)
        u = (mean + log_std.exp() * noise).detach()
        return D.gaussian_log_prob(mean, log_std, u)

    def config(self) -> dict:
        """Constructor arguments, enough to rebuild the network from a checkpoint."""
        return self._config("squashed_gaussian")


class DeterministicActor(SquashedActor):
    """TD3's actor: action ``bias + scale * tanh(actor(x))``; exploring, ``scale * clamp(tanh(actor(x)) +
    exploration_noise * noise, -1, 1) + bias`` (Gaussian noise of ``exploration_noise`` times the half-range,
    kept inside the bounds)."""

    def __init__(self, obs_dim: int, action_dim: int, hidden_sizes: Sequence[int] = (256, 256),
                 normalize_obs: bool = False, action_low: Sequence[float] | None = None,
                 action_high: Sequence[float] | None = None, exploration_noise: float = 0.1) -> None:
        low = action_low if action_low is not None else [-1.0] * action_dim
        high = action_high if action_high is not None else [1.0] * action_dim
        super().__init__(obs_dim, action_dim, hidden_sizes, normalize_obs, low, high, action_dim)
        if not exploration_noise >= 0:
            raise ValueError(f"exploration_noise must be >= 0, got {exploration_noise!r}")
        self.exploration_noise = float(exploration_noise)

    def squashed(self, x: Tensor) -> Tensor:
        """``[N, D]`` normalised deterministic action ``tanh(actor(x))`` for preprocessed observations."""
        return torch.tanh(self.actor(x))

    def act(self, obs: Tensor, action_mask: Tensor | None = None, generator: torch.Generator | None = None,
            deterministic: bool = False, noise: Tensor | None = None,
            critic_obs: Tensor | None = None) -> PolicyOutput:
        """Environment actions ``[N, D]``: the deterministic action, plus exploration noise (from ``noise``,
        ``[N, D]`` standard normal, when given, else drawn with ``generator``) unless ``deterministic``. The
        policy has no density: ``log_prob`` and ``value`` are zeros. ``action_mask`` and ``critic_obs`` are
        ignored."""
        y = self.squashed(self.preprocess(obs))
        if not deterministic:
            if noise is None:
                noise = D.gaussian_noise(y.shape, generator, y.device, y.dtype)
            y = (y + self.exploration_noise * noise).clamp(-1.0, 1.0)
        zeros = torch.zeros(y.shape[:-1], device=y.device, dtype=y.dtype)
        return PolicyOutput(self.to_env(y), zeros, zeros)

    def fisher_log_prob(self, obs: Tensor, generator: torch.Generator | None) -> Tensor:
        """``[N]`` log-density of one exploring sample per row under the exploration Gaussian ``N(tanh(actor(x)),
        exploration_noise^2)`` (the bounds' clamp aside; the sample held fixed): what EWC's Fisher is estimated
        from (:mod:`rl_gpu.algos.anchor`). A deterministic actor has no other density, so it needs
        ``exploration_noise`` > 0."""
        if not self.exploration_noise > 0:
            raise ValueError("EWC weighs a TD3 actor by the Fisher of its exploration noise: it needs "
                             "exploration_noise > 0")
        y = self.squashed(self.preprocess(obs))
        noise = D.gaussian_noise(y.shape, generator, y.device, y.dtype)
        log_std = torch.full_like(y, math.log(self.exploration_noise))
        return D.gaussian_log_prob(y, log_std, (y + self.exploration_noise * noise).detach())

    def config(self) -> dict:
        """Constructor arguments, enough to rebuild the network from a checkpoint."""
        return {**self._config("deterministic"), "exploration_noise": self.exploration_noise}
