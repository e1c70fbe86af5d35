"""``rl-gpu plot``: learning curves from runs' ``metrics.jsonl``, one PNG, x = environment steps.

Runs named ``seed-N`` under one directory are seeds of one configuration: they are drawn as one curve, the
mean over seeds with a band (min to max, or mean ± one standard deviation) over the whole budget: a seed that
stopped early (it met its goal) holds its last value from there on, so the curve is not cut at the first seed
to stop.
Any other run is its own curve. A directory holding ``seed-*/metrics.jsonl`` (a ``train --output``) stands for
all its seeds.
"""

from __future__ import annotations

import io
import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import tyro

from rl_gpu.cli.parsing import fail, parse
from rl_gpu.core.errors import UsageError
from rl_gpu.runtime.files import atomic_write_bytes, check_output

PROG = "rl-gpu plot"
SEED_DIR = re.compile(r"seed-\d+")
EPISODE_METRICS = ("episode_return", "train_win_rate", "episode_length")
"""Metrics measured over the episodes that ended in an update: lines with ``"episodes": 0`` carry no value."""
GRID_POINTS = 500
HEADLINES = ("episode_return", "train_win_rate")
"""The training metric of single-player runs and of turn-based games (``training/goals.py``)."""
MAX_DEPTH = 8
"""Nesting levels of a metrics line searched for metric names; deeper values are not metrics."""
FORMATS = ("png", "pdf", "svg")


class PlotError(ValueError):
    """Unusable input: reported as one line, exit code 2."""


@dataclass(frozen=True)
class PlotConfig:
    """Plot learning curves (x = environment steps) from run directories written by `rl-gpu train`."""

    run_dirs: Annotated[tyro.conf.Positional[tuple[Path, ...]], tyro.conf.arg(help_behavior_hint="")]
    """run directories (OUTPUT/seed-N, or OUTPUT for all its seeds)"""
    output: Path
    """image file to write (PNG; .pdf and .svg by their suffix)"""
    metric: Annotated[tuple[str, ...], tyro.conf.arg(help_behavior_hint="")] = ()
    """metrics to plot, one panel each; nested fields with a dot (validation.score). Default: episode_return
    (single-player runs) or train_win_rate (turn-based games), and validation.score when the runs have
    validations"""
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
    """Read ``run_dir/metrics.jsonl``; lines that are not a JSON object (torn, not UTF-8, numbers too long to
    parse, nested too deeply) are counted and left out."""
    path = run_dir / "metrics.jsonl"
    records, skipped = [], 0
    try:
        data = path.read_bytes()
    except OSError as e:
        raise PlotError(f"{path}: cannot read ({e.strerror or e})") from None
    for raw in data.splitlines():
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError):
            # ValueError covers JSONDecodeError, UnicodeDecodeError and integers past Python's digit limit.
            skipped += 1
            continue
        if isinstance(record, dict):
            records.append(record)
        else:
            skipped += 1
    if not records:
        unreadable = f" ({skipped} unreadable lines)" if skipped else ""
        raise PlotError(f"{path}: no metrics recorded{unreadable}")
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
        try:
            seeds = sorted(p for p in path.iterdir()
                           if SEED_DIR.fullmatch(p.name) and (p / "metrics.jsonl").is_file())
        except OSError as e:
            raise PlotError(f"{path}: cannot list it ({e.strerror or e})") from None
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


