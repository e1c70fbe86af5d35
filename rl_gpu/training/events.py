"""The run's events and the callbacks that answer them: the public door into a training run.

A run emits, in this order: :class:`RunStarted` first, once per call, :class:`IterationDone` for every update (in update
order), :class:`ValidationDone` after each validation (after its update's ``IterationDone``),
:class:`CheckpointSaved` after each ``last.pt``/``best.pt`` write, and :class:`RunEnded` last, with the result.

Iteration metrics stay on the device until the run reads them (every ``--log-every`` updates, at a validation, a
checkpoint, the limit or a stop; one host transfer for all pending updates), so ``IterationDone`` events arrive in
bursts at those points, each carrying its own update's values. A callback that needs every update at once sets
``log_every=1`` (one host read per update).

A callback is a :class:`Callback` (override the hooks you need) or any function taking an event. A hook that
returns ``False`` asks the run to stop: it stops at the next update boundary, after saving ``last.pt``, with the
status ``paused`` (``--resume`` continues it exactly, and callbacks are not part of the checkpoint). An exception
raised by a callback ends the run and reaches the caller unchanged; ``last.pt`` keeps the last state it saved.
Under torchrun, rank 0's callbacks are called (a stop one asks for stops every rank at the same update).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Union

from rl_gpu.training.run_state import RunState

if TYPE_CHECKING:
    from rl_gpu.training.outcome import RunResult


@dataclass(frozen=True)
class RunStarted:
    """A seed's run begins (or continues), before anything is written or evaluated."""

    seed: int
    run_dir: Path
    state: RunState
    """A copy of the run state it starts from (``update`` > 0 and a ``baseline`` when resumed)."""
    resumed: bool


@dataclass(frozen=True)
class IterationDone:
    """One update's metrics, as its metrics.jsonl line has them (host floats and ints)."""

    seed: int
    run_dir: Path
    update: int
    global_step: int
    metrics: Mapping[str, float]
    """The algorithm's metrics (``loss``, ``learning_rate``, ...), ``episodes``, ``transitions``, ``time``,
    ``steps_per_second``, the goal's headline (``episode_return`` or ``win_rate``) when an episode ended, and
    each reward term."""


@dataclass(frozen=True)
class ValidationDone:
    """A validation of the current policy on the validation stream."""

    seed: int
    run_dir: Path
    update: int
    global_step: int
    score: float
    """The goal's score (higher is better)."""
    passed: bool
    streak: int
    best: bool
    """This validation is the best so far: best.pt now holds this policy."""
    record: Mapping[str, object]
    """The validation as metrics.jsonl has it (score, passed, streak, exploitability where measured)."""
    policy: object = None
    """The policy as it is at this validation (the run's own: act with it under ``torch.inference_mode()`` and
    without a generator of the run's, and change nothing, or the run is no longer the same)."""


@dataclass(frozen=True)
class CheckpointSaved:
    """``last.pt`` or ``best.pt`` was written (atomically: the file is whole)."""

    seed: int
    run_dir: Path
    name: str
    path: Path
    update: int


@dataclass(frozen=True)
class RunEnded:
    """A seed's run ended: its result (status, reason, summary); ``state`` is where it ended."""

    result: RunResult
    state: RunState


Event = Union[RunStarted, IterationDone, ValidationDone, CheckpointSaved, RunEnded]

_HOOKS = {RunStarted: "on_run_start", IterationDone: "on_iteration", ValidationDone: "on_validation",
          CheckpointSaved: "on_checkpoint", RunEnded: "on_run_end"}


class Callback:
    """Base class of callbacks: each hook receives its event; return ``False`` to stop the run (see the module
    docstring), anything else to go on."""

    def on_run_start(self, event: RunStarted) -> bool | None:
        return None

    def on_iteration(self, event: IterationDone) -> bool | None:
        return None

    def on_validation(self, event: ValidationDone) -> bool | None:
        return None

    def on_checkpoint(self, event: CheckpointSaved) -> bool | None:
        return None

    def on_run_end(self, event: RunEnded) -> bool | None:
        return None


CallbackLike = Union[Callback, Callable[[Event], "bool | None"]]


def check_callbacks(callbacks: Iterable[CallbackLike] | None) -> tuple[CallbackLike, ...]:
    """The callbacks as a tuple; anything that is neither a :class:`Callback` nor callable is refused."""
    out = tuple(callbacks or ())
    for c in out:
        if not isinstance(c, Callback) and not callable(c):
            raise TypeError(f"callbacks takes Callback objects or functions of one event, not {type(c).__name__}")
    return out


class Events:
    """Sends each event to every callback, in order; remembers the first stop request."""

    def __init__(self, callbacks: Iterable[CallbackLike] | None = ()) -> None:
        self.callbacks = check_callbacks(callbacks)
        self.stop_by: str | None = None
        """The callback that asked to stop (its class or function name), or None."""

    def emit(self, event: Event) -> None:
        if not self.callbacks:
            return
        hook = _HOOKS[type(event)]
        for c in self.callbacks:
            answer = getattr(c, hook)(event) if isinstance(c, Callback) else c(event)
            if answer is False and self.stop_by is None and not isinstance(event, RunEnded):
                self.stop_by = getattr(c, "__name__", None) or type(c).__name__
