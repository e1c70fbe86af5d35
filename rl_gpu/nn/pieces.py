"""A rollout's ``[T, N]`` steps cut into episode pieces and packed, so that a recurrent layer runs over each piece
whole.

A memory cell replayed step by step in Python costs a few small kernels and their autograd records per step; the
same cell run by ``torch.lstm`` / ``torch.gru`` over a packed sequence loops in C++. Such a layer cannot reset its
state inside a sequence, so each column of the rollout is cut where an episode starts: a piece is a run of steps of
one column that begins at step 0 (from the column's recorded state) or at an episode's start (from the initial
state), and ends before the column's next start. The pieces, longest first, are packed as PyTorch's
``PackedSequence`` packs them: time step l of the layer holds the ``batch_sizes[l]`` pieces longer than l, so the
layer does exactly the rollout's T * N steps, whatever the pieces' lengths, in L (the longest piece) iterations.

    rollout [T, N]  --(index)-->  packed [T * N]  (L blocks, block l: step l of the pieces longer than l)

Shapes: T steps, N columns, E pieces, L the longest piece, F features, S a state.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class Pieces(NamedTuple):
    """Where each ``[T, N]`` step lies in the packed layout (see the module docstring)."""

    index: Tensor
    """``[T, N]`` int64: the step's row in the packed ``[T * N]`` layout (a permutation)."""
    batch_sizes: Tensor
    """``[L]`` int64 on the CPU: how many pieces are longer than l (PyTorch's packed-sequence convention)."""
    first: Tensor
    """``[N]`` int64: where each column's first piece (the one beginning at step 0) is in the packed order."""
    count: int
    """E."""


def split_pieces(starts: Tensor) -> Pieces:
    """The packed pieces of a rollout whose episodes start where ``starts`` (``[T, N]`` bool) is true. Reads the
    pieces' lengths from the device (a host synchronisation)."""
    if starts.dim() != 2 or starts.dtype != torch.bool or starts.numel() == 0:
        raise ValueError(f"starts must be a non-empty [T, N] bool tensor, got {tuple(starts.shape)} {starts.dtype}")
    steps, columns = starts.shape
    new = starts.t().clone()  # [N, T]: a piece begins at step 0 and wherever an episode starts
    new[:, 0] = True
    piece = torch.cumsum(new.reshape(-1).long(), 0).reshape(columns, steps) - 1  # numbered column by column
    t = torch.arange(steps, device=starts.device).expand(columns, steps)
    # Each step's position in its piece: the steps since the latest start at or before it (a running maximum).
    time = t - torch.cummax(torch.where(new, t, torch.zeros_like(t)), dim=1).values
    lengths = torch.bincount(piece.reshape(-1))
    order = torch.sort(lengths, descending=True, stable=True).indices  # packed position -> piece
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel(), device=order.device)
    lengths_host = lengths.cpu()
    longest = int(lengths_host.max())
    # batch_sizes[l] = #pieces with length > l: a reverse cumulative count of the lengths.
    batch_sizes = torch.bincount(lengths_host, minlength=longest + 1).flip(0).cumsum(0).flip(0)[1:]
    offset = (batch_sizes.cumsum(0) - batch_sizes).to(starts.device)
    index = offset[time] + rank[piece]
    return Pieces(index.t(), batch_sizes, rank[piece[:, 0]], order.numel())


def to_packed(x: Tensor, pieces: Pieces) -> Tensor:
    """``[T, N, *F]`` -> ``[T * N, *F]`` in the packed order (differentiable)."""
    flat = x.reshape(-1, *x.shape[2:])
    inverse = torch.empty_like(pieces.index.reshape(-1))
    inverse[pieces.index.reshape(-1)] = torch.arange(flat.shape[0], device=flat.device)
    return flat[inverse]


def from_packed(y: Tensor, pieces: Pieces) -> Tensor:
    """``[T * N, *F]`` in the packed order -> ``[T, N, *F]``: the inverse of :func:`to_packed`."""
    return y[pieces.index]


def first_states(state0: Tensor, initial: Tensor, starts0: Tensor, pieces: Pieces) -> Tensor:
    """``[E, *S]`` in the packed order: every piece's state before its first step; ``initial`` (``[N, *S]``, the
    same in every row) for pieces that begin an episode, ``state0`` (``[N, *S]``) for a column's first piece
    unless ``starts0`` (``[N]`` bool) says an episode began there too."""
    out = initial[:1].expand(pieces.count, *initial.shape[1:]).clone()
    out[pieces.first] = torch.where(starts0.view(-1, *([1] * (state0.dim() - 1))), initial, state0)
    return out