def number(value: object) -> float | None:
    """``value`` as a finite float (booleans as 0 / 1), else None (strings, containers, inf, NaN, integers too
    large for a float)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        try:
            result = float(value)
        except OverflowError:
            return None
        return result if math.isfinite(result) else None
    return None


def lookup(record: dict, metric: str) -> float | None:
    """The finite number at ``metric`` (dots descend into nested dicts) in ``record``, else None."""
    value: object = record
    for part in metric.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return number(value)


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
    """Every metric name with a finite number somewhere in ``runs`` (nested ones dotted, at most
    :data:`MAX_DEPTH` levels deep)."""
    names: dict[str, None] = {}
    for run in runs:
        for record in run.records:
            stack: list[tuple[dict, str, int]] = [(record, "", 1)]
            while stack:
                mapping, prefix, depth = stack.pop()
                for key, item in mapping.items():
                    if isinstance(item, dict) and depth < MAX_DEPTH:
                        stack.append((item, f"{prefix}{key}.", depth + 1))
                    elif number(item) is not None:
                        names[f"{prefix}{key}"] = None
    return [n for n in names if n not in ("update", "global_step")]


def default_metrics(runs: Sequence[Run]) -> list[str]:
    """What a plot shows without ``--metric``: each run's headline (``episode_return`` for single-player runs,
    ``train_win_rate`` for turn-based games, whose runs log a win rate instead), then ``validation.score``
    when the runs have validations, ``validation.exploitability`` and ``league/elo_learner`` when logged
    (games with an exact exploitability; self-play runs), and each task's ``task/K/return`` or ``task/K/success``
    (a batch of several tasks)."""
    chosen: dict[str, None] = {}
    for run in runs:
        available = numeric_metrics([run])
        headline = next((m for m in HEADLINES if m in available), None)
        if headline is not None:
            chosen[headline] = None
    ordered = [m for m in HEADLINES if m in chosen]
    available = numeric_metrics(runs)
    extra = [m for m in ("validation.exploitability", "league/elo_learner") if m in available]
    # A batch of several tasks: each task's own curve (multitask: returns, Meta-World successes).
    tasks = sorted((m for m in available if re.fullmatch(r"task/\d+/(return|success)", m)),
                   key=lambda m: (m.rsplit("/", 1)[1], int(m.split("/")[1])))
    return ordered + (["validation.score"] if "validation.score" in available else []) + extra + tasks


def aggregate(curves: Sequence[tuple[np.ndarray, np.ndarray]], band: str) -> tuple[np.ndarray, ...]:
    """Mean and band of several runs: ``(x, mean, low, high)``.

    Each run is linearly interpolated onto a common grid of at most :data:`GRID_POINTS` steps from the largest
    first step to the largest last step (runs of one configuration log at nearly the same steps); past its own
    last step a run holds its last value (``np.interp``'s edge value), as a run that stopped on success keeps
    its policy.
    """
    start = max(x[0] for x, _ in curves)
    stop = max(x[-1] for x, _ in curves)
    steps = np.unique(np.concatenate([x[(x >= start) & (x <= stop)] for x, _ in curves]))
    if steps.size > GRID_POINTS:
        steps = np.linspace(start, stop, GRID_POINTS)
    values = np.stack([np.interp(steps, x, y) for x, y in curves])
    mean = values.mean(0)
    if band == "std":
        std = values.std(0)
        return steps, mean, mean - std, mean + std
    return steps, mean, values.min(0), values.max(0)


def image_format(output: Path) -> str:
    """The figure format named by ``output``'s suffix (no suffix: PNG); :class:`PlotError` for others."""
    fmt = output.suffix.lower().lstrip(".") or "png"
    if fmt not in FORMATS:
        raise PlotError(f"{output}: cannot tell the image format from {output.suffix!r}; use one of "
                        f"{', '.join('.' + f for f in FORMATS)}")
    return fmt


def plot_runs(
    paths: Sequence[Path],
    output: Path,
    metrics: Sequence[str] = (),
    band: str = "minmax",
    smoothing: int = 1,
    title: str | None = None,
) -> list[str]:
    """Write the learning curves of the runs named by ``paths`` to ``output``; returns the metrics drawn.

    Raises :class:`PlotError` for a missing directory, a run without metrics, metrics no run has, or an output
    that is not ours to replace (:func:`rl_gpu.runtime.files.check_output`: a run's own files included).
    Text (title, labels, run names) is drawn as given: a ``$`` is not mathtext.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotError("plotting needs matplotlib (pip install 'rl-gpu[plot]')") from None
    output = Path(output)
    run_paths = find_runs(paths)
    inputs = [p / "metrics.jsonl" for p in run_paths]
    try:
        check_output(output, inputs)
    except UsageError as e:
        raise PlotError(str(e)) from None
    fmt = image_format(output)
    runs = {path: read_metrics(path) for path in run_paths}
    available = numeric_metrics(list(runs.values()))
    metrics = list(metrics) or default_metrics(list(runs.values()))
    if not metrics:
        raise PlotError(f"the runs have no {' or '.join(HEADLINES)} or validation.score to plot; choose with "
                        f"--metric from: {', '.join(available) or 'nothing (no numbers logged)'}")
    missing = [m for m in metrics if m not in available]
    if missing:
        raise PlotError(
            f"no run has metric {', '.join(map(repr, missing))}; available: {', '.join(available)}"
        )
    groups = group_runs(list(runs))
    # Run names, metric names and the title are the user's text: "$" in them is not mathtext.
    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        fig, axes = plt.subplots(len(metrics), 1, figsize=(8, 3.2 * len(metrics)), sharex=True, squeeze=False)
        try:
            draw(fig, axes, runs, groups, metrics, band, smoothing, title)
            buffer = io.BytesIO()
            fig.savefig(buffer, format=fmt, dpi=120)
        except (ValueError, RuntimeError, OverflowError) as e:
            detail = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
            raise PlotError(f"cannot draw the figure ({detail})") from None
        finally:
            plt.close(fig)
    try:
        atomic_write_bytes(output, buffer.getvalue(), inputs)
    except UsageError as e:
        raise PlotError(str(e)) from None
    return list(metrics)


def draw(fig, axes, runs: dict[Path, Run], groups: dict[str, list[Path]], metrics: Sequence[str], band: str,
         smoothing: int, title: str | None) -> None:
    """One panel per metric, one curve per group (the mean and band of its seeds)."""
    import matplotlib.pyplot as plt

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
            if len(curves) == 1:
                for i, (x, y) in enumerate(curves):
                    ax.plot(x, y, color=color, label=label if i == 0 else None,
                            marker="." if x.size < 30 else None)
                continue
            steps, mean, low, high = aggregate(curves, band)
            spread = "min-max" if band == "minmax" else "±1 std"
            held = " (stopped seeds hold their last value)" if len({x[-1] for x, _ in curves}) > 1 else ""
            ax.plot(steps, mean, color=color, label=f"{label} (mean of {len(curves)} seeds, {spread}){held}",
                    marker="." if steps.size < 30 else None)
            ax.fill_between(steps, low, high, color=color, alpha=0.2, linewidth=0)
        ax.set_ylabel(metric)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best", fontsize="small")
    axes[-1, 0].set_xlabel("environment steps")
    if title:
        fig.suptitle(title)
    fig.tight_layout()


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
    from rl_gpu.cli.safe_path import drop_cwd_from_path

    drop_cwd_from_path()
    sys.exit(main())
