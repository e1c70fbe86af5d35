"""What a run produces and reports: the exit codes of ``rl-gpu train``, the metrics that vary between identical
runs, an update's metrics on their way to metrics.jsonl, and the result of one seed's run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from torch import Tensor

from rl_gpu.training.lifecycle import FINAL_STATUSES
from rl_gpu.training.run_logger import PhaseMark

EXIT_SUCCESS, EXIT_GOAL_NOT_MET, EXIT_USAGE, EXIT_NUMERICAL = 0, 1, 2, 3
"""Exit codes of ``rl-gpu train`` (a spent step budget is a success too); an interrupted run exits 128 + the
signal number (130, 143)."""

VOLATILE_METRICS = ("time", "steps_per_second", "collect_seconds", "update_seconds", "iterate_seconds")
"""Fields of metrics.jsonl that measure wall time and so differ between otherwise identical runs."""

COUNTS = ("episodes", "transitions")
"""Metrics logged as integers."""


class PendingUpdate(NamedTuple):
    """An update whose metrics are still on the device."""

    update: int
    train_seconds: float
    phases: list[PhaseMark]
    values: Tensor
    """``[len(algorithm.metric_names)]``: the iteration's metrics, stacked in one tensor."""


class MetricsLine(NamedTuple):
    """One update's ``metrics.jsonl`` line, as :meth:`RunLogger.log_update` takes it."""

    update: int
    global_step: int
    record: dict
    phases: list[PhaseMark]
    finite: bool


@dataclass
class RunResult:
    """Outcome of one seed's run. ``status`` is ``success``, ``goal_not_met``, ``budget_spent`` (the three
    final ones: a summary.json is written), ``numerical_error``, ``paused`` or ``interrupted`` (then ``signum``
    is the signal that stopped it)."""

    seed: int
    run_dir: Path
    status: str
    reason: str
    summary: dict
    signum: int | None = None

    @property
    def success(self) -> bool:
        return self.status == "success"

    @property
    def finished(self) -> bool:
        return self.status in FINAL_STATUSES


def report_result(result: RunResult, log: Callable[[str], None]) -> RunResult:
    """Log the one line that ends a seed's run (its status, why, and where its files are); returns ``result``."""
    labels = {"success": "SUCCESS", "goal_not_met": "FAILED", "budget_spent": "BUDGET SPENT",
              "numerical_error": "NUMERICAL ERROR", "interrupted": "INTERRUPTED", "paused": "PAUSED"}
    log(f"[seed {result.seed}] {labels[result.status]}: {result.reason}. Files in {result.run_dir}/")
    return result
