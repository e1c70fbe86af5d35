"""``rl-gpu plot``: learning curves from runs' ``metrics.jsonl``, one PNG, x = environment steps.

Runs named ``seed-N`` under one directory are seeds of one configuration: they are drawn as one curve, the
mean over seeds with a band (min to max, or mean ± one standard deviation) on the steps all of them reached.
Any other run is its own curve. A directory holding ``seed-*/metrics.jsonl`` (a ``train --output``) stands for
all its seeds.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import tyro

from rl_gpu.cli.parsing import fail, parse

PROG = "rl-gpu plot"
SEED_DIR = re.compile(r"seed-\d+")
EPISODE_METRICS = ("episode_return", "train_win_rate", "episode_length")
"""Metrics measured over the episodes that ended in an update: lines with ``"episodes": 0`` carry no value."""
GRID_POINTS = 500


class PlotError(ValueError):
    """Unusable input: reported as one line, exit code 2."""


@dataclass(frozen=True)
class PlotConfig:
    """Plot learning curves (x = environment steps) from run directories written by `rl-gpu train`."""

    run_dirs: tyro.conf.Positional[tuple[Path, ...]]
    """run directories (OUTPUT/seed-N, or OUTPUT for all its seeds)"""
    output: Path
    """image file to write (PNG)"""
    metric: tuple[str, ...] = ()
    """metrics to plot, one panel each; nested fields with a dot (validation.score). Default: episode_return,
    and validation.score when the runs have validations"""
    band: Literal["minmax", "std"] = "minmax"
    """spread over seeds: min to max, or mean ± one standard deviation"""
    smooth: int = 1
    """trailing moving average over this many points of each run (1: none); validations are not smoothed"""
    title: str | None = None
    """figure title"""

    def __post_init__(self) -> None:
        if not self.run_dirs:
            raise ValueError("give at least one run directory")
        if isinstance(self.smooth, bool) or self.smooth < 1:
            raise ValueError(f"--smooth must be a positive integer, got {self.smooth!r}")


@dataclass
class Run:
    """One run's metrics as read from its ``metrics.jsonl``."""

    path: Path
    records: list[dict]
    skipped_lines: int
    """lines that were not a JSON object (a torn last line of a crashed run)"""


def read_metrics(run_dir: Path) -> Run:
    """Read ``run_dir/metrics.jsonl``; lines that do not parse are counted and left out."""
    path = run_dir / "metrics.jsonl"
    records, skipped = [], 0
    try:
        text = path.read_text()
    except OSError as e:
        raise PlotError(f"{path}: cannot read ({e.strerror or e})") from None
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            skipped += 1
            continue
        if isinstance(record, dict):
            records.append(record)
        else:
            skipped += 1
    if not records:
        raise PlotError(f"{path}: no metrics recorded")
    return Run(run_dir, records, skipped)


def find_runs(paths: Sequence[Path]) -> list[Path]:
    """Run directories named by ``paths``: each path is a run, or holds ``seed-*`` runs."""
    runs: list[Path] = []
    for path in paths:
        path = Path(path)
        if not path.exists():
            raise PlotError(f"{path}: no such directory")
        if not path.is_dir():
            raise PlotError(f"{path}: not a directory")
        if (path / "metrics.jsonl").is_file():
            runs.append(path)
            continue
        seeds = sorted(p for p in path.iterdir()
                       if SEED_DIR.fullmatch(p.name) and (p / "metrics.jsonl").is_file())
        if not seeds:
            raise PlotError(f"{path}: no metrics.jsonl (neither a run directory nor one holding seed-N runs)")
        runs.extend(seeds)
    return list(dict.fromkeys(runs))


def group_runs(runs: Sequence[Path]) -> dict[str, list[Path]]:
    """Curve label -> runs: ``seed-N`` siblings form one group named after their parent."""
    groups: dict[str, list[Path]] = {}
    for run in runs:
        if SEED_DIR.fullmatch(run.name):
            key = run.resolve().parent.name or str(run.parent)
        else:
            key = run.name or str(run)
        groups.setdefault(key, []).append(run)
    return groups


