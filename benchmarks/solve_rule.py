"""The rule that ends a time-to-solve benchmark run (time_to_solve.py, offpolicy.py, recurrent_side_by_side.py), for
both sides: rl_gpu's loop (:func:`train_until_solved`) and SB3's callback (:func:`solve_callback`) evaluate at the
first iteration boundary at or after every ``eval_every`` environment steps and stop at the first mean return at or
above the threshold."""

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


def train_until_solved(iterate: Callable[[], int], evaluate: Callable[[int], float], eval_every: int, budget: int,
                       threshold: float) -> dict:
    """rl_gpu's side: ``iterate()`` (one training iteration, returning the environment steps it took) until
    ``budget`` steps or a solve; ``evaluate(k)`` is the k-th evaluation's mean return. Returns ``solved``,
    ``env_steps``, ``train_seconds`` (evaluations included), ``eval_seconds`` and ``evaluations``."""
    steps, next_eval, history, eval_seconds, solved_at = 0, eval_every, [], 0.0, None
    start = time.perf_counter()
    while steps < budget:
        steps += iterate()
        if steps >= next_eval:
            t = time.perf_counter()
            mean = float(evaluate(len(history)))
            eval_seconds += time.perf_counter() - t
            history.append((steps, mean))
            while next_eval <= steps:
                next_eval += eval_every
            if mean >= threshold:
                solved_at = steps
                break
    return {"solved": solved_at is not None, "env_steps": solved_at or steps,
            "train_seconds": time.perf_counter() - start, "eval_seconds": eval_seconds, "evaluations": history}
