"""Where a run is in its life, read from its files: whether ``last.pt`` belongs to the directory it sits in,
whether the run is finished, and how to continue runs a stop signal cut short.

A run is *finished* when its ``summary.json`` records a final status for the update ``last.pt`` holds: a
resume then neither trains again nor replaces the result, unless the limit that ended it was raised
(``--max-updates`` for ``goal_not_met``, ``--total-timesteps`` for ``budget_spent``, ``--max-updates`` for the
``budget_spent`` of a self-play run without a step budget). A run that stopped
between its last update and the end of its final evaluation (no summary yet) is completed by a resume: the
final evaluation runs, without further training.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from rl_gpu.core.errors import UsageError
from rl_gpu.envs.registry import module_to_import
from rl_gpu.runtime.checkpoint import CheckpointError
from rl_gpu.runtime.files import JsonReadError, read_json
from rl_gpu.training.config import RESUMABLE_CHANGES, TrainConfig

FINAL_STATUSES = ("success", "goal_not_met", "budget_spent")
"""Statuses of a run that ended by its own rules (a summary.json is written)."""


def _read_json(path: Path) -> dict | None:
    try:
        data = read_json(path)
    except JsonReadError:
        return None
    return data if isinstance(data, dict) else None


def check_checkpoint_belongs(run_dir: Path, payload: dict) -> None:
    """Refuse a ``last.pt`` that is not this directory's run: another environment, algorithm or seed than the
    directory's ``config.json`` records (a file copied in from elsewhere). Nothing is read but the two files."""
    last = run_dir / "last.pt"
    saved = _read_json(run_dir / "config.json")
    config = payload.get("config") if isinstance(payload.get("config"), dict) else {}
    if config.get("env", payload.get("env_id")) != payload.get("env_id"):
        raise CheckpointError(f"{last}: its environment {payload.get('env_id')!r} differs from the configuration "
                              f"stored with it ({config.get('env')!r}); not a checkpoint this tool wrote")
    if saved is None:
        return
    for key, mine in (("env", payload.get("env_id")), ("algo", payload.get("algo")), ("seed", payload.get("seed"))):
        if key in saved and mine is not None and saved[key] != mine:
            raise CheckpointError(
                f"{last} is a checkpoint of {key} {mine!r}, but {run_dir / 'config.json'} records {key} "
                f"{saved[key]!r}: it belongs to another run; not resuming (nothing was changed)")


def check_resumable(run_dir: Path, payload: dict, config: TrainConfig) -> None:
    """Refuse to resume a finished run (unless the limit that ended it was raised) or to lower
    ``--max-updates`` below the update the run is at."""
    update, step = int(payload.get("update", 0)), int(payload.get("global_step", 0))
    summary = _read_json(run_dir / "summary.json")
    saved = payload.get("config") if isinstance(payload.get("config"), dict) else {}
    if summary is not None and summary.get("status") in FINAL_STATUSES and summary.get("updates") == update:
        status = summary["status"]
        where = f"run {run_dir} is finished"
        if status == "success":
            raise UsageError(f"{where}: it met its goal at update {update} ({run_dir / 'summary.json'}); nothing "
                             "to continue (start a new run with --output to train further)")
        more_updates = config.max_updates > max(update, saved.get("max_updates", 0))
        more_steps = config.total_timesteps is None or config.total_timesteps > step
        budget = saved.get("total_timesteps")
        if status == "goal_not_met" or budget is None or step < budget:  # the --max-updates ended it
            if more_updates and more_steps:
                return
            what = (f"its goal was not met within {update} updates" if status == "goal_not_met" else
                    f"it trained its {update} updates")
            raise UsageError(f"{where}: {what} ({run_dir / 'summary.json'}); pass a --max-updates above {update} "
                             "to train it further")
        if config.total_timesteps is not None and config.total_timesteps > max(step, budget) \
                and config.max_updates > update:
            return
        raise UsageError(f"{where}: it spent its budget of {budget} steps at step {step} "
                         f"({run_dir / 'summary.json'}); pass a --total-timesteps above {step} to train it further"
                         + ("" if config.max_updates > update else f" (and a --max-updates above {update})"))
    if config.max_updates < update:
        raise UsageError(f"--max-updates {config.max_updates} is below the update run {run_dir} is at ({update}); "
                         f"pass --max-updates {update} or more")


def check_config_record(run_dir: Path, payload: dict) -> None:
    """Refuse a resume whose ``config.json`` disagrees with ``last.pt`` in a setting a resume cannot change: the
    run continues with the checkpoint's settings, so an edited config.json would describe another run. (A missing
    config.json is written again; the settings a resume may change are rewritten with the resume's.)"""
    path = run_dir / "config.json"
    if not os.path.lexists(path):
        return
    record = _read_json(path) if os.path.isfile(path) else None
    if record is None:
        raise UsageError(f"{path}: not a run's settings (unreadable, or not a JSON object): the run folder is "
                         "damaged; restore it, or delete it (a resume writes it again from last.pt)")
    saved = payload.get("config") if isinstance(payload.get("config"), dict) else {}
    saved = json.loads(json.dumps(saved, default=str))  # as config.json writes it (tuples as lists)
    differ = [k for k in saved if k not in RESUMABLE_CHANGES and k in record and record[k] != saved[k]]
    if differ:
        shown = ", ".join(f"{k} {record[k]!r} (last.pt: {saved[k]!r})" for k in differ[:3])
        raise UsageError(f"{path} was edited: it says {shown}; a resume continues with the settings of last.pt "
                         "and cannot change these. Restore config.json, or start a new run with --config "
                         f"{path} --output NEW")


def resume_args(config: TrainConfig, run_dir: Path) -> str:
    """``--resume RUN_DIR``, with ``--env ID`` when the run's environment imports a module of its own: a resume
    builds an id read from the run's files only when the user names it (:func:`~rl_gpu.envs.registry.
    check_may_import`)."""
    named = f" --env {shlex.quote(config.env)}" if module_to_import(config.env) else ""
    return f"--resume {shlex.quote(str(run_dir))}{named}"


def continuation(config: TrainConfig, results: list, prog: str = "rl-gpu train") -> list[str]:
    """Lines that tell how to finish a multi-seed run a stop signal cut short: the seeds done, the command
    that continues the stopped seed, and the command that starts the seeds not started."""
    done = [r.seed for r in results if r.status in FINAL_STATUSES]
    lines = [f"seeds finished: {', '.join(map(str, done)) if done else 'none'}"]
    stopped = [r for r in results if r.status not in FINAL_STATUSES]
    for r in stopped:
        if (r.run_dir / "last.pt").exists():
            lines.append(f"continue seed {r.seed}: {prog} {resume_args(config, r.run_dir)}")
    started = {r.seed for r in results}
    rest = [s for s in config.seeds if s not in started]
    if rest:
        source = next((r.run_dir / "config.json" for r in results if (r.run_dir / "config.json").exists()), None)
        seeds = " ".join(map(str, rest))
        if source is None:
            lines.append(f"start seeds {seeds}: run the same command with --seeds {seeds}")
        else:
            named = f" --env {shlex.quote(config.env)}" if module_to_import(config.env) else ""
            lines.append(f"start seed{'s' if len(rest) > 1 else ''} {seeds}: {prog} --config "
                         f"{shlex.quote(str(source))}{named} --output {shlex.quote(str(config.output))} "
                         f"--seeds {seeds}")
    return lines
