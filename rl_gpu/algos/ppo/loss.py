"""PPO's loss for one minibatch, with every mean taken over the learner's decisions only.

Shape legend: M = minibatch slots.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from rl_gpu.algos.ppo.config import PPOConfig

LOSS_STATS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")
"""The per-minibatch statistics :func:`ppo_loss` returns besides the loss, in the order of its stats vector."""


def masked_mean(x: Tensor, weight: Tensor | None) -> Tensor:
    """Mean of ``x`` over entries with ``weight`` 1 (0 when there are none); the plain mean when ``weight`` is None
    (every entry counts: the same value, with fewer operations)."""
    if weight is None:
        return x.mean()
    return (x * weight).sum() / weight.sum().clamp(min=1.0)


def ppo_loss(
    policy: nn.Module, mb: dict[str, Tensor], config: PPOConfig
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO's clipped surrogate + value loss - entropy bonus for one minibatch of ``[M]`` slots.

    ``mb`` holds ``obs, action, action_mask, log_prob, value, advantage, returns, weight`` and, for an
    asymmetric critic, ``critic_obs`` (passed to ``evaluate`` only when present). Every mean and the advantage
    statistics use only slots with ``weight`` 1.
    """
    w = mb["weight"]
    critic = mb.get("critic_obs")
    extra = {} if critic is None else {"critic_obs": critic}
    new_log_prob, entropy, new_value = policy.evaluate(mb["obs"], mb["action"], mb["action_mask"], **extra)
    log_ratio = new_log_prob - mb["log_prob"]
    ratio = log_ratio.exp()
    advantage = mb["advantage"]
    if config.norm_adv:
        mean = masked_mean(advantage, w)
        var = masked_mean((advantage - mean).square(), w)
        advantage = (advantage - mean) / (var.sqrt() + 1e-8)
    pg_loss = masked_mean(
        torch.maximum(-advantage * ratio, -advantage * ratio.clamp(1 - config.clip_coef, 1 + config.clip_coef)), w
    )
    if config.clip_vloss:
        v_clipped = mb["value"] + (new_value - mb["value"]).clamp(-config.clip_coef, config.clip_coef)
        v_loss = 0.5 * masked_mean(
            torch.maximum((new_value - mb["returns"]).square(), (v_clipped - mb["returns"]).square()), w
        )
    else:
        v_loss = 0.5 * masked_mean((new_value - mb["returns"]).square(), w)
    entropy_mean = masked_mean(entropy, w)
    loss = pg_loss - config.ent_coef * entropy_mean + config.vf_coef * v_loss
    with torch.no_grad():
        # k3 estimator of KL(old || new): E[(r - 1) - log r], unbiased and non-negative.
        approx_kl = masked_mean((ratio - 1) - log_ratio, w)
        clip_fraction = masked_mean(((ratio - 1).abs() > config.clip_coef).float(), w)
    stats = {"policy_loss": pg_loss, "value_loss": v_loss, "entropy": entropy_mean,
             "approx_kl": approx_kl, "clip_fraction": clip_fraction}
    return loss, stats


def explained_variance(prediction: Tensor, target: Tensor, weight: Tensor | None) -> Tensor:
    """``1 - Var[target - prediction] / Var[target]`` over weighted entries (NaN-free: 0 if Var[target] = 0)."""
    mean_t = masked_mean(target, weight)
    var_t = masked_mean((target - mean_t).square(), weight)
    resid = target - prediction
    var_r = masked_mean((resid - masked_mean(resid, weight)).square(), weight)
    return torch.where(var_t > 0, 1 - var_r / var_t.clamp(min=1e-12), torch.zeros_like(var_t))
