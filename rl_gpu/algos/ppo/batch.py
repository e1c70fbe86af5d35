"""What PPO's minibatches are gathered from: a rollout's fields with its advantages, flattened to slots.

Shape legend: T = steps, N = environments, B = T * N slots, C = the ``critic`` group.
"""

from __future__ import annotations

from typing import NamedTuple

from torch import Tensor

from rl_gpu.data.rollout import Rollout


class FlatBatch(NamedTuple):
    """A rollout flattened to ``[B, ...]`` slots with its advantages: what minibatches are gathered from (a
    recurrent policy's sequences keep the same fields ``[T, N, ...]``, :mod:`rl_gpu.algos.ppo.sequences`)."""

    obs: Tensor
    action: Tensor
    action_mask: Tensor | None
    log_prob: Tensor
    value: Tensor
    advantage: Tensor
    returns: Tensor
    weight: Tensor | None
    critic_obs: Tensor | None = None
    """``[B, C]`` privileged observations for an asymmetric critic (environments with a ``critic`` group)."""


def flatten_batch(
    batch: Rollout, advantage: Tensor, returns: Tensor, continuous: bool, weighted: bool = True
) -> FlatBatch:
    """The ``[T, N, ...]`` rollout as ``[B, ...]`` slots (no copies: views). ``weighted=False`` drops the weights
    of a rollout whose every slot is a learner decision (single-player, continuing), so means are plain means."""
    return FlatBatch(
        obs=batch.obs.flatten(0, 1),
        action=batch.action.flatten(0, 1),
        action_mask=None if continuous else batch.action_mask.flatten(0, 1),
        log_prob=batch.log_prob.flatten(0, 1),
        value=batch.value.flatten(0, 1),
        advantage=advantage.flatten(0, 1),
        returns=returns.flatten(0, 1),
        weight=batch.weight.flatten(0, 1) if weighted else None,
        critic_obs=batch.critic_obs.flatten(0, 1) if batch.critic_obs is not None else None,
    )
