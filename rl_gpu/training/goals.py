"""What counts as success for a run: goal objects the runner asks, instead of branching on the kind of task.

A goal scores a validation (:class:`~rl_gpu.training.evaluation.EvalResult`), says whether it passes against the
run's baseline (the initial policy's validation), and names the training statistic shown as the run's headline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from rl_gpu.core.errors import UsageError
from rl_gpu.core.types import Actor, EnvSpec
from rl_gpu.training.evaluation import EvalResult, improvement_z


class Goal(Protocol):
    headline: str
    can_pass: bool
    """Name of the training statistic shown in progress lines and logged per update."""
    source: str
    """The algorithm's collection metric the headline is read from (``episode_return`` or ``win_rate``)."""
    multi_player: bool
    """Results are described per seat, with win rates."""

    def score(self, result: EvalResult) -> float:
        """The number best.pt is chosen by (higher is better)."""

    def passes(self, result: EvalResult, baseline: EvalResult) -> tuple[bool, str]:
        """Whether a validation counts towards success, and a short explanation."""

    def describe(self, result: EvalResult) -> str:
        """One line for the log."""


@dataclass(frozen=True)
class BestReturn:
    """Single-player tasks trained for a step budget without a threshold: no validation passes (the budget
    ends the run); best.pt is the validation with the highest mean return."""

    headline: str = "episode_return"
    source: str = "episode_return"
    multi_player: bool = False
    can_pass: bool = False
    """Whether a validation can pass (else only the run's limit ends it, and no streak is shown)."""

    def score(self, result: EvalResult) -> float:
        return result.mean_return

    def passes(self, result: EvalResult, baseline: EvalResult) -> tuple[bool, str]:
        return False, "no --solve-threshold: training until the budget is spent"

    def describe(self, result: EvalResult) -> str:
        success = f", {result.success_line()}" if result.successes is not None else ""
        return f"mean return {result.mean_return:.2f} ± {result.return_ci:.2f}{success}"


@dataclass(frozen=True)
class ReturnThreshold(BestReturn):
    """Single-player tasks: a validation passes when the mean episode return reaches ``threshold``."""

    threshold: float = 0.0
    can_pass: bool = True

    def passes(self, result: EvalResult, baseline: EvalResult) -> tuple[bool, str]:
        return result.mean_return >= self.threshold, f"need mean return >= {self.threshold:g}"


@dataclass(frozen=True)
class WinRateVsBaseline:
    """Turn-based games: a validation passes when the learner's win rate against the opponents beats the
    baseline's (the initial policy, same protocol, same seeds) by ``success_z`` standard errors.

    ``opponents`` is who the learner plays: empty means the environment's default opponent (uniform random over
    legal moves); a league passes its members here, and the win rate is over games against all of them.
    """

    success_z: float
    opponents: Sequence[Actor] = field(default_factory=tuple)
    headline: str = "train_win_rate"
    source: str = "win_rate"
    multi_player: bool = True
    can_pass: bool = True

    def score(self, result: EvalResult) -> float:
        return result.win_rate

    def passes(self, result: EvalResult, baseline: EvalResult) -> tuple[bool, str]:
        z = improvement_z(result.win_rate, result.episodes, baseline.win_rate, baseline.episodes)
        return z >= self.success_z, f"z={z:+.1f} vs initial (need {self.success_z:+.1f})"

    def describe(self, result: EvalResult) -> str:
        return f"win rate {result.win_rate:.4f} [{result.ci_low:.4f}, {result.ci_high:.4f}]"


@dataclass(frozen=True)
class SelfPlayLeague(WinRateVsBaseline):
    """Self-play, against a league (:mod:`rl_gpu.training.league`) or full width (NeuRD): beating the
    uniform-random player is no measure of progress (its best response is itself exploitable), so no validation
    passes and the run trains
    until its limit; validations still report the win rate against uniform random. Where the game has an exact
    exploitability the runner scores validations by it instead (lower is better)."""

    can_pass: bool = False

    def passes(self, result: EvalResult, baseline: EvalResult) -> tuple[bool, str]:
        return False, "self-play: training until the limit"


def goal_for(spec: EnvSpec, env_id: str, solve_threshold: float | None, success_z: float,
             budget: bool = False, self_play_by: str | None = None, seat_world: bool = False) -> Goal:
    """The goal of a task: a win rate against the baseline for several players, else a return threshold.

    A single-player task needs ``solve_threshold`` unless the run has a step budget (``budget``): then success
    is optional and, without a threshold, only the budget ends the run. ``self_play_by``, the setting that makes
    the run self-play (two-player games only, else a :class:`UsageError` naming it): :class:`SelfPlayLeague`.
    ``seat_world``: a game's seats as agents (:mod:`rl_gpu.envs.seat_agents`), whose learner plays every seat: self-play
    too, with the episodes' mean length as the training headline (each game's returns over its seats sum to 0).
    """
    if seat_world:
        return SelfPlayLeague(success_z, headline="episode_length", source="episode_length")
    if self_play_by is not None:
        if spec.num_players != 2:
            raise UsageError(f"{self_play_by} needs a two-player game; {env_id} has {spec.num_players} "
                             f"player{'s' if spec.num_players != 1 else ''}")
        return SelfPlayLeague(success_z)
    if spec.num_players > 1:
        return WinRateVsBaseline(success_z)
    if solve_threshold is None:
        if budget:
            return BestReturn()
        raise UsageError(f"{env_id} is a single-player task: give --solve-threshold (the mean validation return "
                         "that counts as solved), or a step budget with --total-timesteps")
    return ReturnThreshold(threshold=solve_threshold)
