"""A frame task for checking pixel policies: a dot on a ``size x size`` board of bool bit planes.

The dot is in channel 0 (the other channels are all ones); the action says which third of the columns it is in
(3 actions), reward 1 when right. The dot moves on deterministically; episodes of 16 steps. Only the frame's
layout tells the answer, so a CNN that reads the frames learns it in a few updates (``tests/nn/test_composed.py``);
``benchmarks/gpu_check_policies.py`` times PPO on it at MinAtar's 10x10 frame size.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from rl_gpu.envs.base import TensorEnv


class Dot(NamedTuple):
    cell: Tensor
    """``[N]`` int64 in ``0 .. size**2 - 1``: where the dot is."""


class DotFrames(TensorEnv[Dot]):
    """``[N, size, size, channels]`` bool frames (default 10x10x4); see the module docstring."""

    obs_shape = (10, 10, 4)
    num_actions = 3
    max_episode_steps = 16
    obs_dtype = torch.bool

    def __init__(self, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None, *,
                 size: int = 10, channels: int = 4, **kwargs) -> None:
        if size < 3 or channels < 1:
            raise ValueError(f"size must be at least 3 and channels at least 1, got {size} and {channels}")
        self.size = size
        self.obs_shape = (size, size, channels)
        super().__init__(num_envs, device, seed, **kwargs)

    def _sample_initial_state(self, n: int, g: torch.Generator) -> Dot:
        return Dot(torch.randint(0, self.size**2, (n,), generator=g, device=self.device))

    def _transition(self, s: Dot, a: Tensor) -> tuple[Dot, Tensor, Tensor]:
        answer = torch.div((s.cell % self.size) * 3, self.size, rounding_mode="floor")   # the column's third
        nxt = Dot((s.cell * 7 + 3) % self.size**2)
        return nxt, (a == answer).float(), torch.zeros_like(a, dtype=torch.bool)

    def _observe(self, s: Dot) -> Tensor:
        n, size = s.cell.shape[0], self.size
        dot = torch.nn.functional.one_hot(s.cell, size * size).bool().view(n, size, size, 1)
        rest = torch.ones(n, size, size, self.obs_shape[2] - 1, dtype=torch.bool, device=self.device)
        return torch.cat([dot, rest], dim=-1)
