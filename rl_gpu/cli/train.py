"""``rl-gpu train`` / ``python -m rl_gpu.train``: train, validate, keep the best checkpoint.

Exit codes: 0 every seed met its goal; 1 a seed did not within ``--max-updates``; 2 bad input (nothing on disk
touched); 3 a non-finite loss or gradient stopped training; 130/143 stopped by SIGINT/SIGTERM after saving.
"""

from __future__ import annotations

import dataclasses
import signal
import sys
from pathlib import Path
from typing import Sequence

from rl_gpu.cli.parsing import fail, parse
from rl_gpu.cli.presets import preset_config
from rl_gpu.training.config import DEFAULT_ENV, RESUMABLE_CHANGES, TrainConfig, config_from_dict

PROG = "rl-gpu train"


def _flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value of ``flag`` in ``args`` (``--flag X`` or ``--flag=X``), read before full parsing."""
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def _saved_config(run_dir: Path) -> TrainConfig:
    from rl_gpu.runtime.checkpoint import load_checkpoint

    if not run_dir.is_dir():
        raise ValueError(f"--resume {run_dir}: no such run directory")
    last = run_dir / "last.pt"
    if not last.exists():
        raise ValueError(f"--resume {run_dir}: no last.pt in it (nothing to resume)")
    payload = load_checkpoint(last)
    if "trainer" not in payload:
        raise ValueError(f"--resume {run_dir}: {last} is not a resumable checkpoint")
    return config_from_dict(payload["config"])


def _file_config(path: Path) -> TrainConfig:
    import json

    if not path.is_file():
        raise ValueError(f"--config {path}: no such file")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"--config {path}: not valid JSON ({e})") from None
    if not isinstance(data, dict) or "env" not in data:
        raise ValueError(f"--config {path}: not a training configuration (no 'env' key)")
    try:
        return dataclasses.replace(config_from_dict(data), config=path)
    except TypeError as e:
        raise ValueError(f"--config {path}: {e}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """Parse flags, then train (or resume) every seed; see the module docstring for exit codes."""
    from rl_gpu.core.errors import UsageError
    from rl_gpu.envs.registry import is_known, registered_ids
    from rl_gpu.runtime.checkpoint import CheckpointError
    from rl_gpu.training.runner import EXIT_GOAL_NOT_MET, EXIT_NUMERICAL, resume, train

    args = list(sys.argv[1:] if argv is None else argv)
    resume_dir = _flag_value(args, "--resume")
    if resume_dir is not None:
        try:
            default = _saved_config(Path(resume_dir))
        except (ValueError, CheckpointError) as e:
            fail(PROG, str(e))
    elif _flag_value(args, "--config") is not None:
        try:
            default = _file_config(Path(_flag_value(args, "--config")))
        except ValueError as e:
            fail(PROG, str(e))
        if not is_known(default.env):
            fail(PROG, f"unknown environment {default.env!r}; known: {', '.join(registered_ids())}, or gym:<any Gymnasium id>")
    else:
        env_id = _flag_value(args, "--env") or DEFAULT_ENV
        if not is_known(env_id):
            fail(PROG, f"unknown environment {env_id!r}; known: {', '.join(registered_ids())}, or gym:<any Gymnasium id>")
        default = preset_config(env_id)
    config = parse(TrainConfig, PROG, args, default=default, description=TrainConfig.__doc__)
    try:
        if config.resume is not None:
            changed = [f.name for f in dataclasses.fields(TrainConfig)
                       if getattr(config, f.name) != getattr(default, f.name) and f.name not in RESUMABLE_CHANGES]
            if changed:
                raise UsageError(f"--resume keeps the run's saved settings; cannot change "
                                 f"{', '.join('--' + c.replace('_', '-') for c in changed)}")
            results = [resume(config.resume, config)]
        else:
            results = train(config)
    except (UsageError, CheckpointError) as e:
        fail(PROG, str(e))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; checkpoints written so far are intact", file=sys.stderr)
        return 128 + signal.SIGINT
    code = 0
    for r in results:
        if r.status == "interrupted":
            print(f"{PROG}: {r.reason}", file=sys.stderr)
            return 128 + (r.signum or signal.SIGINT)
        if r.status == "numerical_error":
            print(f"{PROG}: seed {r.seed}: {r.reason}", file=sys.stderr)
            return EXIT_NUMERICAL
        if r.status == "goal_not_met":
            print(f"{PROG}: seed {r.seed} did not reach its goal: {r.reason}", file=sys.stderr)
            code = EXIT_GOAL_NOT_MET
    return code


if __name__ == "__main__":
    sys.exit(main())
