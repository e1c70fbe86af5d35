"""The run's limit: ``--max-updates`` updates and, when given, a ``--total-timesteps`` step budget (whichever
comes first), and what a run that stops at it (or meets its goal first) reports."""

from __future__ import annotations

from rl_gpu.training.config import TrainConfig
from rl_gpu.training.goals import SelfPlayLeague
from rl_gpu.training.run_state import RunState


class Budget:
    """When a run has done enough, and the ``(status, reason)`` it then ends with.

    Args:
        config: the run's configuration (its ``max_updates``, ``total_timesteps``, ``min_updates``).
        goal: the run's goal (a self-play league has none to meet: its updates are the budget).
        step_bound: transitions one update takes at most, all processes together (turn-based games pad finished
            games, so an update can take fewer): with a step budget, the metrics are read at the first update
            that can spend it, so the budget is found spent at the exact update without reading every update.
    """

    def __init__(self, config: TrainConfig, goal, step_bound: int) -> None:
        self.config = config
        self.goal = goal
        self.step_bound = step_bound
        self.next_read = 0

    @property
    def steps(self) -> int | None:
        return self.config.total_timesteps

    def reached(self, state: RunState) -> bool:
        """``max_updates`` updates are done or the step budget is spent (both count when both are given)."""
        spent = self.steps is not None and state.global_step >= self.steps
        return spent or state.update >= self.config.max_updates

    def plan_read(self, state: RunState) -> None:
        """With a step budget: the update from which the steps left can be spent (read there)."""
        if self.steps:
            self.next_read = state.update + -(-(self.steps - state.global_step) // self.step_bound)

    def may_be_reached(self, state: RunState) -> bool:
        """The limit may be reached by now: the metrics must be read to tell."""
        return state.update >= self.config.max_updates or (self.steps is not None and state.update >= self.next_read)

    def limit_status(self, state: RunState) -> tuple[str, str]:
        cfg = self.config
        best = f"best validation {state.best_score:.4f} at update {state.best_update}"
        if cfg.total_timesteps is not None:
            if state.global_step < cfg.total_timesteps:  # the updates ran out first: a goal not met, if any
                where = f"(step {state.global_step:,} of the --total-timesteps {cfg.total_timesteps:,})"
                if self.goal.can_pass:
                    return "goal_not_met", f"goal not met within --max-updates {cfg.max_updates} {where}: {best}"
                return "budget_spent", f"trained the --max-updates {cfg.max_updates} updates {where}; {best}"
            return "budget_spent", (f"spent the budget of {cfg.total_timesteps:,} steps at update {state.update} "
                                    f"(step {state.global_step:,}); {best}")
        if isinstance(self.goal, SelfPlayLeague):  # no goal to meet: the updates are the budget
            return "budget_spent", f"trained the --max-updates {cfg.max_updates} updates; {best}"
        return "goal_not_met", f"goal not met within --max-updates {cfg.max_updates}: {best}"

    def success_status(self, state: RunState) -> tuple[str, str]:
        return "success", (f"validation passed {state.streak} times in a row at update {state.update} "
                           f"(>= {self.config.min_updates} updates)")