def lookup(record: dict, metric: str) -> float | None:
    """The finite number at ``metric`` (dots descend into nested dicts) in ``record``, else None."""
    value: object = record
    for part in metric.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def series(run: Run, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """``(environment steps, values)`` of ``metric`` over the run, in step order."""
    xs, ys = [], []
    for record in run.records:
        if metric in EPISODE_METRICS and record.get("episodes") == 0:
            continue
        y, x = lookup(record, metric), lookup(record, "global_step")
        if y is not None and x is not None:
            xs.append(x)
            ys.append(y)
    order = np.argsort(np.asarray(xs, dtype=np.float64), kind="stable")
    return np.asarray(xs, dtype=np.float64)[order], np.asarray(ys, dtype=np.float64)[order]


def smooth(y: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average; the first points average what exists so far."""
    if window <= 1 or y.size == 0:
        return y
    total = np.cumsum(np.insert(y, 0, 0.0))
    upper = np.arange(1, y.size + 1)
    lower = np.maximum(upper - window, 0)
    return (total[upper] - total[lower]) / (upper - lower)


def numeric_metrics(runs: Sequence[Run]) -> list[str]:
    """Every metric name with a number somewhere in ``runs`` (nested ones dotted)."""
    names: dict[str, None] = {}

    def walk(value: object, prefix: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{prefix}{key}.")
        elif isinstance(value, (int, float)):
            names[prefix[:-1]] = None

    for run in runs:
        for record in run.records:
            walk(record, "")
    return [n for n in names if n not in ("update", "global_step")]


def aggregate(curves: Sequence[tuple[np.ndarray, np.ndarray]], band: str) -> tuple[np.ndarray, ...] | None:
    """Mean and band of several runs on the steps they all reached: ``(x, mean, low, high)``.

    Each run is linearly interpolated onto a common grid of at most :data:`GRID_POINTS` steps between the
    largest first step and the smallest last step (runs of one configuration log at nearly the same steps).
    None when the runs share no range.
    """
    start = max(x[0] for x, _ in curves)
    stop = min(x[-1] for x, _ in curves)
    if stop < start:
        return None
    steps = np.unique(np.concatenate([x[(x >= start) & (x <= stop)] for x, _ in curves]))
    if steps.size > GRID_POINTS:
        steps = np.linspace(start, stop, GRID_POINTS)
    values = np.stack([np.interp(steps, x, y) for x, y in curves])
    mean = values.mean(0)
    if band == "std":
        std = values.std(0)
        return steps, mean, mean - std, mean + std
    return steps, mean, values.min(0), values.max(0)


def plot_runs(
    paths: Sequence[Path],
    output: Path,
    metrics: Sequence[str] = (),
    band: str = "minmax",
    smoothing: int = 1,
    title: str | None = None,
) -> list[str]:
    """Write the learning curves of the runs named by ``paths`` to ``output``; returns the metrics drawn.

    Raises :class:`PlotError` for a missing directory, a run without metrics, or metrics no run has.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotError("plotting needs matplotlib (pip install 'rl-gpu[plot]')") from None
    runs = {path: read_metrics(path) for path in find_runs(paths)}
    available = numeric_metrics(list(runs.values()))
    if not metrics:
        metrics = ["episode_return"] + (["validation.score"] if "validation.score" in available else [])
    missing = [m for m in metrics if m not in available]
    if missing:
        raise PlotError(
            f"no run has metric {', '.join(map(repr, missing))}; available: {', '.join(available)}"
        )
    groups = group_runs(list(runs))
    fig, axes = plt.subplots(len(metrics), 1, figsize=(8, 3.2 * len(metrics)), sharex=True, squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, metric in zip(axes[:, 0], metrics):
        for index, (label, members) in enumerate(groups.items()):
            color = colors[index % len(colors)]
            curves = []
            for member in members:
                x, y = series(runs[member], metric)
                if x.size:
                    curves.append((x, y if metric.startswith("validation.") else smooth(y, smoothing)))
            if not curves:
                continue
            combined = aggregate(curves, band) if len(curves) > 1 else None
            if combined is None:
                for i, (x, y) in enumerate(curves):
                    ax.plot(x, y, color=color, label=label if i == 0 else None,
                            marker="." if x.size < 30 else None)
                continue
            steps, mean, low, high = combined
            spread = "min-max" if band == "minmax" else "±1 std"
            ax.plot(steps, mean, color=color, label=f"{label} (mean of {len(curves)} seeds, {spread})",
                    marker="." if steps.size < 30 else None)
            ax.fill_between(steps, low, high, color=color, alpha=0.2, linewidth=0)
        ax.set_ylabel(metric)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    axes[-1, 0].set_xlabel("environment steps")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    try:
        fig.savefig(output, dpi=120)
    except (ValueError, OSError) as e:
        raise PlotError(f"{output}: cannot write the figure ({e})") from None
    finally:
        plt.close(fig)
    return list(metrics)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse flags and write the figure; exit 2 with a one-line error on bad input."""
    config = parse(PlotConfig, PROG, argv, description=PlotConfig.__doc__)
    try:
        drawn = plot_runs(
            config.run_dirs, config.output, config.metric, config.band, config.smooth, config.title
        )
    except PlotError as e:
        fail(PROG, str(e))
    print(f"wrote {config.output} ({', '.join(drawn)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
