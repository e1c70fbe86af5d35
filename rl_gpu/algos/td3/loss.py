"""TD3's loss for one update: the critics' TD error against a smoothed target policy and, on the delayed actor
steps, the actor's objective, on one batch sampled from the replay buffer.

Shape legend: B = batch rows, D = action dimensions, E = critics.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from rl_gpu.algos.td3.config import TD3Config
from rl_gpu.data.replay import ReplayBatch, ReplayBuffer
from rl_gpu.nn.ensemble import EnsembleMLP
from rl_gpu.nn.squashed import DeterministicActor

STATS = ("q_loss", "actor_loss", "q_value")
"""The per-update statistics :func:`td3_loss` returns besides the loss, in the order of its stats vector."""


def smoothed_target(policy: DeterministicActor, target_actor: nn.Module, target_critic: EnsembleMLP, batch: ReplayBatch,
                    config: TD3Config, noise: Tensor) -> Tensor:
    """``[B]`` TD target ``reward + discount * min_e Q'_e(s', a')`` with the target actor's normalised action
    plus clipped Gaussian noise, ``a' = clamp(tanh(mu'(s')) + clamp(policy_noise * noise, -noise_clip,
    noise_clip), -1, 1)`` (``noise`` ``[B, D]`` standard normal); ``discount`` is 0 after a terminal step and
    ``gamma^k`` otherwise."""
    with torch.no_grad():
        next_x = policy.preprocess(batch.next_obs)
        smoothing = (noise * config.policy_noise).clamp(-config.noise_clip, config.noise_clip)
        next_y = (torch.tanh(target_actor(next_x)) + smoothing).clamp(-1.0, 1.0)
        next_q = target_critic(torch.cat([next_x, next_y], -1)).amin(0)
        return batch.reward + batch.discount * next_q


def td3_loss(policy: DeterministicActor, target_actor: nn.Module, critic: EnsembleMLP, target_critic: EnsembleMLP,
             config: TD3Config, buffer: ReplayBuffer, actor_step: bool, bits: Tensor,
             noise: Tensor) -> tuple[Tensor, Tensor]:
    """``(loss, stats [len(STATS)])`` of the batch sampled with ``bits`` (``[B]``) and the smoothing ``noise``
    (``[B, D]`` standard normal).

    The critics' loss is the sum over the E critics of the mean squared TD error. On an ``actor_step`` the
    actor's ``-mean(Q_1(s, mu(s)))`` is added, with the first critic's weights detached (it takes no gradient
    from it): one backward and one optimiser step then equal separate steps with the parameters before the
    update. Off actor steps the actor's statistic is 0.
    """
    batch = buffer.sample(bits)
    target = smoothed_target(policy, target_actor, target_critic, batch, config, noise)
    x = policy.preprocess(batch.obs)
    q = critic(torch.cat([x, policy.from_env(batch.action)], -1))
    q_loss = (q - target).square().mean(-1).sum()
    if actor_step:
        actor_loss = -critic(torch.cat([x, policy.squashed(x)], -1), members=1, detached=True).mean()
        loss = q_loss + actor_loss
    else:
        actor_loss = torch.zeros((), device=q.device)
        loss = q_loss
    return loss, torch.stack([q_loss, actor_loss, q.mean()]).detach()
