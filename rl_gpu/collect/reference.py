"""The reference collector: any :class:`~rl_gpu.core.types.VecEnv` stepped through its ``step`` method, one
plain Python loop, the definition every faster collector is tested equal to.

Shape legend: T = steps per rollout, N = environments.

Two modes:

- *continuing* (single-player tasks such as CartPole): the batch keeps running across rollouts with
  same-step auto-reset; every step is a learner decision; the last observation's value bootstraps.
- *episodic* (``episodic=True``; turn-based games such as roulette): every row starts a fresh game, the learner
  takes a random seat per row and a fixed opponent plays the other; ``T`` covers the longest possible game, so
  every game finishes inside the rollout and the steps after a row's game are padding. ``weight`` is 1 exactly
  for learner decisions in a live game, and rewards are the learner seat's. An opponent with memory has its own
  state, advancing on its own turns (:class:`~rl_gpu.collect.seats.OpponentPlayer`).

A recurrent learner (:mod:`rl_gpu.nn.memory`) acts with an explicit state: it starts at ``policy_state`` (else,
and in episodic mode, its ``initial_state``), is reset to the initial state in exactly the rows whose episode
ended, and advances only on the learner's own turns; the rollout records the state before its first step
(``policy_state0``) and after its last (``policy_state``, where the next rollout continues).

An environment with a ``critic`` observation group (``StepResult.critic_obs``) has it recorded in the rollout
and handed to the learner's ``act`` and ``value`` as ``critic_obs=`` (an asymmetric critic's values, the
truncation bootstrap from ``final_critic_obs`` included); without one the policy is called exactly as before.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor

from rl_gpu.collect.agents import collect_agents
from rl_gpu.collect.seats import OpponentPlayer, seat_column
from rl_gpu.core.pytree import tree_where
from rl_gpu.core.types import Actor, VecEnv
from rl_gpu.data.episodes import EpisodeTally
from rl_gpu.data.rollout import Rollout
from rl_gpu.nn.actor_critic import UniformRandomPolicy
from rl_gpu.nn.memory import is_recurrent, reset_state

EPISODES_CHECK_EVERY = 16
"""With ``record="episodes"``, every this many steps one host read asks whether any row's episode is still on, and
the collection ends when none is (an evaluation of short episodes does not play out the whole horizon)."""


@torch.no_grad()
def collect(
    policy: Actor,
    env: VecEnv,
    num_steps: int,
    policy_rng: torch.Generator | None = None,
    *,
    episodic: bool = False,
    opponent: Actor | None = None,
    opponent_rng: torch.Generator | None = None,
    learner_seat: Tensor | None = None,
    deterministic: bool = False,
    policy_state: Any = None,
    controlled: Tensor | None = None,
    record: Literal["rollout", "episodes"] = "rollout",
    opponent_state: Any = None,
) -> Rollout | EpisodeTally:
    """Run ``num_steps`` batched steps of ``env`` and return them as a :class:`Rollout`, or only the episodes'
    outcomes.

    Args:
        policy: the learner (``act`` and, for bootstrapping, ``value``).
        env: the batch of N environments; in continuing mode it carries on from its current state.
        num_steps: T.
        policy_rng: generator for the learner's sampling (on ``env.device``).
        episodic: reset every row first and treat steps after a row's episode end as padding.
        opponent: plays the other seats of a multi-player game (default: uniform random legal actions).
        opponent_rng: generator for the opponent's sampling and the seat draw.
        learner_seat: ``[N]`` seats for the learner; default: uniform at random per row (seat 0 if P = 1). With
            M > 1 agents: the one agent per world the learner plays (a game's seats as agents), else unused.
        deterministic: the learner takes its most probable action instead of sampling.
        policy_state: a recurrent learner's state at the first step (continuing mode: the previous rollout's
            ``policy_state``); None, and always in episodic mode: its ``initial_state``.
        controlled: environments of M > 1 agents acting at once: ``[N, M]`` bool, the agents the learner plays
            (default: all; :func:`rl_gpu.collect.agents.collect_agents`, which collects them).
        record: ``"rollout"``: every step; ``"episodes"`` (episodic mode; evaluation): an
            :class:`~rl_gpu.data.episodes.EpisodeTally` of each row's episode only, with the same actions and
            outcomes and none of the ``[T, N, ...]`` storage (nor the values that only learning needs); it stops
            early once every row's episode has ended (:data:`EPISODES_CHECK_EVERY`).
        opponent_state: M > 1 agents, continuing mode: an opponent with memory's state at the first step (the
            previous rollout's ``opponent_state``; :func:`rl_gpu.collect.agents.collect_agents`).
    """
    if record not in ("rollout", "episodes") or (record == "episodes" and not episodic):
        raise ValueError(f"record is 'rollout', or 'episodes' with episodic=True; got {record!r}")
    if env.spec.num_agents > 1:
        rollout = collect_agents(policy, env, num_steps, policy_rng, episodic=episodic, controlled=controlled,
                                 opponent=opponent, opponent_rng=opponent_rng, deterministic=deterministic,
                                 learner_seat=learner_seat, policy_state=policy_state,
                                 opponent_state=opponent_state)
        return rollout if record == "rollout" else tally_rollout(rollout)
    if controlled is not None:
        raise ValueError(f"controlled applies to environments of several agents; {type(env).__name__} has one")
    if env.num_players > 1 and not episodic:
        raise ValueError(
            f"{type(env).__name__} has {env.num_players} players: collect complete games with episodic=True"
        )
    n, device = env.num_envs, env.device
    step = env.reset() if episodic else env.observe()
    if learner_seat is None:
        learner_seat = torch.randint(0, env.num_players, (n,), generator=opponent_rng, device=device)
    opponent = OpponentPlayer(opponent if opponent is not None else UniformRandomPolicy(), n)
    live = torch.ones(n, dtype=torch.bool, device=device)
    keep = record == "rollout"
    steps: dict[str, list[Tensor]] = {k: [] for k in Rollout.__dataclass_fields__}
    tally = EpisodeTally.start(n, learner_seat)
    recurrent = is_recurrent(policy)
    initial = policy.initial_state(n) if recurrent else None
    state = initial if episodic or policy_state is None else policy_state
    state0 = state
    for t in range(num_steps):
        if not keep and t % EPISODES_CHECK_EVERY == 0 and t > 0 and not bool(live.any()):
            # Every row's episode has ended: the steps left would only be padding, which a tally ignores.
            break
        learner_turn = step.current_player == learner_seat
        if recurrent:
            out, after = policy.act_with_state(step.obs, state, step.action_mask, policy_rng, deterministic,
                                               **critic_kwargs(step.critic_obs))
            after = tree_where(learner_turn, after, state) if env.num_players > 1 else after
        else:
            out = policy.act(step.obs, step.action_mask, policy_rng, deterministic, **critic_kwargs(step.critic_obs))
        action = out.action
        if env.num_players > 1:
            other = opponent.act(step.obs, step.action_mask, opponent_rng, ~learner_turn)
            action = torch.where(learner_turn, action, other.action)
        if keep:
            if step.critic_obs is not None:
                steps["critic_obs"].append(step.critic_obs)
            for name, value in (("obs", step.obs), ("action_mask", step.action_mask), ("action", action),
                                ("log_prob", out.log_prob), ("value", out.value),
                                ("weight", (live & learner_turn).float()), ("live", live)):
                steps[name].append(value)

        step = env.step(action)
        reward = seat_column(step.reward, learner_seat)
        ep_return = seat_column(step.episode_return, learner_seat)
        terminated, truncated = step.terminated & live, step.truncated & live
        if env.max_episode_steps is not None and keep:
            final_critic = critic_kwargs(step.final_critic_obs)
            final = (policy.value_with_state(step.final_obs, after, **final_critic) if recurrent
                     else policy.value(step.final_obs, **final_critic))
            final_value = torch.where(truncated, final, 0.0)
        else:
            final_value = torch.zeros_like(reward)
        done = terminated | truncated
        if keep:
            for name, value in (("reward", torch.where(live, reward, 0.0)), ("terminated", terminated),
                                ("truncated", truncated), ("final_value", final_value),
                                ("episode_return", torch.where(done, ep_return, 0.0)),
                                ("episode_length", torch.where(done, step.episode_length, 0))):
                steps[name].append(value)
        else:
            tally = tally.add(done, ep_return, step.episode_length)
        if episodic:
            live = live & ~done
        if recurrent:
            state = reset_state(step.done, initial, after)
        opponent.episodes_ended(step.done)

    if not keep:
        return tally
    stacked = {k: torch.stack(v) for k, v in steps.items() if v}
    if episodic:
        bootstrap = torch.zeros(n, device=device)
    elif recurrent:
        bootstrap = policy.value_with_state(step.obs, state, **critic_kwargs(step.critic_obs))
    else:
        bootstrap = policy.value(step.obs, **critic_kwargs(step.critic_obs))
    return Rollout(**stacked, bootstrap_value=bootstrap, learner_seat=learner_seat, policy_state0=state0,
                   policy_state=state)


def critic_kwargs(critic_obs: Tensor | None) -> dict[str, Tensor]:
    """``{"critic_obs": critic_obs}`` for a policy's ``act``/``value`` when the environment has a ``critic``
    group, else nothing (policies without one are called exactly as before)."""
    return {} if critic_obs is None else {"critic_obs": critic_obs}


def episode_horizon(env: VecEnv) -> int:
    """The number of steps that lets every episode of ``env`` finish from a reset."""
    horizon = env.spec.episode_horizon
    if horizon is None:
        raise ValueError(f"{type(env).__name__} has no bounded episode length: give num_steps explicitly")
    return int(horizon)


def collect_episodes(
    policy: Actor,
    env: VecEnv,
    policy_rng: torch.Generator | None = None,
    opponent_rng: torch.Generator | None = None,
    *,
    opponent: Actor | None = None,
    num_steps: int | None = None,
    deterministic: bool = False,
) -> Rollout:
    """Play one complete game in every row of ``env`` (the quickstart's collection) and return the ``[T, N]`` batch.

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


def tally_rollout(rollout: Rollout) -> EpisodeTally:
    """The :class:`EpisodeTally` of an episodic rollout (each row's episode ends at most once in it)."""
    ended = rollout.done
    return EpisodeTally((rollout.team_return() * ended).sum(0), (rollout.episode_length * ended).sum(0),
                        ended.any(0), rollout.learner_seat)
