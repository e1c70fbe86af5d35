"""Typed training configuration. Field docstrings become ``--help``; per-environment defaults live in
:data:`PRESETS`, the one place that says how each built-in environment is trained."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rl_gpu.optimization import PPOConfig

DEFAULT_ENV = "RussianRoulette-v0"


@dataclass(frozen=True)
class TrainConfig:
    """Train a policy with PPO: one run per seed, validated, with the best checkpoint kept and re-evaluated."""

    env: str = DEFAULT_ENV
    """environment id; an unknown id is refused with the list of known ones"""
    output: Path = Path("artifacts/run")
    """output directory; each seed writes OUTPUT/seed-N/"""
    seeds: tuple[int, ...] = (11,)
    """one independent run per seed"""
    num_envs: int = 4096
    """N, environments stepped together"""
    num_steps: int | None = None
    """T, steps per rollout (default: the longest episode for turn-based games, else the preset)"""
    learning_rate: float = 1e-3
    """Adam learning rate"""
    anneal_lr: bool = False
    """decay the learning rate linearly to 0 over --max-updates"""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """hidden layer widths of the actor and of the critic"""
    normalize_obs: bool = False
    """normalise observations by running mean and variance (statistics saved with the policy)"""
    init_log_std: float = 0.0
    """continuous actions: initial log standard deviation of the Gaussian policy"""
    min_updates: int = 150
    """no success is declared before this many updates"""
    max_updates: int = 1000
    """give up (exit code 1) after this many updates without success"""
    eval_every: int = 25
    """validate every this many updates"""
    eval_episodes: int = 16384
    """episodes per validation"""
    final_eval_episodes: int = 24576
    """episodes of the final evaluation of best.pt on fresh seeds"""
    consecutive_passes: int = 3
    """validations in a row (at or after --min-updates) that must pass"""
    success_z: float = 3.0
    """turn-based games: a validation passes when the win rate beats the initial policy's by this many
    standard errors (3.0: one-sided p < 0.0014)"""
    solve_threshold: float | None = None
    """single-player tasks: a validation passes when the mean episode return reaches this"""
    deterministic_eval: bool = False
    """evaluate with the most probable action instead of sampling"""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto: CUDA when available, else CPU"""
    threads: int = 1
    """torch intra-op CPU threads (1 was never much slower on 2-core machines and avoided 10-100x stalls)"""
    compile: Literal["auto", "off", "inductor", "cudagraphs"] = "auto"
    """hot loop: off = eager; inductor = torch.compile the rollout step, GAE and minibatch loss (first update
    pays the compile time); cudagraphs = inductor + each rollout and each update replayed as one CUDA graph
    (CUDA only); auto = cudagraphs on CUDA, off on CPU (measured: benchmarks/README.md)"""
    overwrite: bool = False
    """replace an existing run directory instead of refusing"""
    config: Path | None = None
    """start from the settings in this JSON file (a run's config.json, so any run can be repeated exactly);
    flags given as well override it"""
    resume: Path | None = None
    """continue the run in this directory (OUTPUT/seed-N) from its last.pt; other flags keep their saved
    values, except --max-updates, --device, --threads, --log-every, --checkpoint-every, --final-eval-episodes"""
    checkpoint_every: int = 10
    """write last.pt every this many updates (a crash loses at most this many)"""
    log_every: int = 5
    """plain progress: print a line every this many updates"""
    quiet: bool = False
    """plain progress lines instead of the live view (also when stdout is not a terminal)"""
    ppo: PPOConfig = field(default_factory=PPOConfig)
    """PPO hyper-parameters (flags without a prefix: --gamma, --clip-coef, ...)"""

    def __post_init__(self) -> None:
        positive = ["num_envs", "min_updates", "max_updates", "eval_every", "eval_episodes",
                    "final_eval_episodes", "consecutive_passes", "threads", "log_every", "checkpoint_every"]
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got {value!r}")
        if self.num_steps is not None and self.num_steps <= 0:
            raise ValueError(f"--num-steps must be a positive integer, got {self.num_steps!r}")
        if not self.seeds:
            raise ValueError("--seeds needs at least one seed")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"--seeds has duplicates: {list(self.seeds)}")
        if any(s < 0 for s in self.seeds):
            raise ValueError(f"--seeds must be non-negative, got {list(self.seeds)}")
        if self.min_updates > self.max_updates:
            raise ValueError(f"--min-updates ({self.min_updates}) exceeds --max-updates ({self.max_updates})")
        if not self.learning_rate > 0:
            raise ValueError(f"--learning-rate must be positive, got {self.learning_rate!r}")
        if not self.hidden_sizes or any(h <= 0 for h in self.hidden_sizes):
            raise ValueError(f"--hidden-sizes must be positive widths, got {list(self.hidden_sizes)}")

    def batch_size(self, num_steps: int) -> int:
        """Slots per rollout, T * N."""
        return num_steps * self.num_envs

    def minibatch_size(self, num_steps: int) -> int:
        """Slots per minibatch; raises if T * N is not divisible by ``num_minibatches``."""
        batch = self.batch_size(num_steps)
        if batch % self.ppo.num_minibatches:
            raise ValueError(
                f"num_envs * num_steps = {self.num_envs} * {num_steps} = {batch} is not divisible by "
                f"--num-minibatches {self.ppo.num_minibatches}"
            )
        return batch // self.ppo.num_minibatches

    def to_dict(self) -> dict:
        """Plain JSON-able values (paths as strings)."""
        def plain(v):
            if isinstance(v, Path):
                return str(v)
            if isinstance(v, tuple):
                return list(v)
            if dataclasses.is_dataclass(v):
                return {k: plain(x) for k, x in dataclasses.asdict(v).items()}
            return v
        return {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}


