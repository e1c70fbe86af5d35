"""Typed training configuration: field docstrings become ``--help``. Per-environment defaults are in
:mod:`rl_gpu.cli.presets`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rl_gpu.algos.ppo.config import PPOConfig

DEFAULT_ENV = "RussianRoulette-v0"


@dataclass(frozen=True)
class TrainConfig:
    """Train a policy: one run per seed, validated, with the best checkpoint kept and re-evaluated."""

    env: str = DEFAULT_ENV
    """environment id; an unknown id is refused with the list of known ones"""
    algo: Literal["ppo"] = "ppo"
    """algorithm; its hyper-parameters are the flags of its own section (PPO: --gamma, --clip-coef, ...)"""
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
    """torch intra-op CPU threads (1: on small machines more threads stalled whenever another core was busy)"""
    compile: Literal["auto", "off", "inductor", "cudagraphs"] = "auto"
    """hot loop: off = eager; inductor = torch.compile the rollout step, GAE and minibatch loss (first update
    pays the compile time); cudagraphs = inductor + each whole iteration (rollout and update) replayed as one
    CUDA graph (CUDA only); auto = cudagraphs on CUDA, off on CPU (why: benchmarks/README.md)"""
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

    def algo_config(self):
        """The hyper-parameters of the chosen algorithm (the section named by ``algo``)."""
        return getattr(self, self.algo)

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
