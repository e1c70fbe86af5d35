"""Running statistics that normalise what a network sees: observations (:class:`RunningMeanStd`) and rewards
(:class:`RewardNormalizer`). Both keep their statistics as buffers, so they travel with ``state_dict``,
checkpoints and exports, and both update with pure tensor maths (no host synchronisation), so they run inside
compiled code and CUDA graphs.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


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