_CLASSIC = {
    "num_steps": 128,
    "learning_rate": 1e-3,
    "anneal_lr": True,
    "min_updates": 1,
    "eval_every": 5,
    "eval_episodes": 64,
    "final_eval_episodes": 1000,
    "consecutive_passes": 2,
    "deterministic_eval": True,
}

PRESETS: dict[str, dict] = {
    "RussianRoulette-v0": {
        "num_envs": 4096,
        "learning_rate": 1e-3,
        "min_updates": 150,
        "max_updates": 1000,
        "eval_every": 25,
        # Games last at most 10 actions, so future rewards need no discount.
        "ppo": {"gamma": 1.0, "gae_lambda": 0.95, "update_epochs": 4, "num_minibatches": 4, "ent_coef": 0.01},
    },
    "CartPole-v1": {
        **_CLASSIC, "num_envs": 64, "max_updates": 200, "solve_threshold": 475.0,
        "ppo": {"gamma": 0.99, "gae_lambda": 0.95, "update_epochs": 4, "num_minibatches": 16, "ent_coef": 0.01},
    },
    "Acrobot-v1": {
        **_CLASSIC, "num_envs": 64, "max_updates": 300, "solve_threshold": -100.0,
        "ppo": {"gamma": 0.99, "gae_lambda": 0.95, "update_epochs": 4, "num_minibatches": 16, "ent_coef": 0.01},
    },
    "Pendulum-v1": {
        # Pendulum's rewards reach -16 per step and its value scale is large: scaled rewards and normalised
        # observations, a short horizon (gamma 0.9) and 10 epochs, as RL-Zoo's tuned PPO does.
        **_CLASSIC, "num_envs": 64, "num_steps": 256, "max_updates": 200, "eval_every": 10,
        "solve_threshold": -200.0, "normalize_obs": True,
        "ppo": {"gamma": 0.9, "gae_lambda": 0.95, "update_epochs": 10, "num_minibatches": 16, "ent_coef": 0.0,
                "reward_scale": 0.1},
    },
    "MountainCar-v0": {
        **_CLASSIC, "num_envs": 128, "max_updates": 300, "eval_every": 10, "solve_threshold": -110.0,
        "normalize_obs": True,
        "ppo": {"gamma": 0.99, "gae_lambda": 0.95, "update_epochs": 4, "num_minibatches": 16, "ent_coef": 0.01},
    },
    "MountainCarContinuous-v0": {
        **_CLASSIC, "num_envs": 64, "num_steps": 256, "max_updates": 200, "eval_every": 10,
        "solve_threshold": 90.0, "normalize_obs": True,
        "ppo": {"gamma": 0.99, "gae_lambda": 0.95, "update_epochs": 10, "num_minibatches": 16, "ent_coef": 0.0,
                "reward_scale": 0.1},
    },
}
"""Per-environment defaults over :class:`TrainConfig`'s; command-line flags override them."""

GYMNASIUM_DEFAULTS: dict = {**_CLASSIC, "num_envs": 16}
"""Defaults for a ``gym:`` id without a preset: a single-player task whose sub-environments step in Python on
the host, so a small batch (the global defaults are the roulette game's 4096 rows and 24,576 final episodes)."""


def preset_config(env_id: str) -> TrainConfig:
    """The default configuration for ``env_id`` (the global defaults for an id without a preset).

    ``gym:X`` takes ``X``'s preset when there is one: the same task, stepped by Gymnasium on the host; other
    ``gym:`` ids take :data:`GYMNASIUM_DEFAULTS`.
    """
    fallback = GYMNASIUM_DEFAULTS if env_id.startswith("gym:") else {}
    preset = dict(PRESETS.get(env_id, PRESETS.get(env_id.removeprefix("gym:"), fallback)))
    ppo = PPOConfig(**preset.pop("ppo", {}))
    return TrainConfig(env=env_id, ppo=ppo, **preset)


RESUMABLE_CHANGES = frozenset(
    {"max_updates", "device", "threads", "compile", "log_every", "checkpoint_every", "final_eval_episodes",
     "resume", "overwrite", "output", "seeds", "config", "quiet"}
)
"""Fields that may differ from the saved configuration when a run is resumed."""


def config_from_dict(data: dict) -> TrainConfig:
    """Rebuild a :class:`TrainConfig` from :meth:`TrainConfig.to_dict` output; keys that are not settings
    (a run's config.json also records versions and hardware) are ignored."""
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    data = {k: v for k, v in data.items() if k in known}
    ppo_known = {f.name for f in dataclasses.fields(PPOConfig)}
    ppo = PPOConfig(**{k: v for k, v in data.pop("ppo", {}).items() if k in ppo_known})
    tuples = {"seeds", "hidden_sizes"}
    paths = {"output", "resume"}
    values = {k: (tuple(v) if k in tuples else Path(v) if k in paths and v is not None else v)
              for k, v in data.items()}
    return TrainConfig(ppo=ppo, **values)
