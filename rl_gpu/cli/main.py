"""``rl-gpu`` / ``python -m rl_gpu``: one entry point with subcommands."""

from __future__ import annotations

import sys
from typing import Sequence

from rl_gpu.cli.parsing import quiet_broken_pipe, version_text

COMMANDS = {
    "train": "train a policy, validate, keep the best checkpoint",
    "evaluate": "evaluate a checkpoint on fresh seeds",
    "plot": "learning curves of runs as a PNG",
    "export": "a checkpoint's policy as ONNX or TorchScript",
    "bench": "throughput of env steps, rollouts and training over N (transitions/s)",
    "tune": "search hyper-parameters with Optuna (a study in SQLite that a second run continues)",
    "continual": "train one policy on tasks in turn and measure what it forgets",
}

USAGE = "usage: rl-gpu {" + ",".join(COMMANDS) + "} [--help] [--version] ...\n\n" + "\n".join(
    f"  {name:<10} {text}" for name, text in COMMANDS.items()
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the subcommand named first in ``argv``; returns its exit code."""
    return quiet_broken_pipe(_main)(argv)


def _main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    if args[0] == "--version":
        print(version_text())
        return 0
    command, rest = args[0], args[1:]
    if command == "train":
        from rl_gpu.cli.train import main as run
    elif command == "evaluate":
        from rl_gpu.cli.evaluate import main as run
    elif command == "plot":
        from rl_gpu.cli.plot import main as run
    elif command == "export":
        from rl_gpu.cli.export import main as run
    elif command == "bench":
        from rl_gpu.cli.bench import main as run
    elif command == "tune":
        from rl_gpu.cli.tune import main as run
    elif command == "continual":
        from rl_gpu.cli.continual import main as run
    else:
        print(f"rl-gpu: error: unknown command {command!r}; choose one of: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    from rl_gpu.envs.registry import named_ids_only

    # No environment id read from a file imports a module: a command adds the ids its user names.
    with named_ids_only():
        return run(rest)


if __name__ == "__main__":
    from rl_gpu.cli.safe_path import drop_cwd_from_path

    drop_cwd_from_path()
    sys.exit(main())
