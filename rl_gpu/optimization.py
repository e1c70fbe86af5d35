"""Clipped PPO on a ``[T, N]`` rollout, with every mean taken over the learner's decisions only.

Shape legend: T = steps, N = environments, B = T * N flattened slots, M = minibatch slots.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import Tensor, nn

from rl_gpu.gae import compute_gae
from rl_gpu.rollout import Rollout


@dataclass(frozen=True)
class PPOConfig:
    """PPO hyper-parameters (CleanRL's names)."""

    gamma: float = 0.99
    """discount factor per learner decision"""
    gae_lambda: float = 0.95
    """lambda of generalised advantage estimation"""
    update_epochs: int = 4
    """passes over the rollout per update"""
    num_minibatches: int = 4
    """minibatches per epoch (slots of the flattened [T * N] rollout, shuffled every epoch)"""
    clip_coef: float = 0.2
    """PPO's ratio clipping range"""
    clip_vloss: bool = True
    """clip the value loss around the collected values (as in PPO's reference implementation)"""
    norm_adv: bool = True
    """normalise advantages per minibatch, with mean and std over learner decisions only"""
    ent_coef: float = 0.01
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip"""
    reward_scale: float = 1.0
    """multiply rewards by this before computing advantages (returns in the logs stay unscaled)"""
    target_kl: float | None = None
    """stop the update's remaining epochs once the approximate KL exceeds this (checked once per epoch)"""

    def __post_init__(self) -> None:
        checks = {
            "gamma": 0.0 <= self.gamma <= 1.0,
            "gae_lambda": 0.0 <= self.gae_lambda <= 1.0,
            "update_epochs": self.update_epochs >= 1,
            "num_minibatches": self.num_minibatches >= 1,
            "clip_coef": self.clip_coef > 0,
            "ent_coef": self.ent_coef >= 0,
            "vf_coef": self.vf_coef >= 0,
            "max_grad_norm": self.max_grad_norm > 0,
            "reward_scale": self.reward_scale > 0,
            "target_kl": self.target_kl is None or self.target_kl > 0,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            values = ", ".join(f"{name}={getattr(self, name)!r}" for name in bad)
            raise ValueError(f"invalid PPO hyper-parameters: {values} (gamma and gae_lambda in [0, 1], "
                             "epochs/minibatches >= 1, clip_coef/max_grad_norm/target_kl > 0, coefficients >= 0)")


@dataclass
class UpdateMetrics:
    """0-dim tensors averaged over the update's minibatches; read them on the host once per log interval."""

    loss: Tensor
    policy_loss: Tensor
    value_loss: Tensor
    entropy: Tensor
    approx_kl: Tensor
    clip_fraction: Tensor
    explained_variance: Tensor
    grad_norm: Tensor

    def as_floats(self) -> dict[str, float]:
        """Every metric as a Python float (one host synchronisation for all of them)."""
        names = [f.name for f in fields(self)]
        values = torch.stack([getattr(self, n).detach().float() for n in names]).cpu().tolist()
        return dict(zip(names, values))


def masked_mean(x: Tensor, weight: Tensor) -> Tensor:
    """Mean of ``x`` over entries with ``weight`` 1 (0 when there are none)."""
    return (x * weight).sum() / weight.sum().clamp(min=1.0)


def ppo_loss(
    policy: nn.Module, mb: dict[str, Tensor], config: PPOConfig
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO's clipped surrogate + value loss - entropy bonus for one minibatch of ``[M]`` slots.

    ``mb`` holds ``obs, action, action_mask, log_prob, value, advantage, returns, weight``. Every mean and the
    advantage statistics use only slots with ``weight`` 1.
    """
    w = mb["weight"]
    new_log_prob, entropy, new_value = policy.evaluate(mb["obs"], mb["action"], mb["action_mask"])
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


def explained_variance(prediction: Tensor, target: Tensor, weight: Tensor) -> Tensor:
    """``1 - Var[target - prediction] / Var[target]`` over weighted entries (NaN-free: 0 if Var[target] = 0)."""
    mean_t = masked_mean(target, weight)
    var_t = masked_mean((target - mean_t).square(), weight)
    resid = target - prediction
    var_r = masked_mean((resid - masked_mean(resid, weight)).square(), weight)
    return torch.where(var_t > 0, 1 - var_r / var_t.clamp(min=1e-12), torch.zeros_like(var_t))


def update_policy(
    policy: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Rollout,
    config: PPOConfig | None = None,
    generator: torch.Generator | None = None,
) -> UpdateMetrics:
    """One PPO update (``update_epochs`` passes of ``num_minibatches`` shuffled minibatches) on ``batch``.

    Advantages come from :func:`rl_gpu.gae.compute_gae` with the values stored at collection time.
    ``generator`` (on the batch's device) drives the minibatch shuffling. Returns metrics as 0-dim tensors
    without synchronising with the host, except once per epoch when ``target_kl`` is set.
    """
    config = config if config is not None else PPOConfig()
    advantage, returns = compute_gae(
        batch.reward * config.reward_scale, batch.value, batch.terminated, batch.truncated, batch.final_value,
        batch.bootstrap_value, config.gamma, config.gae_lambda, batch.weight,
    )
    flat = {
        "obs": batch.obs.flatten(0, 1),
        "action": batch.action.flatten(0, 1),
        "action_mask": batch.action_mask.flatten(0, 1),
        "log_prob": batch.log_prob.flatten(0, 1),
        "value": batch.value.flatten(0, 1),
        "advantage": advantage.flatten(0, 1),
        "returns": returns.flatten(0, 1),
        "weight": batch.weight.flatten(0, 1),
    }
    if policy.is_continuous:
        flat["action_mask"] = None
    size = flat["weight"].shape[0]
    if size % config.num_minibatches:
        raise ValueError(
            f"the rollout's {size} slots (T * N) are not divisible by num_minibatches={config.num_minibatches}"
        )
    mb_size = size // config.num_minibatches
    device = flat["weight"].device
    totals: dict[str, Tensor] = {}
    count = 0
    for _ in range(config.update_epochs):
        order = torch.randperm(size, generator=generator, device=device)
        for start in range(0, size, mb_size):
            idx = order[start:start + mb_size]
            mb = {k: (v[idx] if v is not None else None) for k, v in flat.items()}
            loss, stats = ppo_loss(policy, mb, config)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(policy.parameters(), config.max_grad_norm)
            optimizer.step()
            stats = {"loss": loss.detach(), "grad_norm": grad_norm, **stats}
            for k, v in stats.items():
                totals[k] = totals[k] + v if k in totals else v
            count += 1
        if config.target_kl is not None and bool(stats["approx_kl"] > config.target_kl):
            break
    means = {k: v / count for k, v in totals.items()}
    ev = explained_variance(flat["value"], flat["returns"], flat["weight"])
    return UpdateMetrics(explained_variance=ev, **means)


class PPO:
    """The algorithm object the trainer talks to: it owns the policy, the optimiser and its random streams.

    Args:
        policy: an actor-critic with ``act``, ``evaluate``, ``value`` (see :mod:`rl_gpu.policy`).
        config: PPO hyper-parameters.
        learning_rate: Adam's initial learning rate.
        seed: seeds the policy's sampling and the minibatch shuffling.
    """

    def __init__(self, policy: nn.Module, config: PPOConfig, learning_rate: float, seed: int) -> None:
        self.policy = policy
        self.config = config
        self.learning_rate = learning_rate
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=learning_rate, eps=1e-5)
        device = next(policy.parameters()).device
        self.policy_rng = torch.Generator(device=device).manual_seed(seed)
        self.shuffle_rng = torch.Generator(device=device).manual_seed(seed + 1)

    def set_learning_rate(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def update(self, rollout: Rollout) -> UpdateMetrics:
        """One PPO update on ``rollout``, then the rollout's observations join the normaliser statistics."""
        metrics = update_policy(self.policy, self.optimizer, rollout, self.config, self.shuffle_rng)
        self.policy.update_normalizer(rollout.obs, rollout.live.float())
        return metrics

    def state_dict(self) -> dict:
        return {
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "policy_rng": self.policy_rng.get_state(),
            "shuffle_rng": self.shuffle_rng.get_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.policy_rng.set_state(state["policy_rng"].cpu())
        self.shuffle_rng.set_state(state["shuffle_rng"].cpu())
