"""What the checks need to drive an environment: how to build one, reproducible random legal actions, and
single rows taken out of, or put into, a batched inner state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import torch
from torch import Tensor

from rl_gpu.core.pytree import tree_map
from rl_gpu.envs.base import TensorEnv

__all__ = ["EnvFactory", "inner_row", "sample_actions", "stack_rows"]


class EnvFactory(Protocol):
    """Builds a fresh environment; every :class:`TensorEnv` subclass is one (``functools.partial`` fixes a
    device or other arguments)."""

    def __call__(self, num_envs: int, *, seed: int | None, autoreset: bool) -> TensorEnv: ...


def sample_actions(env: TensorEnv, action_mask: Tensor, generator: torch.Generator) -> Tensor:
    """Draw one random action per row, uniformly among the legal ones.

    Args:
        env: the environment the actions are for (gives N, the action space and the device).
        action_mask: ``[N, A]`` bool legality mask (ignored for continuous actions). A row with no legal
            action draws uniformly among all actions.
        generator: a CPU ``torch.Generator``; the same generator state gives the same actions on every
            device, so a failure found on one device reproduces on another.

    Returns:
        ``[N]`` int64 actions, or ``[N, D]`` float32 actions uniform in ``[action_low, action_high]``
        (standard normal in a dimension with an infinite bound), on ``env.device``; with M > 1 agents acting at
        once, ``[N, M]`` or ``[N, M, D]`` (``action_mask`` ``[N, M, A]``).
    """
    spec = env.spec  # from the spec: any VecEnv, not only a TensorEnv
    rows = (env.num_envs, spec.num_agents) if spec.num_agents > 1 else (env.num_envs,)
    if spec.is_continuous:
        shape, size = tuple(spec.action_shape), math.prod(spec.action_shape)
        low = torch.tensor(spec.action_low or (-math.inf,) * size, dtype=torch.float64).reshape(shape)
        high = torch.tensor(spec.action_high or (math.inf,) * size, dtype=torch.float64).reshape(shape)
        uniform = torch.rand((*rows, *shape), generator=generator, dtype=torch.float64)
        normal = torch.randn((*rows, *shape), generator=generator, dtype=torch.float64)
        bounded = torch.isfinite(low) & torch.isfinite(high)
        span = torch.where(bounded, high - low, torch.zeros_like(low))
        base = torch.where(bounded, low, torch.zeros_like(low))
        action = torch.where(bounded, base + uniform * span, normal)
        return action.to(device=env.device, dtype=torch.float32)
    mask = action_mask.detach().to(device="cpu", dtype=torch.bool).reshape(-1, spec.num_actions)
    probs = mask.float()
    probs[~mask.any(1)] = 1.0
    return torch.multinomial(probs, 1, generator=generator).reshape(rows).to(env.device)


def inner_row(inner: tuple, index: int) -> tuple:
    """Row ``index`` of an inner state: the same NamedTuple type, each field indexed (``[N]`` fields become
    0-d tensors, ``[N, k]`` fields ``[k]`` tensors)."""
    return tree_map(lambda t: t[index], inner)


def stack_rows(template: tuple, rows: Sequence[Any]) -> tuple:
    """Build an inner state of ``len(rows)`` environments from single rows (the inverse of :func:`inner_row`).

    Args:
        template: an inner state of the target environment (e.g. ``env.state.inner``); gives the
            NamedTuple type, per-row shapes, dtypes and the device.
        rows: one entry per environment: the inner NamedTuple, a tuple in field order, or a mapping from
            field name to value; values are anything ``torch.as_tensor`` accepts.

    Returns:
        A NamedTuple of the template's type with ``[len(rows), ...]`` fields, ready for
        :meth:`TensorEnv.set_rows`.

    Raises:
        ValueError: a row misses a field or has a value of the wrong shape.
    """
    names = template._fields
    columns: list[list[Tensor]] = [[] for _ in names]
    for r, row in enumerate(rows):
        if isinstance(row, Mapping):
            missing = [n for n in names if n not in row]
            if missing:
                raise ValueError(f"row {r} misses fields {missing}")
            values = [row[n] for n in names]
        else:
            values = list(row)
            if len(values) != len(names):
                raise ValueError(f"row {r} has {len(values)} fields, expected {len(names)} {names}")
        for column, name, value, ref in zip(columns, names, values, template):
            t = torch.as_tensor(value).to(dtype=ref.dtype, device=ref.device)
            if tuple(t.shape) != tuple(ref.shape[1:]):
                raise ValueError(
                    f"row {r}, field {name!r}: expected shape {tuple(ref.shape[1:])}, got {tuple(t.shape)}"
                )
            column.append(t)
    return type(template)(*(torch.stack(c) for c in columns))
