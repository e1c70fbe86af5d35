"""SAC's loss for one update: the critics' TD error, the actor's objective and the entropy coefficient's, on one
batch sampled from the replay buffer.

Shape legend: B = batch rows, D = action dimensions, E = critics.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from rl_gpu.data.replay import ReplayBatch, ReplayBuffer
from rl_gpu.nn.ensemble import EnsembleMLP
from rl_gpu.nn.squashed import SquashedGaussianActor

STATS = ("q_loss", "actor_loss", "alpha_loss", "alpha", "q_value", "entropy")
"""The per-update statistics :func:`sac_loss` returns besides the loss, in the order of its stats vector."""


def soft_target(policy: SquashedGaussianActor, target_critic: EnsembleMLP, batch: ReplayBatch, alpha: Tensor,
                noise: Tensor) -> Tensor:
    """``[B]`` soft TD target ``reward + discount * (min_e Q'_e(s', a') - alpha * log pi(a' | s'))`` with
    ``a' ~ pi(. | s')`` from ``noise`` (``[B, D]`` standard normal); ``discount`` is 0 after a terminal step and
    ``gamma^k`` otherwise, so a time limit (truncation) still bootstraps from the true next observation."""
    with torch.no_grad():
        next_x = policy.preprocess(batch.next_obs)
        next_y, next_log_prob = policy.sample(next_x, noise)
        next_q = target_critic(torch.cat([next_x, next_y], -1)).amin(0)
        return batch.reward + batch.discount * (next_q - alpha * next_log_prob)


def sac_loss(policy: SquashedGaussianActor, critic: EnsembleMLP, target_critic: EnsembleMLP, log_alpha: Tensor,
             target_entropy: float, autotune: bool, buffer: ReplayBuffer, bits: Tensor,
             noise: Tensor) -> tuple[Tensor, Tensor]:
    """``(loss, stats [len(STATS)])`` of the batch sampled with ``bits`` (``[B]``) and ``noise`` (``[2, B, D]``
    standard normal: the next actions', then the current actions').

    The loss sums three terms whose gradients reach disjoint parameters: the critics' (sum over the E critics
    of the mean squared TD error; the target takes no gradient), the actor's ``mean(alpha log pi(a|s) -
    min_e Q_e(s, a))`` (the critics score the actor's actions with their weights detached, so they take no
    gradient from it) and, with ``autotune``, the entropy coefficient's ``-mean(log_alpha (log pi +
    target_entropy))``. One backward and one optimiser step then equal separate steps with the parameters
    before the update, as Brax's SAC orders them.
    """
    batch = buffer.sample(bits)
    alpha = log_alpha.detach().exp()
    target = soft_target(policy, target_critic, batch, alpha, noise[0])
    x = policy.preprocess(batch.obs)
    q = critic(torch.cat([x, policy.from_env(batch.action)], -1))
    q_loss = (q - target).square().mean(-1).sum()
    y, log_prob = policy.sample(x, noise[1])
    q_pi = critic(torch.cat([x, y], -1), detached=True).amin(0)
    actor_loss = (alpha * log_prob - q_pi).mean()
    if autotune:
        alpha_loss = -(log_alpha * (log_prob.detach() + target_entropy)).mean()
    else:
        alpha_loss = torch.zeros((), device=q.device)
    loss = q_loss + actor_loss + alpha_loss
    stats = torch.stack([q_loss, actor_loss, alpha_loss, alpha, q.mean(), -log_prob.mean()]).detach()
    return loss, stats


def make_log_alpha(alpha: float, autotune: bool, device: torch.device) -> Tensor:
    """0-dim ``log alpha``: a trained parameter with ``autotune``, else a constant."""
    value = torch.tensor(float(alpha), device=device).log()
    return nn.Parameter(value) if autotune else value
