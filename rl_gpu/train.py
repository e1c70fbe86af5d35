"""``rl-gpu train`` / ``python -m rl_gpu.train``: train with PPO, validate, keep the best checkpoint."""

from __future__ import annotations

import sys
from typing import Sequence

from rl_gpu.cli import fail, parse
from rl_gpu.config import DEFAULT_ENV, TrainConfig, preset_config

PROG = "rl-gpu train"


def _env_from_args(args: Sequence[str]) -> str:
    """The ``--env`` value, read before full parsing so the environment's preset can supply the defaults."""
    for i, arg in enumerate(args):
        if arg == "--env" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--env="):
            return arg.split("=", 1)[1]
    return DEFAULT_ENV


def main(argv: Sequence[str] | None = None) -> int:
    """Parse flags, train every seed; exit 0 when every seed met its goal, 1 when one did not, 2 on bad input."""
    from rl_gpu.checkpoint import CheckpointError
    from rl_gpu.envs.registry import registered_ids
    from rl_gpu.trainer import UsageError, train

    args = list(sys.argv[1:] if argv is None else argv)
    env_id = _env_from_args(args)
    if env_id not in registered_ids():
        fail(PROG, f"unknown environment {env_id!r}; known: {', '.join(registered_ids())}")
    config = parse(TrainConfig, PROG, args, default=preset_config(env_id), description=TrainConfig.__doc__)
    try:
        results = train(config)
    except (UsageError, CheckpointError) as e:
        fail(PROG, str(e))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; checkpoints written so far are intact", file=sys.stderr)
        return 130
    failed = [r for r in results if not r.success]
    for r in failed:
        print(f"{PROG}: seed {r.seed} did not reach its goal: {r.reason}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
