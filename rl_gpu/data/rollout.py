"""Rollout storage: the ``[T, N]`` transitions an on-policy algorithm learns from.

Shape legend: T = steps per rollout, N = environments, O = observation shape, A = discrete actions,
D = continuous action dimensions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from rl_gpu.core.pytree import clone_tree, tree_bytes
from rl_gpu.core.types import EnvSpec
from rl_gpu.data.episodes import episode_metrics


@dataclass
class Rollout:
    """A ``[T, N]`` batch of transitions: storage only, filled by a collector (:mod:`rl_gpu.collect`) with what
    the environment returned and what the acting policy decided (its ``log_prob`` and ``value`` outputs)."""

    obs: Tensor
    """``[T, N, *O]`` float32: observation each action was chosen in."""
    action_mask: Tensor
    """``[T, N, A]`` bool: legal actions in ``obs`` (``[T, N, 0]`` for continuous actions)."""
    action: Tensor
    """``[T, N]`` int64 (``[T, N, D]`` float32 for continuous actions): the action taken."""
    log_prob: Tensor
    """``[T, N]``: log-probability of ``action`` under the collecting policy (learner rows)."""
    value: Tensor
    """``[T, N]``: V(obs) under the collecting critic."""
    reward: Tensor
    """``[T, N]``: reward of the transition, from the learner's seat."""
    terminated: Tensor
    """``[T, N]`` bool: the transition ended the game or task (no bootstrap)."""
    truncated: Tensor
    """``[T, N]`` bool: the time limit cut the episode after the transition (bootstrap from ``final_value``)."""
    final_value: Tensor
    """``[T, N]``: V(final_obs) where ``truncated``, else 0."""
    bootstrap_value: Tensor
    """``[N]``: V of the observation after the last step (0 in episodic mode, where every game ended)."""
    weight: Tensor
    """``[T, N]`` float32: 1 for a learner decision in a live episode, 0 for opponent moves and padding."""
    live: Tensor
    """``[T, N]`` bool: the step is a real transition (not padding after the row's game ended)."""
    learner_seat: Tensor
    """``[N]`` int64: the learner's seat in each row (0 for single-player tasks)."""
    episode_return: Tensor
    """``[T, N]`` float32: the learner's return of the episode that ended at this step, 0 elsewhere."""
    episode_length: Tensor
    """``[T, N]`` int64: length of the episode that ended at this step, 0 elsewhere."""
    all_weights_one: bool = False
    """Every ``weight`` is 1 by construction (single-player continuing collection): an update may skip the
    weights (plain means; the same values with fewer operations)."""
    critic_obs: Tensor | None = None
    """``[T, N, C]`` float32: the ``critic`` group's privileged observation alongside ``obs`` (what an asymmetric
    critic reads with it), for environments with that group; None otherwise. ``value`` and ``final_value`` were
    computed from it at collection time."""
    policy_state0: Any = None
    """A recurrent learner's state before the first step (``[N, ...]`` tensors; what replaying the rollout's
    sequences starts from); None for feed-forward policies."""
    policy_state: Any = None
    """A recurrent learner's state after the last step, episode ends reset (where the next rollout continues);
    None for feed-forward policies."""
    opponent_state: Any = None
    """An opponent with memory: its state after the last step, episode ends reset (where the next continuing
    rollout's opponent goes on); None otherwise."""
    acting: Tensor | None = None
    """``[T, N, M]`` bool: the agents that acted, for environments of M > 1 agents acting at once (whose
    per-agent fields carry the agent axis after N: :mod:`rl_gpu.collect.agents`); None otherwise."""
    controlled: Tensor | None = None
    """``[N, M]`` bool: the agents the learner played (the others were the opponent's); None for M = 1."""

    @property
    def observations(self) -> Tensor:
        """Alias of ``obs`` (the name the quickstart uses)."""
        return self.obs

    @property
    def weights(self) -> Tensor:
        """Alias of ``weight`` (the name the quickstart uses)."""
        return self.weight

    @property
    def done(self) -> Tensor:
        """``[T, N]`` bool: ``terminated | truncated``."""
        return self.terminated | self.truncated

    @property
    def num_steps(self) -> int:
        return self.reward.shape[0]

    @property
    def num_envs(self) -> int:
        return self.reward.shape[1]

    def storage_bytes(self) -> int:
        """Bytes held by this rollout's tensors (what one rollout of storage costs)."""
        return tree_bytes(self)

    def clone(self) -> "Rollout":
        """A copy with storage of its own (a collector that reuses its storage overwrites the original)."""
        return clone_tree(self)

    def transitions(self) -> Tensor:
        """0-dim int64: environment transitions actually taken (padding slots are not counted)."""
        return self.live.sum()

    def team_return(self) -> Tensor:
        """``[T, N]``: ``episode_return``, averaged over the controlled agents for M > 1 agents."""
        if self.controlled is None:
            return self.episode_return
        weight = self.controlled.float()
        return (self.episode_return * weight).sum(-1) / weight.sum(-1).clamp(min=1)

    def agents_as_rows(self, critic: bool = True) -> "Rollout":
        """A rollout of M > 1 agents (``[T, N, M]``) as one of ``N * M`` rows (``[T, N * M]``), row ``n * M + m``
        being agent m of world n: what a learner that shares one network across agents trains on (the
        reward normaliser then keeps a running return per agent). Per-world fields (``terminated``,
        ``truncated``, ``live``, ``episode_length``) are repeated for each agent; the world's ``critic`` group
        is handed to each of its agents (``critic=False`` drops it: independent critics). A rollout of one agent
        per row is returned as it is."""
        if self.acting is None:
            return self if critic or self.critic_obs is None else dataclasses.replace(self, critic_obs=None)
        t, n, m = self.acting.shape

        def rows(x: Tensor) -> Tensor:
            return x.reshape(t, n * m, *x.shape[3:])

        def per_world(x: Tensor) -> Tensor:
            return x[:, :, None].expand(t, n, m, *x.shape[2:]).reshape(t, n * m, *x.shape[2:])

        return Rollout(
            obs=rows(self.obs), action_mask=rows(self.action_mask), action=rows(self.action),
            log_prob=rows(self.log_prob), value=rows(self.value), reward=rows(self.reward),
            terminated=per_world(self.terminated), truncated=per_world(self.truncated),
            final_value=rows(self.final_value), bootstrap_value=self.bootstrap_value.reshape(n * m),
            weight=rows(self.weight), live=per_world(self.live),
            learner_seat=torch.zeros(n * m, dtype=torch.long, device=self.reward.device),
            episode_return=rows(self.episode_return), episode_length=per_world(self.episode_length),
            critic_obs=per_world(self.critic_obs) if critic and self.critic_obs is not None else None,
            policy_state0=self.policy_state0, policy_state=self.policy_state,
        )

    def episode_stats(self) -> dict[str, Tensor]:
        """0-dim tensors over the episodes that ended in this rollout: count, mean return (with M agents: of the
        controlled agents' mean), mean length, and the learner's win rate (share of episodes with a positive
        return)."""
        return episode_metrics(self.done, self.team_return(), self.episode_length)


