"""IMPALA's loss for one minibatch: the V-trace policy gradient, the critic on V-trace targets, an entropy bonus."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from rl_gpu.algos.ppo.loss import MinibatchScale, minibatch_means


def impala_loss(
    policy: nn.Module, mb: dict[str, Tensor], config, scale: MinibatchScale | None = None
) -> tuple[Tensor, dict[str, Tensor]]:
    """``-mean(A_t log pi(a_t|x_t)) + vf_coef * 0.5 mean((V(x_t) - vs_t)^2) - ent_coef * mean(entropy)`` for one
    minibatch of ``[M]`` slots (``mb`` as :func:`~rl_gpu.algos.ppo.loss.ppo_loss` takes it; ``advantage`` is
    V-trace's ``rho_t (r_t + gamma vs_{t+1} - V(x_t))``, ``returns`` its ``vs``), with the same statistics:
    ``clip_fraction`` is the share of decisions whose importance weight ``pi / mu`` exceeds ``rho_bar``."""
    w = mb["weight"]
    critic = mb.get("critic_obs")
    extra = {} if critic is None else {"critic_obs": critic}
    new_log_prob, entropy, new_value = policy.evaluate(mb["obs"], mb["action"], mb["action_mask"], **extra)
    mean, advantage = minibatch_means(mb["advantage"], w, config, scale)
    pg_loss = -mean(advantage.detach() * new_log_prob)
    v_loss = 0.5 * mean((new_value - mb["returns"]).square())
    entropy_mean = mean(entropy)
    loss = pg_loss - config.ent_coef * entropy_mean + config.vf_coef * v_loss
    with torch.no_grad():
        log_ratio = new_log_prob - mb["log_prob"]
        ratio = log_ratio.exp()
        approx_kl = mean((ratio - 1) - log_ratio)
        clip_fraction = mean((ratio > config.rho_bar).float())
    stats = {"policy_loss": pg_loss, "value_loss": v_loss, "entropy": entropy_mean,
             "approx_kl": approx_kl, "clip_fraction": clip_fraction}
    return loss, stats
