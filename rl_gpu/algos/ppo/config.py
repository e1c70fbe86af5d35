"""PPO's hyper-parameters."""

from __future__ import annotations

from dataclasses import dataclass

from rl_gpu.core.schema import check_fields


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
    ent_coef_final: float | None = None
    """the entropy coefficient at the end of training: it moves linearly from ent_coef to this with training
    progress (a device tensor, logged as ent_coef); None: ent_coef throughout"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip"""
    reward_scale: float = 1.0
    """multiply rewards by this before computing advantages (returns in the logs stay unscaled); with
    norm_reward it multiplies the normalised rewards (applied before normalising, it would cancel out)"""
    norm_reward: bool = False
    """scale rewards by the running std of the discounted return (VecNormalize); statistics saved with the
    algorithm. Only advantages and value targets see the scaled rewards: logged returns stay in the task's
    units"""
    norm_reward_clip: float = 10.0
    """with norm_reward, clip the scaled rewards to [-norm_reward_clip, norm_reward_clip]"""
    target_kl: float | None = None
    """stop the update's remaining epochs once the approximate KL exceeds this, checked on the device once
    per epoch; None: never"""
    symmetry: bool = False
    """also learn from the mirror image of every rollout, for a task that declares its left-right symmetry
    (Go1): observations and actions mirrored, their log-probabilities and values recomputed by the collecting
    policy, the advantages and returns the original's; minibatches twice as large"""
    max_policy_lag: int | None = None
    """drop the update's optimizer steps whose policy lag exceeds this (Sample Factory's rule and measure: the
    parameter updates between the policy that collected the data and the one a step learns at; a synchronous
    update's steps have lags 0 .. E*M-1, a learning-while-collecting one's E*M .. 2*E*M-1, for E epochs of M
    minibatches); the lags and the dropped steps are logged; None: never"""
    micro_batch_size: int | None = None
    """rows per forward/backward pass: a minibatch runs as micro-batches of at most this many rows (sizes
    differing by at most one) whose gradients add up to the minibatch's: the same update up to float rounding,
    with the activations of one micro-batch in memory at a time; None: the whole minibatch at once"""

    def storage_elements(self, num_envs: int, num_steps: int, obs_size: int, action_size: int,
                         hidden_sizes: tuple[int, ...]) -> int:
        """float32 elements of the big buffers besides the parameters: the rollout storage (observations plus
        about 12 scalars per slot: action, log-prob, value, reward, done flags, advantages, returns, masks) and
        the activations of one minibatch kept for the backward pass (two networks)."""
        rows = num_envs * num_steps
        activations = max(rows // self.num_minibatches, 1) * sum(hidden_sizes) * 2 * 2
        return rows * (obs_size + 12) + activations

    def __post_init__(self) -> None:
        # Types first (ints not bools, floats finite: nan and inf are refused), so the ranges below compare
        # numbers.
        algo = type(self).__name__.removesuffix("Config")  # PPO, APPO, IMPALA, MAPPO
        check_fields(self, label=lambda name: f"{algo} hyper-parameter {name}")
        checks = {
            "gamma": 0.0 <= self.gamma <= 1.0,
            "gae_lambda": 0.0 <= self.gae_lambda <= 1.0,
            "update_epochs": self.update_epochs >= 1,
            "num_minibatches": self.num_minibatches >= 1,
            "clip_coef": self.clip_coef > 0,
            "ent_coef": self.ent_coef >= 0,
            "ent_coef_final": self.ent_coef_final is None or self.ent_coef_final >= 0,
            "vf_coef": self.vf_coef >= 0,
            "max_grad_norm": self.max_grad_norm > 0,
            "reward_scale": self.reward_scale > 0,
            "norm_reward_clip": self.norm_reward_clip > 0,
            "target_kl": self.target_kl is None or self.target_kl > 0,
            "micro_batch_size": self.micro_batch_size is None or self.micro_batch_size >= 1,
            "max_policy_lag": self.max_policy_lag is None or self.max_policy_lag >= 0,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            values = ", ".join(f"{name}={getattr(self, name)!r}" for name in bad)
            raise ValueError(f"invalid {algo} hyper-parameters: {values} (gamma and gae_lambda in [0, 1], "
                             "epochs/minibatches/micro_batch_size >= 1, clip_coef/max_grad_norm/target_kl > 0, "
                             "norm_reward_clip > 0, coefficients and max_policy_lag >= 0, every number finite)")
