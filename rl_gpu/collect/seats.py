"""Seats of turn-based games: which column of a per-seat tensor is the learner's, and the opponent's moves."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from rl_gpu.core.pytree import tree_where
from rl_gpu.core.types import Actor, PolicyOutput
from rl_gpu.nn.memory import is_recurrent, reset_state


def seat_column(x: Tensor, seat: Tensor) -> Tensor:
    """``[N]`` from a per-seat ``[N, P]`` tensor (or ``x`` itself when it is already ``[N]``)."""
    return x if x.dim() == 1 else x.gather(1, seat[:, None]).squeeze(1)


class OpponentPlayer:
    """The opponent of a collection, over R rows. A feed-forward opponent is called as it is; one with memory
    (a league of snapshots of a learner with memory, :mod:`rl_gpu.nn.recurrent_opponents`) has its ``[R, S]``
    state kept here: starting at its initial state, advancing only in the rows where the opponent acts (its own
    turns, as the learner's memory does on the learner's) and reset where an episode ended. It lives for one
    collection; continuing rollouts (a game's seats as agents) hand the next one ``state``, the state the previous
    one ended with, so a game running across two rollouts keeps its opponent's memory."""

    def __init__(self, opponent: Actor, rows: int, state: Any = None) -> None:
        self.opponent = opponent
        self.recurrent = is_recurrent(opponent)
        self.initial = opponent.initial_state(rows) if self.recurrent else None
        self.state = self.initial if state is None or not self.recurrent else state

    def act(self, obs: Tensor, action_mask: Tensor, generator: torch.Generator | None, turn: Tensor) -> PolicyOutput:
        """The opponent's ``[R]`` actions; ``turn`` ``[R]`` bool: the rows where it acts (its state moves there)."""
        if not self.recurrent:
            return self.opponent.act(obs, action_mask, generator)
        out, after = self.opponent.act_with_state(obs, self.state, action_mask, generator)
        self.state = tree_where(turn, after, self.state)
        return out

    def episodes_ended(self, done: Tensor) -> None:
        """Reset the state of the rows whose episode ended (``[R]`` bool)."""
        if self.recurrent:
            self.state = reset_state(done, self.initial, self.state)
