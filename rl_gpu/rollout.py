"""Collecting fixed-shape ``[T, N]`` rollouts from tensor environments.

Shape legend: T = steps per rollout, N = environments, O = observation shape, A = discrete actions.

Two modes share one collector:

- *continuing* (single-player tasks such as CartPole): the batch keeps running across rollouts with
  same-step auto-reset; every step is a learner decision; the last observation's value bootstraps.
- *episodic* (``episodic=True``; turn-based games such as roulette): every row starts a fresh game, the learner
  takes a random seat per row and a fixed opponent plays the other; ``T`` covers the longest possible game, so
  every game finishes inside the rollout and the steps after a row's game are padding. ``weight`` is 1 exactly
  for learner decisions in a live game, and rewards are the learner seat's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from rl_gpu.envs.base import TensorEnv
from rl_gpu.policy import PolicyOutput, UniformRandomPolicy


class Actor(Protocol):
    """Anything that picks actions for a batch of observations (policies and opponents)."""

    def act(
        self, obs: Tensor, action_mask: Tensor, generator: torch.Generator | None = None, deterministic: bool = False
    ) -> PolicyOutput: ...


@dataclass
class Rollout:
    """A ``[T, N]`` batch of transitions, as collected; the input of :func:`rl_gpu.optimization.update_policy`."""

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

    @property
    def observations(self) -> Tensor:
        """Alias of ``obs`` (the name used by seed 000's quickstart)."""
        return self.obs

    @property
    def weights(self) -> Tensor:
        """Alias of ``weight`` (the name used by seed 000's quickstart)."""
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

    def transitions(self) -> Tensor:
        """0-dim int64: environment transitions actually taken (padding slots are not counted)."""
        return self.live.sum()

    def episode_stats(self) -> dict[str, Tensor]:
        """0-dim tensors over the episodes that ended in this rollout: count, mean return, mean length,
        and the learner's win rate (share of episodes with a positive return)."""
        ended = self.done
        count = ended.sum()
        denom = count.clamp(min=1).float()
        return {
            "episodes": count,
            "episode_return": torch.where(ended, self.episode_return, 0.0).sum() / denom,
            "episode_length": torch.where(ended, self.episode_length, 0).sum().float() / denom,
            "win_rate": (ended & (self.episode_return > 0)).sum().float() / denom,
        }


@torch.no_grad()
def collect(
    policy: Actor,
    env: TensorEnv,
    num_steps: int,
    policy_rng: torch.Generator | None = None,
    *,
    episodic: bool = False,
    opponent: Actor | None = None,
    opponent_rng: torch.Generator | None = None,
    learner_seat: Tensor | None = None,
    deterministic: bool = False,
) -> Rollout:
    """Run ``num_steps`` batched steps of ``env`` and return them as a :class:`Rollout`.

    Args:
        policy: the learner (``act`` and, for bootstrapping, ``value``).
        env: the batch of N environments; in continuing mode it carries on from its current state.
        num_steps: T.
        policy_rng: generator for the learner's sampling (on ``env.device``).
        episodic: reset every row first and treat steps after a row's episode end as padding.
        opponent: plays the other seats of a multi-player game (default: uniform random legal actions).
        opponent_rng: generator for the opponent's sampling and the seat draw.
        learner_seat: ``[N]`` seats for the learner; default: uniform at random per row (seat 0 if P = 1).
        deterministic: the learner takes its most probable action instead of sampling.
    """
    if env.num_players > 1 and not episodic:
        raise ValueError(
            f"{type(env).__name__} has {env.num_players} players: collect complete games with episodic=True"
        )
    n, device = env.num_envs, env.device
    step = env.reset() if episodic else env.observe()
    if learner_seat is None:
        learner_seat = torch.randint(0, env.num_players, (n,), generator=opponent_rng, device=device)
    opponent = opponent if opponent is not None else UniformRandomPolicy()
    live = torch.ones(n, dtype=torch.bool, device=device)
    record: dict[str, list[Tensor]] = {k: [] for k in Rollout.__dataclass_fields__}
    for _ in range(num_steps):
        out = policy.act(step.obs, step.action_mask, policy_rng, deterministic)
        action = out.action
        learner_turn = step.current_player == learner_seat
        if env.num_players > 1:
            other = opponent.act(step.obs, step.action_mask, opponent_rng)
            action = torch.where(learner_turn, action, other.action)
        record["obs"].append(step.obs)
        record["action_mask"].append(step.action_mask)
        record["action"].append(action)
        record["log_prob"].append(out.log_prob)
        record["value"].append(out.value)
        record["weight"].append((live & learner_turn).float())
        record["live"].append(live)

        step = env.step(action)
        reward = step.reward if step.reward.dim() == 1 else step.reward.gather(1, learner_seat[:, None]).squeeze(1)
        ep_return = (
            step.episode_return
            if step.episode_return.dim() == 1
            else step.episode_return.gather(1, learner_seat[:, None]).squeeze(1)
        )
        terminated, truncated = step.terminated & live, step.truncated & live
        if env.max_episode_steps is not None:
            final_value = torch.where(truncated, policy.value(step.final_obs), 0.0)
        else:
            final_value = torch.zeros_like(reward)
        done = terminated | truncated
        record["reward"].append(torch.where(live, reward, 0.0))
        record["terminated"].append(terminated)
        record["truncated"].append(truncated)
        record["final_value"].append(final_value)
        record["episode_return"].append(torch.where(done, ep_return, 0.0))
        record["episode_length"].append(torch.where(done, step.episode_length, 0))
        if episodic:
            live = live & ~done

    stacked = {k: torch.stack(v) for k, v in record.items() if v}
    bootstrap = torch.zeros(n, device=device) if episodic else policy.value(step.obs)
    return Rollout(**stacked, bootstrap_value=bootstrap, learner_seat=learner_seat)


def episode_horizon(env: TensorEnv) -> int:
    """The number of steps that lets every episode of ``env`` finish from a reset."""
    horizon = getattr(env, "max_game_length", None) or env.max_episode_steps
    if horizon is None:
        raise ValueError(f"{type(env).__name__} has no bounded episode length: give num_steps explicitly")
    return int(horizon)


def collect_episodes(
    policy: Actor,
    env: TensorEnv,
    policy_rng: torch.Generator | None = None,
    opponent_rng: torch.Generator | None = None,
    *,
    opponent: Actor | None = None,
    num_steps: int | None = None,
    deterministic: bool = False,
) -> Rollout:
    """Play one complete game in every row of ``env`` (seed 000's collection) and return the ``[T, N]`` batch.

    The learner's seat is drawn per row with ``opponent_rng``; the opponent (uniform random over legal actions
    by default) plays the other seat; ``T`` defaults to the longest possible game.
    """
    return collect(
        policy,
        env,
        num_steps if num_steps is not None else episode_horizon(env),
        policy_rng,
        episodic=True,
        opponent=opponent,
        opponent_rng=opponent_rng,
        deterministic=deterministic,
    )
