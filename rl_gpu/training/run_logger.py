"""What a training run reports as it goes: ``metrics.jsonl``, TensorBoard events and a progress view.

:class:`RunLogger` is the one object the trainer hands its numbers to. Per update it appends one JSON line to
``RUN_DIR/metrics.jsonl`` (the run's record, read by ``rl-gpu plot``), adds the same scalars to TensorBoard
event files under ``RUN_DIR/tb`` (x = environment steps) when ``tensorboard`` is installed, and updates the
progress view: a live ``rich`` display on a terminal, plain lines otherwise.

A crash loses at most the line being written: each line goes out with one ``os.write`` on a file opened for
appending (no user-space buffer to lose). That write is not atomic against SIGKILL or a power loss (Linux
stops a write at a page boundary when a fatal signal is pending), so the last line of a crashed run may be torn;
it is cut off when the file is opened again (``--resume``), and ``rl-gpu plot`` skips it.
"""

from __future__ import annotations

import collections
import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TextIO

import torch

DISPLAYS = ("auto", "live", "plain", "off")
SHORT_NAMES = {"episode_return": "return", "train_win_rate": "win", "episode_length": "length"}
EPISODE_METRICS = ("episode_return", "train_win_rate", "episode_length")
"""Scalars measured over the episodes that ended in an update: left out of recent means when none ended."""
RECENT = 10
"""Updates averaged for the progress view's recent returns, win rate and steps per second."""

_tensorboard_notice_shown = False


def _tensorboard_writer(log_dir: Path):
    """A ``SummaryWriter`` on ``log_dir``, or None (with a notice, once per process) without tensorboard."""
    global _tensorboard_notice_shown
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        if not _tensorboard_notice_shown:
            print("note: tensorboard is not installed; TensorBoard logs are skipped "
                  "(pip install 'rl-gpu[tensorboard]')", file=sys.stderr)
            _tensorboard_notice_shown = True
        return None
    return SummaryWriter(log_dir=str(log_dir), flush_secs=10)


def _number(value: Any) -> float | None:
    """``value`` as a float for TensorBoard, or None when it is not a finite number."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return _number(value.item())
    return None


def _plain(value: Any) -> Any:
    """JSON-able form of a value: one-element tensors and numpy scalars become Python numbers."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        return value.item()
    return value


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class PhaseMark(NamedTuple):
    """A timed block: its start and end as ``time.perf_counter()`` values, or as recorded CUDA events."""

    name: str
    start: float | torch.cuda.Event
    end: float | torch.cuda.Event


def _phase_seconds(marks: Sequence[PhaseMark]) -> dict[str, float]:
    """Seconds per phase name (CUDA events are waited for: by then the device has usually passed them)."""
    seconds: dict[str, float] = collections.defaultdict(float)
    for mark in marks:
        if isinstance(mark.end, float):
            seconds[mark.name] += mark.end - mark.start
        else:
            mark.end.synchronize()
            seconds[mark.name] += mark.start.elapsed_time(mark.end) / 1000.0
    return dict(seconds)


