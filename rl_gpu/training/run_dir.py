"""A run's directory: the files the tool writes there, and preparing it without touching anything else."""

from __future__ import annotations

import shutil
from pathlib import Path

from rl_gpu.core.errors import UsageError

RUN_FILES = ("config.json", "metrics.jsonl", "summary.json", "best.pt", "last.pt")
"""Every file a run writes (besides the ``tb/`` folder); ``--overwrite`` removes these and nothing else."""


def check_run_dirs(run_dirs: list[Path], overwrite: bool) -> None:
    """Refuse (before anything is written) run directories that exist and are not empty, unless ``overwrite``."""
    for run_dir in run_dirs:
        if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())) and not overwrite:
            raise UsageError(f"run directory {run_dir} already exists and is not empty; pass --overwrite to "
                             "replace it, --resume to continue it, or choose another --output")


def prepare_run_dir(run_dir: Path, overwrite: bool) -> None:
    """Create ``run_dir``; refuse an existing non-empty one unless ``overwrite`` (then clear our files)."""
    if run_dir.exists() and not run_dir.is_dir():
        raise UsageError(f"{run_dir} exists and is not a directory")
    if run_dir.exists() and any(run_dir.iterdir()):
        if not overwrite:
            raise UsageError(f"run directory {run_dir} already exists and is not empty; "
                             "pass --overwrite to replace it, --resume to continue it, or choose another --output")
        for name in RUN_FILES:
            (run_dir / name).unlink(missing_ok=True)
        shutil.rmtree(run_dir / "tb", ignore_errors=True)
    run_dir.mkdir(parents=True, exist_ok=True)
