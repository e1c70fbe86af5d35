"""The Python API: ``rl_gpu.train(env=..., algo=..., total_timesteps=..., callbacks=[...], **overrides)``, the same
run as ``rl-gpu train`` (the same presets, checks, files and results) from a script or a notebook, returning a
:class:`Run`.

Settings, lowest first: the environment's preset for the algorithm, then the keyword arguments, named as
``TrainConfig``'s fields and the algorithm's hyper-parameters (``num_envs=64``, ``clip_coef=0.1``: the flags'
names with underscores). An unknown name, a bad value or a setting that does nothing in this run raises
:class:`~rl_gpu.core.errors.UsageError` (one line, naming what is allowed) before anything is written.
``callbacks`` answer the run's events (:mod:`rl_gpu.training.events`); one that returns ``False`` pauses the run
(``rl_gpu.train(resume=run.run_dir)`` continues it exactly).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rl_gpu.cli.flag_modes import NOT_ON_RESUME, check_flags_apply, with_lr_flags
from rl_gpu.cli.outputs import output_callbacks
from rl_gpu.cli.presets import preset_config
from rl_gpu.core.errors import UsageError
from rl_gpu.runtime.files import read_json
from rl_gpu.training.config import (
    DEFAULT_ENV,
    RESUMABLE_CHANGES,
    TrainConfig,
    config_from_dict,
    lowered_min_updates,
)
from rl_gpu.training.events import CallbackLike
from rl_gpu.training.outcome import RunResult

PROGRESS = ("auto", "live", "plain", "off")


@dataclasses.dataclass
class Run:
    """What :func:`train` returns: the run's configuration, each seed's result, and its files read on demand."""

    config: TrainConfig
    results: list[RunResult]
    _policies: dict = dataclasses.field(default_factory=dict, repr=False)

    @property
    def run_dir(self) -> Path:
        """The first seed's folder (``OUTPUT/seed-N``)."""
        return self.results[0].run_dir

    @property
    def run_dirs(self) -> list[Path]:
        return [r.run_dir for r in self.results]

    @property
    def status(self) -> str:
        """The first seed's status: success, goal_not_met, budget_spent, numerical_error, paused, interrupted."""
        return self.results[0].status

    @property
    def summary(self) -> dict:
        """The first seed's summary (summary.json's content; empty for a run that did not finish)."""
        return self.results[0].summary

    @property
    def metrics(self) -> list[dict]:
        """The first seed's metrics.jsonl: one dictionary per update and per validation, in order."""
        path = self.run_dir / "metrics.jsonl"
        if not path.is_file():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    @property
    def policy(self):
        """The first seed's best policy (best.pt, else last.pt), ready to ``act``
        (:class:`~rl_gpu.interop.policy_io.LoadedPolicy`)."""
        return self.policy_of(0)

    def policy_of(self, index: int):
        """Seed ``index``'s best policy (by position in ``config.seeds``)."""
        if index not in self._policies:
            from rl_gpu.interop.policy_io import load

            run_dir = self.results[index].run_dir
            path = run_dir / "best.pt" if (run_dir / "best.pt").is_file() else run_dir / "last.pt"
            self._policies[index] = load(path)
        return self._policies[index]

    def __repr__(self) -> str:
        return (f"Run(env={self.config.env!r}, algo={self.config.algo!r}, status={self.status!r}, "
                f"run_dir={str(self.run_dir)!r})")


def _names() -> tuple[set[str], Callable[[str], set[str]]]:
    top = {f.name for f in dataclasses.fields(TrainConfig)} - {"algo_params", "config", "resume", "overwrite"}

    def algo_names(algo: str) -> set[str]:
        from rl_gpu.algos.registry import algorithm_spec

        return {f.name for f in dataclasses.fields(algorithm_spec(algo).config_class())}
    return top, algo_names


