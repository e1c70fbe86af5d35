"""A two-agent task only a centralised critic can value: each agent sees its own coin, both are paid when the
coins differ (``tests/algos/test_mappo.py``, ``tests/nn/test_per_agent.py``)."""

from __future__ import annotations

from typing import NamedTuple

import torch

from rl_gpu.envs.base import TensorEnv


class Bits(NamedTuple):
    bits: torch.Tensor
    """[N, 2] float: each agent's private coin."""


class HiddenXorEnv(TensorEnv[Bits]):
    """Each of two agents sees only its own coin; both are paid 1 when the coins differ. One-step episodes:
    the value of a state is its reward, which an agent's own coin says nothing about (XOR) while both coins
    say everything. The critic group is both coins."""

    num_agents = 2
    obs_shape = (1,)
    num_actions = 2
    critic_obs_shape = (2,)
    max_episode_steps = 1

    def _sample_initial_state(self, n, g):
        return Bits(torch.randint(0, 2, (n, 2), generator=g, device=self.device).float())

    def _transition(self, s, action):
        reward = (s.bits[:, 0] != s.bits[:, 1]).float()
        return s, reward[:, None].expand(-1, 2).clone(), torch.ones_like(reward, dtype=torch.bool)

    def _observe(self, s):
        return s.bits[:, :, None].clone()

    def _observe_critic(self, s):
        return s.bits.clone()
