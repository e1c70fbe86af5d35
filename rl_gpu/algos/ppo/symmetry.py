"""Symmetric data augmentation for PPO (``--symmetry``): each update also learns from the mirror image of its
rollout, for a task that declares its left-right symmetry (:class:`~rl_gpu.core.types.Mirror`, ``spec.mirror``).

Shape legend: T steps, N environments, O observation, C critic group, D action dimensions.

A mirrored step is a step the task could have produced: its observation and action mirrored, its advantage and
return the original's (the task's rewards and dynamics are symmetric). PPO's ratio needs the probability the
*collecting* policy gave the mirrored action at the mirrored observation, and its value clipping the value it
gave there: both are computed by the policy as it was at collection (before the update's first step), so the
mirrored half is exact on-policy data for PPO's objective rather than data with borrowed log-probabilities. A
policy that is symmetric already gives the mirrored half the original's probabilities and values; one that is not
is pulled towards acting the same on both sides.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch
from torch import Tensor, nn

from rl_gpu.core.types import Mirror
from rl_gpu.data.rollout import Rollout


def mirrored(x: Tensor, index: tuple[int, ...] | Tensor, sign: tuple[float, ...] | Tensor) -> Tensor:
    """``x[..., index] * sign``: the mirror image of the last axis (``index`` and ``sign`` as tuples, or as
    tensors on ``x``'s device: no host-to-device copy, as a captured CUDA graph needs)."""
    if not isinstance(index, Tensor):
        index = torch.tensor(index, device=x.device)
    if not isinstance(sign, Tensor):
        sign = torch.tensor(sign, dtype=x.dtype, device=x.device)
    return x.index_select(-1, index) * sign.to(x.dtype)


class MirrorMaps(NamedTuple):
    """A :class:`~rl_gpu.core.types.Mirror` as index and sign tensors on the learner's device (built once)."""

    obs: tuple[Tensor, Tensor]
    action: tuple[Tensor, Tensor]
    critic: tuple[Tensor, Tensor] | None

    @classmethod
    def of(cls, mirror: Mirror, device: torch.device) -> MirrorMaps:
        def maps(index: tuple[int, ...], sign: tuple[float, ...]) -> tuple[Tensor, Tensor]:
            return torch.tensor(index, device=device), torch.tensor(sign, device=device)

        critic = maps(mirror.critic_index, mirror.critic_sign) if mirror.critic_index else None
        return cls(maps(mirror.obs_index, mirror.obs_sign), maps(mirror.action_index, mirror.action_sign), critic)


def check_mirror(mirror: Mirror, obs_size: int, action_size: int, critic_size: int) -> None:
    """``ValueError`` unless ``mirror`` is an involution of the right sizes (mirroring twice is the identity)."""
    parts = (("obs", mirror.obs_index, mirror.obs_sign, obs_size),
             ("action", mirror.action_index, mirror.action_sign, action_size),
             ("critic", mirror.critic_index, mirror.critic_sign, critic_size))
    for name, index, sign, size in parts:
        if not index and name == "critic":
            continue
        if len(index) != size or len(sign) != size or sorted(index) != list(range(size)):
            raise ValueError(f"the task's {name} mirror must be a permutation of its {size} entries with one sign each")
        if any(index[index[i]] != i or sign[i] * sign[index[i]] != 1 for i in range(size)):
            raise ValueError(f"the task's {name} mirror is not an involution (mirroring twice must be the identity)")


def task_mirror(config, env, recurrent: bool, asynchronous: bool) -> MirrorMaps | None:
    """The mirror PPO's update augments with (``config.symmetry``), None without; ``ValueError`` naming why
    when it cannot: a task that declares no symmetry, discrete actions, a policy with memory, or learning while
    collecting (the collecting policy is no longer there to rate the mirrored actions)."""
    if not getattr(config, "symmetry", False):
        return None
    spec = None if env is None else env.spec
    why = ("it needs the environment it trains on" if spec is None else
           f"{type(env).__name__} declares no left-right symmetry (spec.mirror)" if spec.mirror is None else
           "it mirrors continuous actions" if not spec.is_continuous else
           "a policy with memory replays sequences" if recurrent else
           "with --async the collecting policy is gone when the update mirrors its rollout" if asynchronous else None)
    if why:
        raise ValueError(f"--symmetry cannot be used here: {why}")
    check_mirror(spec.mirror, spec.obs_size, spec.action_size, spec.critic_obs_size)
    return MirrorMaps.of(spec.mirror, env.device)


@torch.no_grad()
def _collecting_policy_view(policy: nn.Module, obs: Tensor, action: Tensor, critic_obs: Tensor | None):
    extra = {} if critic_obs is None else {"critic_obs": critic_obs}
    log_prob, _, value = policy.evaluate(obs, action, None, **extra)
    return log_prob, value


def with_mirror_image(policy: nn.Module, mirror: MirrorMaps, batch: Rollout, advantage: Tensor,
                      returns: Tensor) -> tuple[Rollout, Tensor, Tensor]:
    """``batch`` ``[T, N]`` with its mirror image appended as N more columns (``[T, 2N]``), and the advantages and
    returns repeated for them; called before the update's first step, while ``policy`` is the collecting one."""
    t, n = batch.reward.shape
    obs = mirrored(batch.obs, *mirror.obs)
    action = mirrored(batch.action, *mirror.action)
    critic = None
    if batch.critic_obs is not None:
        critic = batch.critic_obs if mirror.critic is None else mirrored(batch.critic_obs, *mirror.critic)
    log_prob, value = _collecting_policy_view(policy, obs.flatten(0, 1), action.flatten(0, 1),
                                              None if critic is None else critic.flatten(0, 1))

    def both(x: Tensor | None, y: Tensor | None) -> Tensor | None:
        return None if x is None else torch.cat([x, y], dim=1)

    doubled = dataclasses.replace(
        batch, obs=both(batch.obs, obs), action=both(batch.action, action),
        log_prob=both(batch.log_prob, log_prob.view(t, n)), value=both(batch.value, value.view(t, n)),
        weight=both(batch.weight, batch.weight), critic_obs=both(batch.critic_obs, critic),
        action_mask=both(batch.action_mask, batch.action_mask))
    return doubled, both(advantage, advantage), both(returns, returns)