def _unknown(name: str, known: Iterable[str], algo: str) -> UsageError:
    near = difflib.get_close_matches(name, list(known), n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return UsageError(f"train() got an unknown setting {name!r}{hint}: settings are TrainConfig's fields and --algo "
                      f"{algo}'s hyper-parameters, as `rl-gpu train --algo {algo} --help` lists them with underscores")


def _split(overrides: dict, algo: str) -> tuple[dict, dict]:
    top, algo_names = _names()
    own = algo_names(algo)
    outer, inner = {}, {}
    for name, value in overrides.items():
        if name in top:
            outer[name] = value
        elif name in own:
            inner[name] = value
        else:
            raise _unknown(name, top | own, algo)
    return outer, inner


def _free_output(env: str, algo: str) -> Path:
    """``artifacts/<env>-<algo>-<k>`` for the first ``k`` that does not exist yet."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", env).strip("._") or "run"
    k = 1
    while (Path("artifacts") / f"{stem}-{algo}-{k}").exists():
        k += 1
    return Path("artifacts") / f"{stem}-{algo}-{k}"


def build_config(env: str = DEFAULT_ENV, algo: str = "ppo", total_timesteps: int | None = None, *,
                 output: str | Path | None = None, seed: int | None = None, config: str | Path | None = None,
                 overwrite: bool = False, **overrides: Any) -> TrainConfig:
    """The :class:`TrainConfig` that :func:`train` runs (see the module docstring), checked as the CLI checks it."""
    from rl_gpu.envs.registry import check_may_import
    from rl_gpu.training.preflight import check_env_id

    if config is not None:
        base = config_from_dict(read_json(Path(config)))
        env, algo = base.env, base.algo
    else:
        check_env_id(env)
        base = preset_config(env, algo)
    check_may_import(env, "train()")
    given = dict(overrides)
    if total_timesteps is not None:
        given["total_timesteps"] = total_timesteps
    if seed is not None:
        if "seeds" in given:
            raise UsageError("train() takes seed or seeds, not both")
        given["seeds"] = (seed,)
    outer, inner = _split(given, algo)
    lowered = lowered_min_updates(base, outer.get("max_updates"))
    if lowered is not None and "min_updates" not in outer:
        outer["min_updates"] = lowered  # as the CLI does
    try:
        params = dataclasses.replace(base.algo_params, **inner) if inner else base.algo_params
    except (TypeError, ValueError) as e:  # the algorithm's own checks of its hyper-parameters
        raise UsageError(" ".join(str(e).split())) from None
    values = {f.name: getattr(base, f.name) for f in dataclasses.fields(TrainConfig)}
    out = Path(output) if output is not None else (base.output if config is not None else _free_output(env, algo))
    built = TrainConfig(**{**values, **outer, "algo_params": params, "output": out, "overwrite": overwrite,
                           "config": Path(config) if config is not None else None})
    flags = [f"--{name.replace('_', '-')}" for name in given]
    check_flags_apply(flags, built)
    return with_lr_flags(flags, built)


def _display(progress: str) -> str:
    if progress not in PROGRESS:
        raise UsageError(f"progress must be one of {', '.join(PROGRESS)}, got {progress!r}")
    if progress == "auto" and "ipykernel" in sys.modules:
        return "live"  # a notebook: rich draws the live view in the cell's output
    return progress


def train(env: str = DEFAULT_ENV, algo: str = "ppo", total_timesteps: int | None = None, *,
          callbacks: Iterable[CallbackLike] = (), output: str | Path | None = None, seed: int | None = None,
          config: str | Path | None = None, resume: str | Path | None = None, overwrite: bool = False,
          progress: str = "auto", log: Callable[[str], None] = print, **overrides: Any) -> Run:
    """Train ``algo`` on ``env`` as ``rl-gpu train`` does and return the :class:`Run`.

    Args:
        env: an environment id (``rl_gpu.registered_ids()``, ``gym:...``, ``module:Class``, with ``?params``).
        algo: a registered algorithm (``ppo``, ``sac``, ``td3``, ``mappo``, ...).
        total_timesteps: a step budget (None: the preset's limits).
        callbacks: :class:`~rl_gpu.training.events.Callback` objects or functions of one event.
        output: the run's folder (None: a new ``artifacts/<env>-<algo>-<k>``); each seed writes ``seed-N/`` in it.
        seed: the one seed to train (or ``seeds=(...)`` for several).
        config: start from a JSON settings file (a run's config.json) instead of the preset.
        resume: continue the run in this ``OUTPUT/seed-N`` folder from its last.pt (the settings it may change, as
            ``rl-gpu train --resume``, are the only overrides accepted).
        progress: ``auto`` (a live view on a terminal or in a notebook, else plain lines), ``live``, ``plain``
            or ``off``.
        log: where the run's lines go.
        overrides: any other setting, by field name (``num_envs=64``, ``learning_rate=3e-4``, ``clip_coef=0.1``).
    """
    from rl_gpu.cli.train import exploitability_measure
    from rl_gpu.runtime.distributed import process_group
    from rl_gpu.training.ranks import check_config
    from rl_gpu.training.runner import resume as resume_run
    from rl_gpu.training.runner import train as train_run

    display = _display(progress)
    if resume is not None:
        built = _resumed_config(Path(resume), overrides, total_timesteps)
    else:
        built = build_config(env, algo, total_timesteps, output=output, seed=seed, config=config,
                             overwrite=overwrite, **overrides)
    with process_group(built.device):
        check_config(built)
        callbacks = [*output_callbacks(built, log), *callbacks]
        measure = exploitability_measure(built)
        if resume is not None:
            results = [resume_run(Path(resume), built, log=log, display=display, measure=measure,
                                  callbacks=callbacks)]
        elif built.parallel:
            from rl_gpu.training.population import train_population

            results = train_population(built, log=log, display=display, callbacks=callbacks)
        else:
            results = train_run(built, log=log, display=display, measure=measure, callbacks=callbacks)
    return Run(built, results)


def _resumed_config(run_dir: Path, overrides: dict, total_timesteps: int | None) -> TrainConfig:
    saved_path = run_dir / "config.json"
    if not saved_path.is_file():
        raise UsageError(f"resume={str(run_dir)!r}: no config.json there (give an OUTPUT/seed-N folder)")
    saved = config_from_dict(read_json(saved_path))
    given = dict(overrides)
    if total_timesteps is not None:
        given["total_timesteps"] = total_timesteps
    for name in given:
        if name not in RESUMABLE_CHANGES or name in NOT_ON_RESUME:
            may = sorted(RESUMABLE_CHANGES - set(NOT_ON_RESUME) - {"resume", "config"})
            raise UsageError(f"resume keeps the run's saved settings: {name!r} cannot change (these may: "
                             f"{', '.join(may)})")
    return dataclasses.replace(saved, **given, resume=run_dir)
