"""Collecting worlds of M agents acting at once (``spec.num_agents`` M > 1): the reference loop with an agent axis.

Shape legend: T steps, N worlds, M agents, O one agent's observation, A discrete actions, C the ``critic`` group.

Every agent's observation row is acted on by one policy (parameter sharing: the ``[N, M, O]`` observations are
``N * M`` rows for it); ``controlled`` ``[N, M]`` says which agents the learner plays, the others are played by
the opponent (uniform random over legal actions by default). The rollout keeps the agent axis in ``obs``,
``action``, ``action_mask``, ``log_prob``, ``value``, ``reward``, ``final_value``, ``episode_return``,
``weight`` and ``bootstrap_value``, records ``acting`` ``[T, N, M]`` and ``controlled`` ``[N, M]``, and keeps
``terminated``, ``truncated``, ``live`` and ``episode_length`` per world (``[T, N]``). ``weight`` is 1 for a
controlled agent that acts in a live world. A ``critic`` group is per world (``[N, C]``, the global state a
centralised critic reads) and is handed to every agent's critic.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from rl_gpu.collect.seats import OpponentPlayer
from rl_gpu.core.pytree import tree_where
from rl_gpu.core.types import Actor, VecEnv
from rl_gpu.data.rollout import Rollout
from rl_gpu.nn.actor_critic import UniformRandomPolicy
from rl_gpu.nn.memory import is_recurrent, reset_state


def _rows(x: Tensor) -> Tensor:
    """``[N, M, ...]`` -> ``[N * M, ...]``."""
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def _critic(critic_obs: Tensor | None, m: int) -> dict[str, Tensor]:
    """The world's ``critic`` group for each of its M agents' rows, as ``act``/``value`` take it."""
    if critic_obs is None:
        return {}
    return {"critic_obs": _rows(critic_obs.unsqueeze(1).expand(-1, m, *critic_obs.shape[1:]))}


def joint_action(policy: Actor, step, generator: torch.Generator | None = None,
                 deterministic: bool = False) -> Tensor:
    """The policy's action for every row of ``step`` (a :class:`~rl_gpu.core.types.StepResult`); with M > 1
    agents, for every agent of every world (``[N, M, ...]``), one policy shared by the agents."""
    if step.acting is None:
        return policy.act(step.obs, step.action_mask, generator, deterministic).action
    n, m = step.obs.shape[:2]
    out = policy.act(_rows(step.obs), _rows(step.action_mask), generator, deterministic)
    return out.action.view(n, m, *out.action.shape[1:])


@torch.no_grad()
def collect_agents(
    policy: Actor,
    env: VecEnv,
    num_steps: int,
    policy_rng: torch.Generator | None = None,
    *,
    episodic: bool = False,
    controlled: Tensor | None = None,
    opponent: Actor | None = None,
    opponent_rng: torch.Generator | None = None,
    deterministic: bool = False,
    learner_seat: Tensor | None = None,
    policy_state: Any = None,
    opponent_state: Any = None,
) -> Rollout:
    """Run ``num_steps`` steps of ``env`` (M > 1 agents per world) and return the ``[T, N, M]`` rollout.

    Args:
        policy: acts for the controlled agents (one row per agent).
        env: N worlds; in continuing mode it carries on from its current state.
        num_steps: T.
        policy_rng: the learner's sampling generator.
        episodic: reset every world first; steps after a world's episode end are padding (``live`` False).
        controlled: ``[N, M]`` bool, the agents the learner plays (default: all).
        opponent: plays the other agents (default: uniform random over legal actions).
        opponent_rng: the opponent's generator.
        deterministic: the learner takes its most probable action.
        learner_seat: ``[N]`` int64, instead of ``controlled``: the learner plays this one agent of each world (a
            turn-based game's seat, :mod:`rl_gpu.envs.seat_agents`), recorded as the rollout's ``learner_seat``.
        policy_state: a learner with memory (:mod:`rl_gpu.nn.memory`): its ``[N * M, ...]`` state at the first step
            (one per agent row; continuing mode: the previous rollout's ``policy_state``); None, and always in
            episodic mode: its initial state. An agent's state advances only at the steps where it acts and is
            reset where its world's episode ended; the rollout records it before the first step and after the last.
        opponent_state: an opponent with memory (a league of a learner with memory): its ``[N * M, ...]`` state at
            the first step (continuing mode: the previous rollout's ``opponent_state``); None: its initial state.
    """
    n, m, device = env.num_envs, env.spec.num_agents, env.device
    if learner_seat is not None:
        if controlled is not None:
            raise ValueError("give controlled or learner_seat, not both")
        controlled = torch.nn.functional.one_hot(learner_seat.to(device), m).bool()
    # The learner plays every agent unless told otherwise: no opponent then acts (a continuous-action world
    # has no uniform random opponent by default).
    everyone = controlled is None
    if controlled is None:
        controlled = torch.ones(n, m, dtype=torch.bool, device=device)
    if tuple(controlled.shape) != (n, m) or controlled.dtype != torch.bool:
        raise ValueError(f"controlled must be a [{n}, {m}] bool tensor, got {controlled.dtype} "
                         f"{list(controlled.shape)}")
    controlled = controlled.to(device)
    opponent = OpponentPlayer(opponent if opponent is not None else UniformRandomPolicy(), n * m,
                              None if episodic else opponent_state)
    step = env.reset() if episodic else env.observe()
    live = torch.ones(n, dtype=torch.bool, device=device)
    record: dict[str, list[Tensor]] = {k: [] for k in Rollout.__dataclass_fields__}
    recurrent = is_recurrent(policy)
    initial = policy.initial_state(n * m) if recurrent else None
    state = initial if episodic or policy_state is None else policy_state
    state0 = state
    for _ in range(num_steps):
        acting = step.acting if step.acting is not None else torch.ones(n, m, dtype=torch.bool, device=device)
        if recurrent:
            out, after = policy.act_with_state(_rows(step.obs), state, _rows(step.action_mask), policy_rng,
                                               deterministic, **_critic(step.critic_obs, m))
            after = tree_where(_rows(acting), after, state)  # an agent's memory moves on its own turns only
        else:
            out = policy.act(_rows(step.obs), _rows(step.action_mask), policy_rng, deterministic,
                             **_critic(step.critic_obs, m))
        action = out.action.view(n, m, *out.action.shape[1:])
        if not everyone:
            other = opponent.act(_rows(step.obs), _rows(step.action_mask), opponent_rng, _rows(acting & ~controlled))
            mine = controlled.view(n, m, *([1] * (out.action.dim() - 1)))
            action = torch.where(mine, action, other.action.view(n, m, *other.action.shape[1:]))
        record["obs"].append(step.obs)
        if step.critic_obs is not None:
            record["critic_obs"].append(step.critic_obs)
        record["action_mask"].append(step.action_mask)
        record["action"].append(action)
        record["log_prob"].append(out.log_prob.view(n, m))
        record["value"].append(out.value.view(n, m))
        record["weight"].append((live[:, None] & controlled & acting).float())
        record["live"].append(live)
        record["acting"].append(acting)

        step = env.step(action)
        terminated, truncated = step.terminated & live, step.truncated & live
        done = terminated | truncated
        if env.spec.max_episode_steps is not None:
            critic = _critic(step.final_critic_obs, m)
            final = (policy.value_with_state(_rows(step.final_obs), after, **critic) if recurrent
                     else policy.value(_rows(step.final_obs), **critic)).view(n, m)
            final_value = torch.where(truncated[:, None], final, 0.0)
        else:
            final_value = torch.zeros(n, m, device=device)
        record["reward"].append(torch.where(live[:, None], step.reward, 0.0))
        record["terminated"].append(terminated)
        record["truncated"].append(truncated)
        record["final_value"].append(final_value)
        record["episode_return"].append(torch.where(done[:, None], step.episode_return, 0.0))
        record["episode_length"].append(torch.where(done, step.episode_length, 0))
        if episodic:
            live = live & ~done
        if recurrent:
            state = reset_state(step.done.repeat_interleave(m), initial, after)
        opponent.episodes_ended(step.done.repeat_interleave(m))

    stacked = {k: torch.stack(v) for k, v in record.items() if v}
    if episodic:
        bootstrap = torch.zeros(n, m, device=device)
    elif recurrent:
        bootstrap = policy.value_with_state(_rows(step.obs), state, **_critic(step.critic_obs, m)).view(n, m)
    else:
        bootstrap = policy.value(_rows(step.obs), **_critic(step.critic_obs, m)).view(n, m)
    seat = learner_seat.to(device) if learner_seat is not None else torch.zeros(n, dtype=torch.long, device=device)
    memory = {"policy_state0": state0, "policy_state": state} if recurrent else {}
    if opponent.recurrent:
        memory["opponent_state"] = opponent.state
    return Rollout(**stacked, bootstrap_value=bootstrap, learner_seat=seat, controlled=controlled, **memory)