def empty_rollout(spec: EnvSpec, num_steps: int, num_envs: int, device: torch.device) -> Rollout:
    """Uninitialised storage for one ``[num_steps, num_envs]`` rollout of an environment described by ``spec``."""
    t, n = num_steps, num_envs

    def empty(*shape: int, dtype: torch.dtype = torch.float32) -> Tensor:
        return torch.empty(shape, dtype=dtype, device=device)

    action = empty(t, n, *spec.action_shape) if spec.is_continuous else empty(t, n, dtype=torch.long)
    flags = {k: empty(t, n, dtype=torch.bool) for k in ("live", "terminated", "truncated")}
    floats = {k: empty(t, n) for k in ("log_prob", "value", "weight", "reward", "final_value", "episode_return")}
    critic = spec.obs_groups.get("critic")
    return Rollout(obs=empty(t, n, *spec.obs_shape, dtype=spec.obs_dtype()),
                   action_mask=empty(t, n, spec.num_actions, dtype=torch.bool),
                   action=action, episode_length=empty(t, n, dtype=torch.long), bootstrap_value=empty(n),
                   learner_seat=empty(n, dtype=torch.long), **flags, **floats,
                   critic_obs=empty(t, n, *critic, dtype=spec.obs_dtype("critic")) if critic is not None else None)
