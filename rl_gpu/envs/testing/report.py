"""What a check hands back: :class:`CheckReport` when it passes, :class:`EnvCheckError` at the first
violation.

The error is an ``AssertionError`` so that a failing check reads as a test failure in pytest, and it carries
the check, field, env row, step, and expected and actual values as attributes so a test can assert on *which*
violation was found, not only that one was.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["CheckReport", "EnvCheckError", "ParityError"]


class EnvCheckError(AssertionError):
    """A check found an environment breaking its contract.

    Attributes:
        check: the check that failed, e.g. ``"check_autoreset"``.
        field: what differed, e.g. ``"reward"``, ``"final_obs"``, ``"state.chamber"``.
        row: the env row (None when the failure is not about one row).
        step: the batched step, counted from 1 (0 = before the first step).
        expected: the expected value in that row.
        got: the actual value in that row.
    """

    def __init__(
        self,
        check: str,
        message: str,
        *,
        field: str | None = None,
        row: int | None = None,
        step: int | None = None,
        expected: Any = None,
        got: Any = None,
        context: str = "",
    ) -> None:
        where = []
        if row is not None:
            where.append(f"env row {row}")
        if step is not None:
            where.append(f"step {step}")
        text = f"[{check}] {message}"
        if where:
            text += f" ({', '.join(where)})"
        if field is not None and (expected is not None or got is not None):
            text += f"\n  expected: {expected}\n  got:      {got}"
        if context:
            text += f"\n  {context}"
        super().__init__(text)
        self.check = check
        self.field = field
        self.row = row
        self.step = step
        self.expected = expected
        self.got = got


class ParityError(EnvCheckError):
    """The tensor environment and the scalar reference disagree (raised by
    :func:`~rl_gpu.envs.testing.check_reference_parity`)."""


@dataclass(frozen=True)
class CheckReport:
    """What a passing check covered, so a test can assert that it covered enough.

    Attributes:
        check: the check's name.
        steps: batched steps taken.
        transitions: row transitions compared (rows that were not frozen).
        episodes: episodes that finished (terminated or truncated) during the check.
        details: check-specific counts, e.g. ``{"illegal_rejected": 120}``.
    """

    check: str
    steps: int
    transitions: int
    episodes: int
    details: dict[str, int] = field(default_factory=dict)
