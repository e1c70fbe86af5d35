"""Seats of turn-based games: which column of a per-seat tensor is the learner's."""

from __future__ import annotations

from torch import Tensor


def seat_column(x: Tensor, seat: Tensor) -> Tensor:
    """``[N]`` from a per-seat ``[N, P]`` tensor (or ``x`` itself when it is already ``[N]``)."""
    return x if x.dim() == 1 else x.gather(1, seat[:, None]).squeeze(1)
