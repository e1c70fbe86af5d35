"""The SB3 side of the time-to-solve benchmarks (time_to_solve.py, offpolicy.py, recurrent_side_by_side.py): one
evaluation callback, so that every comparison stops SB3 by the same rule."""

from __future__ import annotations

import time
from collections.abc import Callable


def solve_callback(evaluate: Callable, eval_every: int, threshold: float, *, per_step: bool = False):
    """An SB3 callback: at the first rollout end (``per_step``: environment step) at or after every ``eval_every``
    steps, ``evaluate(model)`` (a mean return) joins ``history`` as ``(steps, mean)``; the first mean at or above
    ``threshold`` sets ``solved_at`` and stops training. ``eval_seconds`` is the evaluations' time."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Solve(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next_eval, self.history, self.solved_at, self.eval_seconds = eval_every, [], None, 0.0

        def _check(self) -> None:
            if self.solved_at is not None or self.num_timesteps < self.next_eval:
                return
            start = time.perf_counter()
            mean = float(evaluate(self.model))
            self.eval_seconds += time.perf_counter() - start
            self.history.append((self.num_timesteps, mean))
            while self.next_eval <= self.num_timesteps:
                self.next_eval += eval_every
            if mean >= threshold:
                self.solved_at = self.num_timesteps

        def _on_step(self) -> bool:
            if per_step:
                self._check()
            return self.solved_at is None

        def _on_rollout_end(self) -> None:
            if not per_step:
                self._check()

    return Solve()
