"""Nests of tensors: tuples, NamedTuples and dataclasses of tensors (or of further nests), and ``None`` leaves.

One module for every tree operation the library needs, so environment states, rollouts, noise and CUDA-graph
buffers are walked the same way everywhere.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor


def children(tree: Any) -> list:
    """The direct children of a tuple, NamedTuple or dataclass node, in field order."""
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        return [getattr(tree, f.name) for f in dataclasses.fields(tree)]
    return list(tree)


def rebuild(template: Any, parts: Sequence[Any]) -> Any:
    """A node of ``template``'s type holding ``parts``."""
    if dataclasses.is_dataclass(template) and not isinstance(template, type):
        return type(template)(**{f.name: x for f, x in zip(dataclasses.fields(template), parts)})
    if hasattr(template, "_fields"):
        return type(template)(*parts)
    return type(template)(parts)


def is_leaf(tree: Any) -> bool:
    return tree is None or isinstance(tree, (Tensor, int, float, bool, str))


def tree_map(fn: Callable[[Tensor], Any], tree: Any) -> Any:
    """``fn`` applied to every tensor of ``tree`` (other leaves are kept as they are)."""
    if isinstance(tree, Tensor):
        return fn(tree)
    if is_leaf(tree):
        return tree
    return rebuild(tree, [tree_map(fn, x) for x in children(tree)])


def tree_leaves(tree: Any) -> list[Tensor]:
    """Every tensor of ``tree``, depth first."""
    if isinstance(tree, Tensor):
        return [tree]
    if is_leaf(tree):
        return []
    return [leaf for x in children(tree) for leaf in tree_leaves(x)]


def tree_where(condition: Tensor, if_true: Any, if_false: Any) -> Any:
    """Select row-wise between two equally shaped trees of ``[N, ...]`` tensors; ``condition`` is ``[N]`` bool
    (``None`` leaves stay ``None``)."""
    if if_true is None:
        return None
    if isinstance(if_true, Tensor):
        c = condition.view(condition.shape + (1,) * (if_true.dim() - 1))
        return torch.where(c, if_true, if_false)
    return rebuild(if_true, [tree_where(condition, a, b) for a, b in zip(children(if_true), children(if_false))])


def tree_stack(trees: Sequence[Any]) -> Any:
    """``[T]`` equally shaped trees of ``[N, ...]`` tensors -> one tree of ``[T, N, ...]`` tensors (``None``
    leaves stay ``None``)."""
    first = trees[0]
    if first is None:
        return None
    if isinstance(first, Tensor):
        return torch.stack(list(trees))
    return rebuild(first, [tree_stack(parts) for parts in zip(*(children(t) for t in trees))])


def tree_cat(trees: Sequence[Any]) -> Any:
    """Concatenate equally shaped trees along the batch (first) dimension (``None`` leaves stay ``None``)."""
    first = trees[0]
    if first is None:
        return None
    if isinstance(first, Tensor):
        return torch.cat(list(trees))
    return rebuild(first, [tree_cat(parts) for parts in zip(*(children(t) for t in trees))])


def clone_tree(tree: Any) -> Any:
    """A copy of ``tree`` with fresh storage for each tensor."""
    return tree_map(lambda t: t.clone(), tree)


def copy_tree_(dst: Any, src: Any) -> None:
    """``dst.copy_(src)`` for every tensor of two equally nested trees (other leaves are left as they are)."""
    if isinstance(dst, Tensor):
        dst.copy_(src)
        return
    if is_leaf(dst):
        return
    for d, s in zip(children(dst), children(src)):
        copy_tree_(d, s)


def tree_bytes(tree: Any) -> int:
    """Bytes held by the tensors of ``tree``."""
    return sum(t.numel() * t.element_size() for t in tree_leaves(tree))
