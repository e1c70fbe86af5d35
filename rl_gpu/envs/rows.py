"""Row-wise helpers of tensor environments: choosing between two inner states per row, and building a float32
observation from columns (the hot operations of an eager step)."""

from __future__ import annotations

from typing import TypeVar

import torch
from torch import Tensor

from rl_gpu.core.pytree import tree_where

Inner = TypeVar("Inner", bound=tuple)
"""An environment's inner state: a ``NamedTuple`` of ``[N, ...]`` tensors."""


def stack_float32(columns: tuple[Tensor, ...]) -> Tensor:
    """``torch.stack(columns, dim=1).float()``: the ``[N, C]`` float32 observation from C ``[N]`` columns.

    Eagerly, each column is copied (rounded as ``.float()`` rounds) straight into its place: the stack
    interleaves one element at a time, which at large N costs more than C strided copies, then casts in a
    second pass. Compiled code keeps the plain form (Inductor fuses it)."""
    if torch.compiler.is_compiling():
        return torch.stack(columns, dim=1).float()
    first = columns[0]
    out = torch.empty(first.shape[0], len(columns), dtype=torch.float32, device=first.device)
    for column, x in zip(out.unbind(1), columns):
        column.copy_(x)
    return out


def select_rows(condition: Tensor, if_true: Inner, if_false: Inner) -> Inner:
    """:func:`~rl_gpu.core.pytree.tree_where` of two inner states (``condition`` ``[N]`` bool), without its
    per-node walk when the state is a flat tuple of ``[N, ...]`` tensors: one ``where`` per field and one
    reshaped condition per field rank (an eager step is mostly fixed per-operation cost)."""
    if not isinstance(if_false, tuple) or not all(isinstance(x, Tensor) for x in if_false):
        return tree_where(condition, if_true, if_false)
    conditions = {1: condition}
    selected = []
    for a, b in zip(if_true, if_false):
        c = conditions.get(b.dim())
        if c is None:
            c = conditions[b.dim()] = condition.view(condition.shape + (1,) * (b.dim() - 1))
        selected.append(torch.where(c, a, b))
    return type(if_false)(*selected)
