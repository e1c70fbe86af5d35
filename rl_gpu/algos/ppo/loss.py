"""PPO's loss for one minibatch, with every mean taken over the learner's decisions only.

Shape legend: M = minibatch slots.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

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


class Coefficients:
    """A :class:`~rl_gpu.algos.ppo.config.PPOConfig` as :func:`ppo_loss` reads it, with ``ent_coef`` and
    ``clip_coef`` replaced by tensors: a population's members' entries inside its vmapped call, or an entropy
    coefficient a schedule moves in place (compiled code reads the tensor, so it never re-traces)."""

    def __init__(self, base: Any, ent_coef: Tensor | float, clip_coef: Tensor | float) -> None:
        self._base, self.ent_coef, self.clip_coef = base, ent_coef, clip_coef

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)


class MinibatchScale(NamedTuple):
    """What a minibatch's loss divides by, computed once over the whole minibatch so that its micro-batches'
    losses (:func:`ppo_loss` with ``scale``) sum to the minibatch's loss: every mean of PPO's loss is a sum over
    rows divided by the minibatch's count of learner decisions, and advantages are normalised by the
    minibatch's statistics."""

    count: Tensor
    """0-dim: learner decisions in the minibatch (at least 1)."""
    adv_mean: Tensor
    """0-dim: mean advantage over them (0 without ``norm_adv``)."""
    adv_scale: Tensor
    """0-dim: ``std + 1e-8`` of the advantage over them (1 without ``norm_adv``)."""


def minibatch_scale(advantage: Tensor, weight: Tensor | None, config: PPOConfig) -> MinibatchScale:
    """The :class:`MinibatchScale` of a minibatch's ``[M]`` advantages and weights."""
    count = weight.sum().clamp(min=1.0) if weight is not None else advantage.new_tensor(float(advantage.numel()))
    if not config.norm_adv:
        return MinibatchScale(count, advantage.new_zeros(()), advantage.new_ones(()))
    mean = masked_mean(advantage, weight)
    var = masked_mean((advantage - mean).square(), weight)
    return MinibatchScale(count, mean, var.sqrt() + 1e-8)


def minibatch_means(advantage: Tensor, weight: Tensor | None, config: Any,
                    scale: MinibatchScale | None) -> tuple[Callable[[Tensor], Tensor], Tensor]:
    """``(mean, advantage)``: the minibatch's mean over learner decisions (with ``scale``, a micro-batch's share of
    it) and its ``[M]`` advantages, normalised when ``config.norm_adv``."""
    if scale is None:
        mean = partial(masked_mean, weight=weight)
        if config.norm_adv:
            adv_mean = mean(advantage)
            advantage = (advantage - adv_mean) / (mean((advantage - adv_mean).square()).sqrt() + 1e-8)
        return mean, advantage

    def share(x: Tensor) -> Tensor:
        return (x if weight is None else x * weight).sum() / scale.count

    if config.norm_adv:
        advantage = (advantage - scale.adv_mean) / scale.adv_scale
    return share, advantage


def ppo_loss(
    policy: nn.Module, mb: dict[str, Tensor], config: PPOConfig, scale: MinibatchScale | None = None
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO's clipped surrogate + value loss - entropy bonus for one minibatch of ``[M]`` slots.

    ``mb`` holds ``obs, action, action_mask, log_prob, value, advantage, returns, weight`` and, for an
    asymmetric critic, ``critic_obs`` (passed to ``evaluate`` only when present). Every mean and the advantage
    statistics use only slots with ``weight`` 1.

    With ``scale`` (the :func:`minibatch_scale` of a whole minibatch), ``mb`` is one micro-batch of it and every
    "mean" is this micro-batch's share of the minibatch's mean (its sum divided by the minibatch's count), so the
    micro-batches' losses, gradients and statistics add up to the minibatch's.
    """
    w = mb["weight"]
    critic = mb.get("critic_obs")
    extra = {} if critic is None else {"critic_obs": critic}
    new_log_prob, entropy, new_value = policy.evaluate(mb["obs"], mb["action"], mb["action_mask"], **extra)
    log_ratio = new_log_prob - mb["log_prob"]
    ratio = log_ratio.exp()
    mean, advantage = minibatch_means(mb["advantage"], w, config, scale)
    pg_loss = mean(
        torch.maximum(-advantage * ratio, -advantage * ratio.clamp(1 - config.clip_coef, 1 + config.clip_coef))
    )
    if config.clip_vloss:
        v_clipped = mb["value"] + (new_value - mb["value"]).clamp(-config.clip_coef, config.clip_coef)
        v_loss = 0.5 * mean(torch.maximum((new_value - mb["returns"]).square(), (v_clipped - mb["returns"]).square()))
    else:
        v_loss = 0.5 * mean((new_value - mb["returns"]).square())
    entropy_mean = mean(entropy)
    loss = pg_loss - config.ent_coef * entropy_mean + config.vf_coef * v_loss
    with torch.no_grad():
        # k3 estimator of KL(old || new): E[(r - 1) - log r], unbiased and non-negative.
        approx_kl = mean((ratio - 1) - log_ratio)
        clip_fraction = mean(((ratio - 1).abs() > config.clip_coef).float())
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
