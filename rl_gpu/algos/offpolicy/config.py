"""Hyper-parameters SAC and TD3 share: the replay buffer, the targets and how often to learn."""

from __future__ import annotations

from dataclasses import dataclass

from rl_gpu.core.schema import check_fields

MAX_BUFFER_SIZE = 10**10
"""Upper bound of --buffer-size (the memory check refuses what the machine cannot hold)."""
MAX_N_STEP = 1000
"""Upper bound of --n-step (and an episode's length bounds it further: checked when the run starts)."""
MAX_UPDATES_PER_STEP = 1000
"""Upper bound of --updates-per-step (an iteration's updates are planned, and their noise drawn, at once)."""


@dataclass(frozen=True)
class OffPolicyConfig:
    """Replay and target settings of an off-policy algorithm (CleanRL's names)."""

    gamma: float = 0.99
    """discount factor per environment step"""
    tau: float = 0.005
    """Polyak coefficient of the target networks: target <- (1 - tau) * target + tau * online, after each
    critic update (TD3: after each actor update)"""
    buffer_size: int = 1_000_000
    """replay buffer capacity in transitions (rounded down to a multiple of --num-envs), kept on the device"""
    batch_size: int = 256
    """transitions per gradient update, sampled uniformly with replacement"""
    learning_starts: int = 5000
    """transitions collected with uniformly random actions, and no update made, before learning starts"""
    updates_per_step: float = 1.0
    """gradient updates per vector step (one step of all --num-envs environments); an iteration of --num-steps
    vector steps makes num_steps * updates_per_step updates, which must be a whole number"""
    n_step: int = 1
    """steps summed into each TD target (n-step returns along a stored episode, cut at its end)"""
    n_critics: int = 2
    """Q networks of the ensemble, evaluated in one batched call; targets take their minimum"""
    noise_correlation: float = 0.0
    """correlation of each environment's exploration noise from one step to the next, in [0, 1): the noise is
    an AR(1) process of unit variance (0: drawn afresh each step, as the reference implementations do; near 1:
    temporally coherent exploration, as Ornstein-Uhlenbeck noise gives, for tasks whose reward needs a sustained
    push, such as MountainCarContinuous)"""
    checkpoint_buffer: bool = True
    """keep the replay buffer in last.pt so that a resume is exact; --no-checkpoint-buffer leaves it out
    (smaller checkpoints: a resumed run refills it before updating again, and its log says so)"""

    def _label(self, name: str) -> str:
        return f"{type(self).__name__.removesuffix('Config')} hyper-parameter {name}"

    def _check(self, extra: dict[str, bool], rule: str) -> None:
        """Types first (ints not bools, floats finite), then the shared ranges and ``extra`` (``name: ok``);
        ``rule`` describes ``extra``'s ranges in the message."""
        check_fields(self, label=self._label)
        checks = {
            "gamma": 0.0 <= self.gamma <= 1.0,
            "tau": 0.0 < self.tau <= 1.0,
            "buffer_size": 1 <= self.buffer_size <= MAX_BUFFER_SIZE,
            "batch_size": self.batch_size >= 1,
            "learning_starts": self.learning_starts >= 0,
            "updates_per_step": 0 < self.updates_per_step <= MAX_UPDATES_PER_STEP,
            "n_step": 1 <= self.n_step <= MAX_N_STEP,
            "n_critics": self.n_critics >= 1,
            "noise_correlation": 0.0 <= self.noise_correlation < 1.0,
            **extra,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            values = ", ".join(f"{name}={getattr(self, name)!r}" for name in bad)
            algo = type(self).__name__.removesuffix("Config")
            raise ValueError(f"invalid {algo} hyper-parameters: {values} (gamma in [0, 1], tau in (0, 1], "
                             f"buffer_size in [1, {MAX_BUFFER_SIZE:.0e}], batch_size and n_critics >= 1, n_step in "
                             f"[1, {MAX_N_STEP}], learning_starts >= 0, updates_per_step in (0, "
                             f"{MAX_UPDATES_PER_STEP}], noise_correlation in [0, 1){rule})")

    def updates_per_iteration(self, num_steps: int) -> int:
        """Gradient updates of an iteration of ``num_steps`` vector steps; ``ValueError`` unless a positive
        whole number."""
        updates = num_steps * self.updates_per_step
        if updates < 1 or abs(updates - round(updates)) > 1e-9:
            raise ValueError(f"--num-steps {num_steps} x --updates-per-step {self.updates_per_step} = {updates:g} "
                             "updates per iteration: it must be a positive whole number (change either)")
        return round(updates)

    def storage_elements(self, num_envs: int, num_steps: int, obs_size: int, action_size: int,
                         hidden_sizes: tuple[int, ...]) -> int:
        """float32 elements of the big buffers besides the parameters: the replay ring (two observations, the
        action and about 3 scalars per transition), one iteration's collection, and one batch's activations
        for the backward pass of the critics and the actor."""
        ring = max(self.buffer_size // num_envs, 1) * num_envs
        replay = ring * (2 * obs_size + action_size + 3)
        collected = num_envs * num_steps * (2 * obs_size + action_size + 6)
        activations = self.batch_size * sum(hidden_sizes) * (self.n_critics * 2 + 2) * 2
        return replay + collected + activations


def check_run(config) -> None:
    """What a whole run (``TrainConfig``) of SAC or TD3 cannot do, refused before anything is written, naming the
    setting: a warm-up (``--learning-starts``) the run's budget never gets past (no update would ever happen)."""
    from rl_gpu.core.errors import UsageError

    params = config.algo_params
    per_iteration = config.num_envs * (config.num_steps or 1)
    updates = config.max_updates * per_iteration  # the run stops at whichever limit comes first
    budget = updates if config.total_timesteps is None else min(config.total_timesteps, updates)
    if params.learning_starts >= budget:
        limit = (f"--total-timesteps {config.total_timesteps:,}" if budget != updates else
                 f"--max-updates {config.max_updates:,} x --num-envs {config.num_envs} x --num-steps "
                 f"{config.num_steps or 1} = {budget:,} steps")
        raise UsageError(f"--learning-starts {params.learning_starts:,}: the run ends ({limit}) before that many "
                         "transitions are collected, so no update would ever happen; lower --learning-starts or "
                         "raise the budget")