class JsonLines:
    """Append-only JSON lines, one ``os.write`` each; a torn last line (left by a crash) is cut on open."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        self._cut_torn_tail()

    def _cut_torn_tail(self) -> None:
        """Truncate the file after its last newline (reading backwards from the end, one block at a time)."""
        end = os.fstat(self._fd).st_size
        if end == 0 or os.pread(self._fd, 1, end - 1) == b"\n":
            return
        position = end
        while position > 0:
            start = max(0, position - 65536)
            cut = os.pread(self._fd, position - start, start).rfind(b"\n")
            if cut >= 0:
                os.ftruncate(self._fd, start + cut + 1)
                return
            position = start
        os.ftruncate(self._fd, 0)

    def write(self, record: Mapping[str, Any]) -> None:
        """Append ``record`` as one line."""
        data = (json.dumps(record) + "\n").encode()
        while data:
            written = os.write(self._fd, data)
            data = data[written:]

    def close(self) -> None:
        """fsync and close (idempotent)."""
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None


class RunLogger:
    """Metrics of one run: JSON lines, TensorBoard and a progress view. Use as a context manager or call
    :meth:`close`.

    Per update a trainer calls, in this order::

        metrics = algo.iterate(phase=logger.phase)      # times "collect" and "update" (or "iterate")
        logger.log_validation(update, global_step, {"score": ..., ...})   # only on validation updates
        logger.log_update(update, global_step, {"episode_return": ..., "loss": ..., ...})

    :class:`rl_gpu.training.runner.Trainer` defers the last two: it keeps each update's metrics on the device with its
    phases (:meth:`take_phases`) and, once per log interval, reads them all back at once and calls
    ``log_update(..., phases=)`` for each update in turn.

    Args:
        run_dir: the run directory; ``metrics.jsonl`` and ``tb/`` go there.
        total_updates: the update budget, for the progress bar and the ETA (None: no bar, no ETA).
        total_steps: a budget in environment steps instead (``--total-timesteps``): the bar and the ETA then
            follow the steps, since the number of updates it takes is not known in advance (an update of a
            turn-based game counts only its live transitions, fewer than its N x T slots).
        label: prefix of plain lines and title of the live view, e.g. ``"seed 11"``.
        headline: scalars shown as recent means in the progress view (``episode_return``: "return",
            ``train_win_rate``: "win"); absent ones are skipped.
        log_every: plain mode prints a line every this many updates (and for the first).
        display: ``"auto"`` (live view when ``stream`` is a terminal, plain lines otherwise), ``"live"``,
            ``"plain"`` or ``"off"``.
        quiet: plain lines even on a terminal (``display="auto"`` only).
        tensorboard: write TensorBoard events (skipped, with a one-time notice, without ``tensorboard``).
        stream: where the progress view goes (default ``sys.stdout``).
        device: the training device; on CUDA phases are timed with CUDA events (no synchronisation), read
            when their update's line is written.
        start_update, start_step: where a resumed run starts (rates, ETA and the bar count from there;
            ``metrics.jsonl`` is appended to).
        start_time: the ``time`` a resumed run's lines continue from, when the caller gives each line's ``time``
            (the trainer's training seconds): rates and the ETA are measured on that clock, which is right
            however many updates are read back and logged at once.
    """

    def __init__(
        self,
        run_dir: str | Path,
        *,
        total_updates: int | None = None,
        total_steps: int | None = None,
        label: str = "",
        headline: Sequence[str] = ("episode_return", "train_win_rate"),
        log_every: int = 1,
        display: str = "auto",
        quiet: bool = False,
        tensorboard: bool = True,
        stream: TextIO | None = None,
        device: str | torch.device | None = None,
        start_update: int = 0,
        start_step: int = 0,
        start_time: float = 0.0,
    ) -> None:
        if display not in DISPLAYS:
            raise ValueError(f"display must be one of {DISPLAYS}, got {display!r}")
        if isinstance(log_every, bool) or not isinstance(log_every, int) or log_every <= 0:
            raise ValueError(f"log_every must be a positive int, got {log_every!r}")
        if total_updates is not None and total_steps is not None:
            raise ValueError("give total_updates or total_steps, not both")
        self.run_dir = Path(run_dir)
        self.total_updates = total_updates
        self.total_steps = total_steps
        self.label = label
        self.headline = tuple(headline)
        self.log_every = log_every
        self.stream = stream if stream is not None else sys.stdout
        self.device = torch.device(device) if device is not None else None
        self.metrics = JsonLines(self.run_dir / "metrics.jsonl")
        self.writer = _tensorboard_writer(self.run_dir / "tb") if tensorboard else None
        self.started = time.perf_counter()
        self._phase_marks: list[PhaseMark] = []
        self._phase_totals: dict[str, float] = collections.defaultdict(float)
        self._marks: collections.deque[tuple[float, int, int]] = collections.deque(maxlen=RECENT + 1)
        self._marks.append((start_time, start_update, start_step))
        self._start_step = start_step
        self._recent: dict[str, collections.deque[float]] = {
            key: collections.deque(maxlen=RECENT) for key in headline
        }
        self._pending: dict | None = None
        self._last_update = start_update
        self._validation: str = ""
        self._closed = False
        if display == "auto":
            is_tty = bool(getattr(self.stream, "isatty", lambda: False)())
            display = "live" if is_tty and not quiet else "plain"
        self.display = display
        self._progress = self._task = None
        if display == "live":
            self._start_live()

    def _start_live(self) -> None:
        try:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.text import Text
        except ImportError:
            self.display = "plain"
            return

        class TrainProgress(Progress):
            """The bar, then one line of run statistics under it."""

            stats = Text("")

            def get_renderables(self):
                yield self.make_tasks_table(self.tasks)
                yield self.stats

        console = Console(file=self.stream, force_terminal=True)
        self._progress = TrainProgress(
            TextColumn("[bold]{task.description}"), BarColumn(bar_width=30), MofNCompleteColumn(),
            TextColumn(("steps" if self.total_steps else "updates") + ", elapsed"), TimeElapsedColumn(),
            TextColumn("budget ETA"), TimeRemainingColumn(), console=console, refresh_per_second=4,
        )
        self._progress.start()
        self._task = self._progress.add_task(self.label or "train", total=self.total_steps or self.total_updates,
                                             completed=self._start_step if self.total_steps else self._last_update)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a block (``"collect"``: environment steps and inference; ``"update"``: the learning step).

        The phases timed since the previous :meth:`log_update` (or :meth:`take_phases`) go into its line as
        ``<name>_seconds``, and the progress view shows their split. On CUDA the block is bracketed by CUDA
        events, so timing it never waits for the device.
        """
        cuda = self.device is not None and self.device.type == "cuda"
        start: float | torch.cuda.Event
        if cuda:
            start = torch.cuda.Event(enable_timing=True)
            start.record()
        else:
            start = time.perf_counter()
        try:
            yield
        finally:
            if cuda:
                end: float | torch.cuda.Event = torch.cuda.Event(enable_timing=True)
                end.record()
            else:
                end = time.perf_counter()
            self._phase_marks.append(PhaseMark(name, start, end))

    def take_phases(self) -> list[PhaseMark]:
        """The phases timed since the last call (or :meth:`log_update`), for a later ``log_update(phases=)``:
        a trainer that reads its metrics once per log interval keeps each update's phases with its metrics."""
        marks, self._phase_marks = self._phase_marks, []
        return marks

    def log_validation(self, update: int, global_step: int, result: Mapping[str, Any]) -> None:
        """Record a validation (``result`` such as ``{"score": 0.61, "passed": True, "streak": 1}``).

        Called before :meth:`log_update` of the same update, it becomes that update's ``"validation"`` entry
        (one line per update); otherwise (e.g. the initial policy's, at update 0) it gets a line of its own.
        Numbers go to TensorBoard as ``validation/<key>``.
        """
        result = _plain(dict(result))
        if self.writer is not None:
            for key, value in result.items():
                number = _number(value)
                if number is not None:
                    self.writer.add_scalar(f"validation/{key}", number, global_step)
        score = _number(result.get("score"))
        if score is not None:
            self._validation = f"validation {score:.4g} @ {update}"
        self._write_pending()
        line = {"update": update, "global_step": global_step, "time": time.perf_counter() - self.started,
                "validation": result}
        if update > self._last_update:
            self._pending = line
        else:
            self._write(line)

    def log_update(
        self, update: int, global_step: int, scalars: Mapping[str, Any], phases: Sequence[PhaseMark] | None = None
    ) -> dict:
        """Write update ``update``'s line (``update``, ``global_step``, ``time``, the ``scalars``, the phase
        times, ``steps_per_second`` and a pending validation) and refresh the progress view; returns the line.

        ``phases``: this update's phases (from :meth:`take_phases`); default: those timed since the last line.
        Keys given in ``scalars`` win over the ones the logger computes (``time``, ``steps_per_second``).
        """
        record: dict[str, Any] = {"update": update, "global_step": global_step}
        now = float(scalars.get("time", time.perf_counter() - self.started))
        record["time"] = now
        prev_time, _, prev_step = self._marks[-1]
        record["steps_per_second"] = (global_step - prev_step) / max(now - prev_time, 1e-9)
        for name, seconds in _phase_seconds(self.take_phases() if phases is None else phases).items():
            record[f"{name}_seconds"] = seconds
            self._phase_totals[name] += seconds
        record.update(_plain(dict(scalars)))
        if self._pending is not None and self._pending["update"] == update:
            record["validation"] = self._pending["validation"]
            self._pending = None
        elif self._pending is not None and self._pending["update"] < update:
            self._write_pending()
        self._write(record)
        self._last_update = max(self._last_update, update)
        self._marks.append((now, update, global_step))
        if self.writer is not None:
            for key, value in record.items():
                number = _number(value)
                if key in ("update", "global_step") or number is None:
                    continue
                timing = key in ("time", "steps_per_second") or key.endswith("_seconds")
                group = "time" if timing else "train"
                self.writer.add_scalar(f"{group}/{key}", number, global_step)
        episodes_ended = record.get("episodes") != 0
        for key in self.headline:
            number = _number(record.get(key))
            if number is not None and (episodes_ended or key not in EPISODE_METRICS):
                self._recent[key].append(number)
        self._show(record)
        return record

    def log_update_again(self, line: Mapping[str, Any]) -> None:
        """Write again a line an earlier process wrote (a resumed run's held-back update), as it was, with a
        pending validation of that update merged in."""
        scalars = {k: v for k, v in line.items() if k not in ("update", "global_step", "validation")}
        self.log_update(int(line["update"]), int(line["global_step"]), scalars, phases=[])

    def print(self, message: str) -> None:
        """Print a line above the live view (or plainly), so trainer messages and the display do not clash."""
        if self.display == "off":
            return
        if self._progress is not None:
            self._progress.console.print(message, markup=False, highlight=False)
        else:
            print(message, file=self.stream, flush=True)

    def _write(self, record: Mapping[str, Any]) -> None:
        self.metrics.write(record)

    def _write_pending(self) -> None:
        """A pending validation that no update line will take gets a line of its own."""
        if self._pending is not None:
            self._write(self._pending)
            self._pending = None

    def _summary(self, record: Mapping[str, Any]) -> dict[str, str]:
        first_time, first_update, first_step = self._marks[0]
        last_time, last_update, last_step = self._marks[-1]
        rate = (last_step - first_step) / max(last_time - first_time, 1e-9)
        total = sum(self._phase_totals.values())
        split = ""
        if total > 0:
            split = " ".join(f"{name} {100 * seconds / total:.0f}%"
                             for name, seconds in self._phase_totals.items())
        headline = []
        for key in self.headline:
            if self._recent[key]:
                mean = sum(self._recent[key]) / len(self._recent[key])
                headline.append(f"{SHORT_NAMES.get(key, key)} {mean:.4g}")
        if self._validation:
            headline.append(self._validation)
        eta = ""
        if self.total_steps and last_step > first_step:
            eta = _duration(max(self.total_steps - last_step, 0) / rate)
        elif self.total_updates and last_update > first_update:
            per_update = (last_time - first_time) / (last_update - first_update)
            eta = _duration(per_update * max(self.total_updates - last_update, 0))
        return {"rate": f"{rate:,.0f} steps/s", "split": split, "headline": "  ".join(headline), "eta": eta}

    def _show(self, record: Mapping[str, Any]) -> None:
        if self.display == "off":
            return
        summary = self._summary(record)
        update = int(record["update"])
        if self._progress is not None:
            from rich.text import Text

            line = "  ".join(summary[k] for k in ("rate", "split", "headline") if summary[k])
            self._progress.stats = Text("  " + line, overflow="ellipsis", no_wrap=True)
            self._progress.update(self._task, completed=int(record["global_step"]) if self.total_steps else update)
            return
        if update % self.log_every and update != 1:
            return
        total = f"/{self.total_updates}" if self.total_updates else ""
        steps = f"steps {int(record['global_step']):>11,}" + (f"/{self.total_steps:,}" if self.total_steps else "")
        parts = [f"update {update:5d}{total}", steps, summary["rate"]]
        if summary["split"]:
            parts.append(summary["split"])
        if summary["headline"]:
            parts.append(summary["headline"])
        losses = [f"{name} {record[key]:.4g}"
                  for key, name in (("loss", "loss"), ("entropy", "entropy"), ("approx_kl", "kl"))
                  if _number(record.get(key)) is not None]
        if losses:
            parts.append(" ".join(losses))
        if summary["eta"]:
            # Time to spend the whole budget at the current rate: a run that meets its goal ends sooner.
            parts.append(f"budget ETA {summary['eta']}")
        prefix = f"[{self.label}] " if self.label else ""
        print(prefix + "  ".join(parts), file=self.stream, flush=True)

    def close(self) -> None:
        """Write a pending validation, stop the live view, close TensorBoard and fsync ``metrics.jsonl``."""
        if self._closed:
            return
        self._closed = True
        self._write_pending()
        if self._progress is not None:
            self._progress.stop()
        if self.writer is not None:
            self.writer.close()
        self.metrics.close()

    def __enter__(self) -> RunLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
