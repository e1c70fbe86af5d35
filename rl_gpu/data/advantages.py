"""Generalised advantage estimation over a ``[T, N]`` rollout, with termination and truncation kept apart."""

from __future__ import annotations

import torch
from torch import Tensor


def compute_gae(
    reward: Tensor,
    value: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    final_value: Tensor,
    bootstrap_value: Tensor,
    gamma: float,
    gae_lambda: float,
    weight: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Advantages and value targets by GAE(gamma, lambda).

    Step ``t`` is the transition ``obs[t] --action[t]--> reward[t]``. With ``d_t = terminated_t | truncated_t``:

    - ``next_V_t = 0`` if terminated, ``final_value_t`` = V(final_obs_t) if truncated, else ``value[t+1]``
      (``bootstrap_value`` after the last step);
    - ``delta_t = reward_t + gamma * next_V_t - value_t``;
    - ``A_t = delta_t + gamma * lambda * (1 - d_t) * A_{t+1}``: both kinds of episode end stop the
      recursion, but only termination drops the future value.

    ``weight`` marks the decisions that belong to the learner (1) versus opponent moves and padding (0).
    Unweighted steps are transparent: their rewards are credited to the learner decision before them and the
    recursion links that decision to the next learner decision of the same episode, so a learner's MDP step
    spans every opponent move until its next turn (discounting counts learner decisions). Without ``weight``
    every step is a decision and this is textbook GAE.

    Args:
        reward: ``[T, N]`` float, reward of each transition, from the learner's point of view.
        value: ``[T, N]`` float, V(obs[t]) at collection time.
        terminated: ``[T, N]`` bool, the transition reached a terminal state.
        truncated: ``[T, N]`` bool, the episode was cut after the transition (time limit).
        final_value: ``[T, N]`` float, V(final_obs[t]); read only where ``truncated``.
        bootstrap_value: ``[N]`` float, V(obs after the last step).
        gamma: discount per learner decision.
        gae_lambda: GAE's lambda.
        weight: optional ``[T, N]`` float or bool, 1 where the step is a learner decision.

    Returns:
        ``(advantage, returns)``, both ``[T, N]`` float with ``returns = advantage + value``; zero where
        ``weight`` is 0.
    """
    if weight is None:
        return _unweighted_gae(reward, value, terminated, truncated, final_value, bootstrap_value, gamma, gae_lambda)
    zeros = torch.zeros_like(bootstrap_value)
    next_value, next_advantage, pending_reward = bootstrap_value, zeros, zeros
    advantages = []
    steps = zip(
        reward.unbind(0),
        value.unbind(0),
        terminated.unbind(0),
        truncated.unbind(0),
        final_value.unbind(0),
        weight.unbind(0) if weight is not None else [None] * reward.shape[0],
    )
    for r, v, term, trunc, fv, w in reversed(list(steps)):
        done = term | trunc
        after_value = torch.where(done, torch.where(trunc, fv, zeros), next_value)
        after_advantage = torch.where(done, zeros, next_advantage)
        r = r + torch.where(done, zeros, pending_reward)
        advantage = r + gamma * after_value - v + gamma * gae_lambda * after_advantage
        if w is None:
            next_value, next_advantage = v, advantage
        else:
            decision = w > 0
            advantage = torch.where(decision, advantage, zeros)
            next_value = torch.where(decision, v, after_value)
            next_advantage = torch.where(decision, advantage, after_advantage)
            pending_reward = torch.where(decision, zeros, r)
        advantages.append(advantage)
    advantage = torch.stack(advantages[::-1])
    returns = advantage + value
    if weight is not None:
        returns = torch.where(weight > 0, returns, torch.zeros_like(returns))
    return advantage, returns


def _unweighted_gae(
    reward: Tensor,
    value: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    final_value: Tensor,
    bootstrap_value: Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[Tensor, Tensor]:
    """Textbook GAE with every step a decision: ``delta_t`` for all T at once, then the recursion
    ``A_t = delta_t + c_t A_{t+1}`` with ``c_t = gamma * lambda`` (0 after an episode end), two operations per
    step instead of the weighted recursion's sixteen. The same arithmetic in the same order as the weighted
    loop with all weights 1, so the results are identical."""
    done = terminated | truncated
    following = torch.cat([value[1:], bootstrap_value[None]])
    after_value = torch.where(done, torch.where(truncated, final_value, 0.0), following)
    delta = reward + gamma * after_value - value
    carry = torch.where(done, 0.0, gamma * gae_lambda)
    advantages = []
    advantage = torch.zeros_like(bootstrap_value)
    for t in range(reward.shape[0] - 1, -1, -1):
        advantage = delta[t] + carry[t] * advantage
        advantages.append(advantage)
    advantage = torch.stack(advantages[::-1])
    return advantage, advantage + value
