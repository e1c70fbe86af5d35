"""What ``rl-gpu tune``'s trials share, one at a time or as one population: the pruning callback, the score of a
finished trial, the stop that ends a sweep, and the study's heartbeat timing."""

from __future__ import annotations

from rl_gpu.training.events import Callback, ValidationDone

HEARTBEAT_SECONDS, GRACE_SECONDS = 20, 60
"""A running trial records a heartbeat this often; one whose heartbeat is older than the grace is failed."""


class Pruning(Callback):
    """Reports each validation to the trial; asks the run to stop (pause) when the pruner says so."""

    def __init__(self, trial) -> None:
        self.trial = trial
        self.last: tuple[float, int] | None = None
        self.pruned_at: int | None = None

    def on_validation(self, event: ValidationDone) -> bool | None:
        self.last = (event.score, event.global_step)
        self.trial.report(event.score, event.global_step)
        if self.trial.should_prune():
            self.pruned_at = event.global_step
            return False
        return None


class SweepInterrupted(Exception):
    """A stop signal ended a trial: the sweep stops too (the same command continues it)."""


def trial_score(summary: dict) -> float:
    """The final evaluation's headline of a finished trial's summary: best.pt's mean return (or win rate)."""
    best = summary.get("final_evaluation", {}).get("best", {})
    for key in ("mean_return", "win_rate"):
        if isinstance(best.get(key), (int, float)):
            return float(best[key])
    return float("nan")
