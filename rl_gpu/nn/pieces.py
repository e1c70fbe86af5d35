"""A rollout's ``[T, N]`` steps cut into episode pieces and laid out for a recurrent layer that runs over whole
sequences.

A memory cell replayed step by step in Python costs a few small kernels and their autograd records per step; an
LSTM layer (``torch.lstm``, oneDNN's fused RNN on the CPU) runs a whole ``[L, E, F]`` sequence in one call, forward
and backward. Such a layer cannot reset its state inside a sequence, so each column of the rollout is cut where an
episode starts: a piece is a run of steps of one column that begins at step 0 (from the column's recorded state)
or at an episode's start (from the initial state), and ends before the column's next start.

The layer's cost grows with ``L * E``, so pieces are not all padded to the longest one: they are grouped by length
into buckets (lengths in ``(2^(k-1), 2^k]``), each bucket padded to its own longest piece, which keeps the padded
steps under twice the real ones. Padding only ever follows a piece's last step, so it changes no real output.

    rollout [T, N]  ->  bucket k: [L_k, E_k] (steps[i] of the flat rollout at (time[i], lane[i]))
    outputs: the buckets' real steps concatenated, then put back in rollout order by ``order``

Shapes: T steps, N columns, E pieces, L_k / E_k a bucket's longest piece and piece count, F features, S a state.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class Bucket(NamedTuple):
    """The pieces of one length class, padded to ``length``."""

    steps: Tensor
    """``[K]`` int64: the flat (``t * N + n``) rollout steps in this bucket."""
    time: Tensor
    """``[K]`` int64: each step's position in its piece (its row in the padded layout)."""
    lane: Tensor
    """``[K]`` int64: its piece's column in the bucket's layout."""
    pieces: Tensor
    """``[E_k]`` int64: the pieces (numbered as in :class:`Pieces`) in the bucket's columns."""
    length: int
    """L_k."""


class Pieces(NamedTuple):
    """Episode pieces of a rollout (see the module docstring)."""

    buckets: tuple[Bucket, ...]
    order: Tensor
    """``[T * N]`` int64: where each flat step's output is in the buckets' concatenated outputs."""
    first: Tensor
    """``[N]`` int64: each column's first piece (the one beginning at step 0)."""
    count: int
    """E; pieces are numbered column by column, in time order."""


def split_pieces(starts: Tensor) -> Pieces:
    """The pieces of a rollout whose episodes start where ``starts`` (``[T, N]`` bool) is true, in length buckets.
    Reads the pieces' lengths on the host (meant for CPU tensors, where that costs no device synchronisation)."""
    if starts.dim() != 2 or starts.dtype != torch.bool or starts.numel() == 0:
        raise ValueError(f"starts must be a non-empty [T, N] bool tensor, got {tuple(starts.shape)} {starts.dtype}")
    steps, columns = starts.shape
    new = starts.t().clone()  # [N, T]: a piece begins at step 0 and wherever an episode starts
    new[:, 0] = True
    piece = torch.cumsum(new.reshape(-1).long(), 0).reshape(columns, steps) - 1
    t = torch.arange(steps, device=starts.device).expand(columns, steps)
    # Each step's position in its piece: the steps since the latest start at or before it (a running maximum).
    time = (t - torch.cummax(torch.where(new, t, torch.zeros_like(t)), dim=1).values).t().reshape(-1)
    first, piece = piece[:, 0], piece.t().reshape(-1)  # flat in rollout order, t * N + n
    lengths = torch.bincount(piece)
    size_class = torch.ceil(torch.log2(lengths.double())).long()  # lengths in (2^(k-1), 2^k] share class k
    lane_of = torch.empty_like(lengths)
    buckets, step_class = [], size_class[piece]
    for k in torch.unique(size_class).tolist():
        members = torch.nonzero(size_class == k).squeeze(1)
        lane_of[members] = torch.arange(members.numel(), device=members.device)
        at = torch.nonzero(step_class == k).squeeze(1)
        buckets.append(Bucket(at, time[at], lane_of[piece[at]], members, int(lengths[members].max())))
    order = torch.empty_like(piece)
    order[torch.cat([b.steps for b in buckets])] = torch.arange(piece.numel(), device=piece.device)
    return Pieces(tuple(buckets), order, first, lengths.numel())


def first_states(state0: Tensor, initial: Tensor, starts0: Tensor, pieces: Pieces) -> Tensor:
    """``[E, *S]``: every piece's state before its first step; ``initial`` (``[N, *S]``, the same in every row)
    for pieces that begin an episode, ``state0`` (``[N, *S]``) for a column's first piece unless ``starts0``
    (``[N]`` bool) says an episode began there too."""
    out = initial[:1].expand(pieces.count, *initial.shape[1:]).clone()
    out[pieces.first] = torch.where(starts0.view(-1, *([1] * (state0.dim() - 1))), initial, state0)
    return out


def run_pieces(layer, x: Tensor, h0: Tensor, pieces: Pieces) -> Tensor:
    """``[T, N, H]``: ``layer(padded [L_k, E_k, F], h0 [E_k, S]) -> [L_k, E_k, H]`` run over every bucket of the
    rollout's inputs ``x`` (``[T, N, F]``) from the pieces' first states ``h0`` (``[E, S]``); differentiable."""
    flat = x.reshape(-1, x.shape[-1])
    outs = []
    for b in pieces.buckets:
        padded = flat.new_zeros(b.length, b.pieces.numel(), flat.shape[-1]).index_put((b.time, b.lane), flat[b.steps])
        outs.append(layer(padded, h0[b.pieces])[b.time, b.lane])
    return torch.cat(outs)[pieces.order].reshape(*x.shape[:2], -1)
