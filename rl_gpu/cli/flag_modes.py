"""Which ``rl-gpu train`` flags apply when: every flag is declared here, once, as applying in every mode or only
with another setting on, so that a flag given where it does nothing is refused in one line instead of being
silently ignored. Algorithms declare their own (``AlgorithmSpec.flag_needs``, ``ignores``). The test suite builds
its cases from the parser itself, so a new flag that is not declared here fails it.

Modes: a fresh run, a ``--resume`` (only the settings in ``RESUMABLE_CHANGES`` may change; the others are refused
by ``rl_gpu.cli.train``), ``--config FILE``, ``--self-play``, ``--parallel`` (``--pbt``), each ``--algo``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from rl_gpu.algos.registry import algorithm_spec
from rl_gpu.core.errors import UsageError
from rl_gpu.training.config import TrainConfig

NEEDS: dict[str, tuple[str, str]] = {
    "snapshot_every": ("self_play", "--self-play"),
    "pool_size": ("self_play", "--self-play"),
    "pfsp": ("self_play", "--self-play"),
    "latest_share": ("self_play", "--self-play"),
    "baseline_share": ("self_play", "--self-play"),
    "pbt": ("parallel", "--parallel"),
    "pbt_interval": ("pbt", "--pbt"),
    "memory_size": ("uses_memory", "--memory gru or lstm"),
    "lr_step_every": ("steps_lr", "--lr-schedule step"),
    "lr_step_gamma": ("steps_lr", "--lr-schedule step"),
    "desired_kl": ("adapts_lr", "--lr-schedule adaptive-kl"),
    "track_project": ("track", "--track"),
    "track_name": ("track", "--track"),
    "track_tags": ("track", "--track"),
    "mlflow_uri": ("tracks_mlflow", "--track mlflow"),
}
"""Training flags that do something only with another setting on: ``flag field -> (field, flag)``."""

NOT_ON_RESUME = {
    "seeds": "a resume continues the one seed whose folder it is given",
    "output": "a resume writes into the run folder it is given",
    "overwrite": "a resume continues its run folder and replaces nothing",
}
"""Training flags a ``--resume`` has no use for, and why (refused rather than ignored)."""

EVERY_MODE = frozenset({
    "env", "eval_env", "algo", "output", "seeds", "parallel", "num_envs", "num_steps", "learning_rate", "anneal_lr",
    "lr_schedule", "precision", "async_collect", "double_buffer", "hidden_sizes", "policy", "memory", "normalize_obs",
    "init_log_std", "min_updates", "max_updates", "total_timesteps",
    "eval_every", "eval_episodes", "final_eval_episodes", "consecutive_passes", "success_z", "solve_threshold",
    "deterministic_eval", "device", "threads", "compile", "overwrite", "config", "resume", "checkpoint_every",
    "log_every", "quiet", "self_play", "algo_params", "track", "video_every",
})
"""Training flags that apply to every run (an algorithm may still declare one it ignores)."""


def flag_field(flag: str) -> str:
    """``--pool-size`` (or ``--no-anneal-lr``) -> ``pool_size`` (``anneal_lr``)."""
    name = flag.removeprefix("--").replace("-", "_")
    return name.removeprefix("no_")


def check_flags_apply(given: Iterable[str], config: TrainConfig) -> None:
    """Refuse, in one line, the first flag of ``given`` (``--name`` as typed) that does nothing in ``config``'s
    run: one of :data:`NEEDS` without its setting, one of the algorithm's ``flag_needs`` without its switch, or a
    setting the algorithm ``ignores``."""
    spec = algorithm_spec(config.algo)
    section = config.algo_params
    own = dict(spec.flag_needs)
    given = list(given)
    for flag in given:
        field = flag_field(flag)
        if "--resume" in given and field in NOT_ON_RESUME:
            raise UsageError(f"{flag} does not apply with --resume ({NOT_ON_RESUME[field]}): drop {flag}")
        if field in NEEDS:
            needed, switch = NEEDS[field]
            if not getattr(config, needed):
                raise UsageError(f"{flag} applies only with {switch}, which this run does not have: drop {flag} "
                                 f"or add {switch}")
        elif field in own and not getattr(section, own[field]):
            switch = "--" + own[field].replace("_", "-")
            raise UsageError(f"{flag} applies only with {switch} (--algo {config.algo}), which is off: drop {flag} "
                             f"or add {switch}")
        elif field in spec.ignores:
            raise UsageError(f"--algo {config.algo} does not use {flag} (it is not part of how it trains): drop it")


def with_lr_flags(given: Iterable[str], config: TrainConfig) -> TrainConfig:
    """``config`` with an explicit ``--lr-schedule`` in charge: a preset's ``anneal_lr`` then no longer turns a
    ``constant`` schedule into ``linear``. ``--anneal-lr`` given together with another schedule is refused."""
    given = list(given)
    if "--lr-schedule" not in given:
        return config
    for flag, on in (("--anneal-lr", True), ("--no-anneal-lr", False)):
        if flag in given and (config.lr_schedule == "linear") != on:
            raise UsageError(f"{flag} contradicts --lr-schedule {config.lr_schedule} (--anneal-lr is --lr-schedule "
                             f"linear): give one of them")
    return dataclasses.replace(config, anneal_lr=config.lr_schedule == "linear")
