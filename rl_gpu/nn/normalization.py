"""Running statistics that normalise what a network sees: observations (:class:`RunningMeanStd`) and rewards
(:class:`RewardNormalizer`). Both keep their statistics as buffers, so they travel with ``state_dict``,
checkpoints and exports, and both update with pure tensor maths (no host synchronisation), so they run inside
compiled code and CUDA graphs.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from rl_gpu.runtime.distributed import merge_moments



def to_float(x: Tensor) -> Tensor:
    """``x`` as float32: observations of ``uint8``/``bool`` groups (kept so in storage) enter a network here;
    float32 ones pass unchanged, with no copy. An eager CPU bool tensor is read as its bytes (0 or 1, the same
    values): ATen's CPU cast from bool runs several times slower than the one from uint8."""
    if x.dtype == torch.float32:
        return x
    if not torch.jit.is_scripting() and x.dtype == torch.bool and x.device.type == "cpu" and _eager(x):
        x = x.view(torch.uint8)
    return x.float()


@torch.jit.unused
def _eager(x):  # unannotated: TorchScript reads an unannotated argument as a Tensor
    """Outside a compile, an export, a trace and a functorch transform (where the cast stays the plain one:
    portable, and fused where compiled)."""
    return not (torch.compiler.is_compiling() or torch.jit.is_tracing()
                or torch._C._functorch.is_functorch_wrapped_tensor(x))


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
        # Under torchrun the batch is every rank's rows together, so every rank keeps the same statistics.
        n, batch_mean, batch_var = merge_moments(n, batch_mean, batch_var)
        total = self.count + n
        # A batch of zero weight into empty statistics would divide 0 by 0; it must leave them as they are.
        safe_total = torch.where(total > 0, total, torch.ones_like(total))
        delta = batch_mean - self.mean
        self.mean += delta * (n / safe_total)
        spread = delta.square() * self.count * n / safe_total
        merged = (self.var * self.count + batch_var * n + spread) / safe_total
        self.var.copy_(torch.where(total > 0, merged, self.var))
        self.count.copy_(total)

    def forward(self, x: Tensor) -> Tensor:
        """``(x - mean) / sqrt(var + eps)``, clipped to ``[-clip, clip]``; identity before the first update."""
        scale = torch.rsqrt(self.var + self.epsilon).to(x.dtype)
        normalized = ((x - self.mean.to(x.dtype)) * scale).clamp(-self.clip, self.clip)
        return torch.where(self.count > 0, normalized, x)


class ValueNormalizer(nn.Module):
    """Value targets in units of their running mean and standard deviation (MAPPO's value normalisation): the
    critic learns ``(G - mean) / std``, and what it outputs is read as ``v * std + mean`` wherever a value in the
    task's units is needed (advantages, bootstraps). Keeps the critic's targets near unit scale whatever the
    rewards' scale, which drifts as the policy improves. Identity both ways before the first :meth:`update`."""

    def __init__(self, epsilon: float = 1e-5) -> None:
        super().__init__()
        self.stats = RunningMeanStd(1, clip=math.inf, epsilon=epsilon)

    def update(self, returns: Tensor, weight: Tensor | None = None) -> None:
        """Merge the value targets ``returns`` (any shape; ``weight`` of the same shape, 0 = left out)."""
        self.stats.update(returns.reshape(-1, 1), None if weight is None else weight.reshape(-1))

    def _moments(self, x: Tensor) -> tuple[Tensor, Tensor]:
        stats = self.stats
        return stats.mean[0].to(x.dtype), torch.sqrt(stats.var[0] + stats.epsilon).to(x.dtype)

    def normalize(self, x: Tensor) -> Tensor:
        mean, std = self._moments(x)
        return torch.where(self.stats.count > 0, (x - mean) / std, x)

    def denormalize(self, x: Tensor) -> Tensor:
        mean, std = self._moments(x)
        return torch.where(self.stats.count > 0, x * std + mean, x)


class RewardNormalizer(nn.Module):
    """Rewards scaled by the running standard deviation of the discounted return (VecNormalize's reward
    normalisation), for ``N`` environments whose rows continue from one rollout to the next.

    Shape legend: T = steps of a rollout, N = environments.

    For each row a running discounted return ``R`` is carried across rollouts (buffer ``ret``, ``[N]``
    float64). For each step ``t`` of a rollout, in order::

        R     <- gamma * R + r_t          (recorded as R_t)
        R     <- 0  where done_t          (the next episode starts from 0)

    Every recorded ``R_t`` whose ``weight`` is positive joins the running mean and variance of the return
    (``return_rms``, a :class:`RunningMeanStd` of size 1: one weighted Chan merge per rollout), and then::

        r'_t = clamp(r_t / sqrt(var + eps), -clip, clip)

    with the variance that already includes this rollout. The mean is not subtracted: shifting rewards would
    change which policy is optimal (a constant per-step bonus rewards long episodes); dividing by the scale of
    the return does not.

    ``gamma`` is applied once per step, opponent moves and padding included (their rewards still belong to the
    learner's return); only the statistics skip the steps of weight 0.

    Pure tensor maths with static shapes: the buffers are updated in place and nothing is read on the host, so
    :meth:`normalize` runs under ``torch.compile`` and inside a captured CUDA graph.
    """

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0, epsilon: float = 1e-8) -> None:
        super().__init__()
        if num_envs <= 0:
            raise ValueError(f"num_envs must be positive, got {num_envs}")
        self.num_envs = num_envs
        self.gamma = float(gamma)
        self.clip = float(clip)
        self.epsilon = float(epsilon)
        self.register_buffer("ret", torch.zeros(num_envs, dtype=torch.float64))
        self.return_rms = RunningMeanStd(1, clip=float("inf"), epsilon=epsilon)

    @torch.no_grad()
    def normalize(self, reward: Tensor, done: Tensor, weight: Tensor | None = None) -> Tensor:
        """Advance the running returns over one ``[T, N]`` rollout, merge them into the statistics and return
        the scaled rewards.

        Args:
            reward: ``[T, N]`` float, the rollout's rewards.
            done: ``[T, N]`` bool, the episode ended with the transition (terminated or truncated).
            weight: optional ``[T, N]`` float or bool; returns at steps of weight 0 stay out of the
                statistics.

        Returns:
            ``[T, N]`` in ``reward``'s dtype: ``clamp(reward / sqrt(var + eps), -clip, clip)``.
        """
        if reward.shape[1] != self.num_envs:
            raise ValueError(f"reward normaliser built for {self.num_envs} environments, got a rollout of "
                             f"{reward.shape[1]}")
        ret = self.ret
        returns = []
        for t in range(reward.shape[0]):
            ret = ret * self.gamma + reward[t].double()
            returns.append(ret)
            ret = torch.where(done[t], torch.zeros_like(ret), ret)
        self.ret.copy_(ret)
        self.return_rms.update(torch.stack(returns)[..., None], weight)
        scale = torch.rsqrt(self.return_rms.var + self.epsilon).to(reward.dtype)
        return (reward * scale).clamp(-self.clip, self.clip)

    def extra_repr(self) -> str:
        return f"num_envs={self.num_envs}, gamma={self.gamma}, clip={self.clip}"
