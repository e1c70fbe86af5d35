"""Row-wise comparisons that raise at the first mismatching env row, and the invariants every step result
keeps.

Every check reduces to "these ``[N, ...]`` tensors agree in these rows". :func:`compare` does that for one
tensor and names the first row that differs (floats with ``|got - expected| <= atol + rtol * |expected|``, NaN
equal to NaN; integers and bools exactly); :func:`compare_tree` walks a NamedTuple such as an
:class:`~rl_gpu.envs.base.EnvState`. Values are read back to the host: this is test code, not a hot loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from rl_gpu.envs.base import EnvState, StepResult, TensorEnv
from rl_gpu.envs.testing.report import EnvCheckError

__all__ = [
    "AFTER_RESET_FIELDS",
    "check_result",
    "compare",
    "compare_restarted",
    "compare_results",
    "compare_tree",
]

AFTER_RESET_FIELDS = ("obs", "action_mask", "current_player", "critic_obs")
"""The :class:`StepResult` fields that describe the state the next action is chosen in: after an auto-reset
they belong to the fresh start, the other fields to the finished transition."""


def compare(
    check: str,
    name: str,
    got: Tensor,
    expected: Tensor,
    *,
    step: int,
    rows: Tensor | None = None,
    atol: float = 0.0,
    rtol: float = 0.0,
    error: type[EnvCheckError] = EnvCheckError,
    context: Callable[[int], str] | None = None,
) -> None:
    """Raise ``error`` at the first row where ``got`` differs from ``expected``, looking only at ``rows``
    (``[N]`` bool) when given; ``context(row)`` adds a line describing that row to the message. Two ``None``
    agree (an optional field, such as ``critic_obs``, that neither side has)."""
    if got is None and expected is None:
        return
    got = torch.as_tensor(got).detach().cpu()
    expected = torch.as_tensor(expected).detach().cpu()
    if got.shape != expected.shape:
        raise error(
            check,
            f"{name} has the wrong shape",
            field=name,
            step=step,
            expected=tuple(expected.shape),
            got=tuple(got.shape),
        )
    if got.is_floating_point() or expected.is_floating_point():
        g, e = got.double(), expected.double()
        bad = ~torch.isclose(g, e, atol=atol, rtol=rtol, equal_nan=True)
    else:
        bad = got != expected
    if bad.dim() > 1:
        bad = bad.flatten(1).any(1)
    elif bad.dim() == 0:
        bad = bad.reshape(1)
    if rows is not None:
        bad = bad & rows.detach().cpu()
    if bool(bad.any()):
        row = int(bad.long().argmax())
        raise error(
            check,
            f"{name} mismatch",
            field=name,
            row=row,
            step=step,
            expected=expected[row].tolist() if expected.dim() else expected.item(),
            got=got[row].tolist() if got.dim() else got.item(),
            context=context(row) if context is not None else "",
        )


def compare_tree(
    check: str, name: str, got: tuple, expected: tuple, *, step: int, rows: Tensor | None = None, **tol: Any
) -> None:
    """:func:`compare` every tensor of two equally nested (Named)tuples, naming fields ``name.field``."""
    names = getattr(expected, "_fields", [str(i) for i in range(len(expected))])
    if len(got) != len(expected):
        raise EnvCheckError(check, f"{name} has {len(got)} fields, expected {len(expected)}", step=step)
    for field_name, g, e in zip(names, got, expected):
        if isinstance(e, Tensor) or e is None:
            compare(check, f"{name}.{field_name}", g, e, step=step, rows=rows, **tol)
        else:
            compare_tree(check, f"{name}.{field_name}", g, e, step=step, rows=rows, **tol)


def compare_results(
    check: str,
    got: StepResult,
    expected: StepResult,
    *,
    step: int,
    after_reset_rows: Tensor | None = None,
    label: str = "",
    **tol: Any,
) -> None:
    """Compare every field; the :data:`AFTER_RESET_FIELDS` only in ``after_reset_rows``."""
    for name in StepResult._fields:
        rows = after_reset_rows if name in AFTER_RESET_FIELDS else None
        compare(check, label + name, getattr(got, name), getattr(expected, name), step=step, rows=rows, **tol)


def compare_restarted(
    check: str, label: str, state: EnvState, fresh: EnvState, env: TensorEnv, *, step: int, rows: Tensor
) -> None:
    """``rows`` of ``state`` hold a fresh start (that of ``fresh``) with zeroed episode counters."""
    compare_tree(check, f"{label} state.inner", state.inner, fresh.inner, step=step, rows=rows)
    compare(check, f"{label} state.episode_step", state.episode_step,
            torch.zeros(env.num_envs, dtype=torch.long), step=step, rows=rows)
    compare(check, f"{label} state.episode_return", state.episode_return, torch.zeros(env.reward_shape),
            step=step, rows=rows)


def check_result(check: str, env: TensorEnv, result: StepResult, step: int) -> None:
    """The contract every :class:`StepResult` keeps: shapes, dtypes and device of each field; finite
    ``obs``/``final_obs``/``reward``; never ``terminated & truncated``; ``current_player`` in ``[0, P)``;
    ``final_obs == obs`` in rows that did not finish."""
    n, described = env.num_envs, env.spec  # from the spec: any VecEnv, not only a TensorEnv
    obs_dtype = described.obs_dtype()
    reward_shape = (n,) if described.num_players == 1 else (n, described.num_players)
    spec = {
        "obs": ((n, *described.obs_shape), obs_dtype),
        "reward": (reward_shape, torch.float32),
        "terminated": ((n,), torch.bool),
        "truncated": ((n,), torch.bool),
        "final_obs": ((n, *described.obs_shape), obs_dtype),
        "action_mask": ((n, described.num_actions), torch.bool),
        "current_player": ((n,), torch.int64),
        "episode_return": (reward_shape, torch.float32),
        "episode_length": ((n,), torch.int64),
    }
    for name, (shape, dtype) in spec.items():
        t = getattr(result, name)
        if not isinstance(t, Tensor) or tuple(t.shape) != tuple(shape) or t.dtype != dtype:
            got = (tuple(t.shape), t.dtype) if isinstance(t, Tensor) else type(t).__name__
            raise EnvCheckError(
                check,
                f"{name} has the wrong shape or dtype",
                field=name,
                step=step,
                expected=(tuple(shape), dtype),
                got=got,
            )
        if t.device != env.device:
            raise EnvCheckError(
                check, f"{name} is on {t.device}, the environment on {env.device}", field=name, step=step
            )
    for name in ("obs", "final_obs", "reward"):
        finite = torch.isfinite(getattr(result, name)).cpu()  # (always True for integer pixels)
        compare(check, f"{name} is finite", finite, torch.ones_like(finite), step=step)
    both = (result.terminated & result.truncated).cpu()
    compare(check, "terminated & truncated", both, torch.zeros_like(both), step=step)
    player = result.current_player.cpu()
    in_range = (player >= 0) & (player < described.num_players)
    compare(check, "current_player in range", in_range, torch.ones_like(in_range), step=step)
    compare(
        check,
        "final_obs of an unfinished row",
        result.final_obs,
        result.obs,
        step=step,
        rows=~result.done.cpu(),
    )
