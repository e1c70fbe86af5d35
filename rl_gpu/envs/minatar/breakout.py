"""``MinAtar-Breakout-v1``: a paddle at the bottom bounces a ball into three rows of bricks.

Frames ``[N, 10, 10, 4]`` bool: paddle, ball, trail (the ball's previous cell, which tells its direction), bricks.
Actions (minimal set): no-op, left, right. +1 per brick broken; when the ball reaches the paddle's row with no brick
left, three new rows appear. The ball moves along diagonals; it bounces off the walls, the ceiling and bricks, and
off the paddle (back the way it came when the paddle is under its old column, sideways when under its new one).
The episode ends when the ball reaches the bottom row anywhere else. No difficulty ramp. Sticky actions and the
time limit: :mod:`rl_gpu.envs.minatar.common`.

Directions: 0 up-left, 1 up-right, 2 down-right, 3 down-left.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from rl_gpu.envs.minatar.common import ACTIONS, MinAtarEnv, cells
from rl_gpu.envs.random_draws import draw_keys

_LEFT, _RIGHT = ACTIONS.index("l"), ACTIONS.index("r")


class BreakoutState(NamedTuple):
    """Inner state of N games; ``[N]`` int64 unless said."""

    ball_x: Tensor
    ball_y: Tensor
    ball_dir: Tensor
    pos: Tensor
    """the paddle's column"""
    last_x: Tensor
    last_y: Tensor
    bricks: Tensor
    """``[N, 10, 10]`` bool"""
    strike: Tensor
    """``[N]`` bool: the ball hit a brick on the previous step (it cannot break another one at once)"""
    last_action: Tensor
    """the previous action taken, index into :data:`~rl_gpu.envs.minatar.common.ACTIONS` (sticky actions)"""
    key: Tensor
    """the row's random key"""
    t: Tensor
    """steps taken in this episode (the random draws' counter)"""


def _table(values: list[int], device: torch.device) -> Tensor:
    return torch.tensor(values, dtype=torch.int64, device=device)


def _fresh_bricks(n: int, device: torch.device) -> Tensor:
    bricks = torch.zeros(n, 10, 10, dtype=torch.bool, device=device)
    bricks[:, 1:4] = True
    return bricks


class BreakoutEnv(MinAtarEnv[BreakoutState]):
    """MinAtar's Breakout (module docstring)."""

    obs_shape = (10, 10, 4)
    minimal_actions = "nlr"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        d = self.device
        self._dx, self._dy = _table([-1, 1, 1, -1], d), _table([-1, -1, 1, 1], d)
        # Direction after bouncing off a side wall, off the ceiling / floor / a brick, and off the paddle's edge.
        self._flip_x, self._flip_y, self._flip_both = _table([1, 0, 3, 2], d), _table([3, 2, 1, 0], d), \
            _table([2, 3, 0, 1], d)

    def _sample_initial_state(self, n: int, g: torch.Generator) -> BreakoutState:
        d = self.device
        # One draw a call (a rollout's starts are then drawn at once, see rl_gpu.collect.engine): the side the
        # ball starts on (minatar: randint(2)) from one word's lowest bit, the row's key from the other.
        words = draw_keys(2 * n, g, d).view(n, 2)
        right, key = (words[:, 0] & 1).bool(), words[:, 1].clone()
        ball_x = torch.where(right, 9, 0)
        ball_dir = torch.where(right, 3, 2)
        ball_y = torch.full((n,), 3, dtype=torch.int64, device=d)
        zeros = torch.zeros(n, dtype=torch.int64, device=d)
        return BreakoutState(ball_x, ball_y, ball_dir, zeros + 4, ball_x.clone(), ball_y.clone(), _fresh_bricks(n, d),
                             torch.zeros(n, dtype=torch.bool, device=d), zeros.clone(), key, zeros.clone())

    def _transition(self, s: BreakoutState, action: Tensor) -> tuple[BreakoutState, Tensor, Tensor]:
        a = self.sticky(action, s.last_action, s.key, s.t)
        pos = torch.where(a == _LEFT, (s.pos - 1).clamp(min=0), torch.where(a == _RIGHT, (s.pos + 1).clamp(max=9), s.pos))
        new_x, new_y = s.ball_x + self._dx[s.ball_dir], s.ball_y + self._dy[s.ball_dir]
        side = (new_x < 0) | (new_x > 9)
        new_x = new_x.clamp(0, 9)
        direction = torch.where(side, self._flip_x[s.ball_dir], s.ball_dir)

        top = new_y < 0
        rows = torch.arange(s.bricks.shape[0], device=self.device)
        brick = ~top & s.bricks[rows, new_y.clamp(0, 9), new_x]
        bottom = ~top & ~brick & (new_y == 9)
        # A brick breaks unless the ball broke one on the previous step (then it passes into the brick's cell).
        breaks = brick & ~s.strike
        bricks = s.bricks & ~(breaks[:, None, None] & cells(new_y.clamp(0, 9), new_x))
        # At the paddle's row with no brick left, three fresh rows appear (counted before any change this step).
        refill = bottom & ~s.bricks.flatten(1).any(1)
        bricks = torch.where(refill[:, None, None], _fresh_bricks(bricks.shape[0], self.device), bricks)
        back = bottom & (s.ball_x == pos)
        edge = bottom & ~back & (new_x == pos)
        terminated = bottom & ~back & ~edge

        direction = torch.where(top | breaks | back, self._flip_y[direction],
                                torch.where(edge, self._flip_both[direction], direction))
        new_y = torch.where(top, 0, torch.where(breaks | back | edge, s.ball_y, new_y))
        nxt = BreakoutState(new_x, new_y, direction, pos, s.ball_x, s.ball_y, bricks, brick, a, s.key, s.t + 1)
        return nxt, breaks.float(), terminated

    def _observe(self, s: BreakoutState) -> Tensor:
        paddle = cells(torch.full_like(s.pos, 9), s.pos)
        return torch.stack([paddle, cells(s.ball_y, s.ball_x), cells(s.last_y, s.last_x), s.bricks], dim=-1)
