"""``MinAtar-SpaceInvaders-v1``: a cannon at the bottom shoots at a block of aliens that shoots back.

Frames ``[N, 10, 10, 6]`` bool: cannon, aliens, aliens moving left, aliens moving right, the cannon's bullets, the
aliens' bullets. Actions (minimal set): no-op, left, right, fire (at most once every 5 steps). +1 per alien shot.
The aliens step sideways every few steps (every ``enemy_move_interval`` steps, or once per alien when fewer are
left) and, at a wall, down a row and the other way; every 10 steps the alien nearest the cannon's column (the
lowest one in that column) fires. The episode ends when an alien or an alien's bullet reaches the cannon, or when
an alien at the bottom row turns. A cleared wave is replaced by a new one, which with ``difficulty_ramping`` moves
one step sooner (down to every 6 steps). Sticky actions and the time limit: :mod:`rl_gpu.envs.minatar.common`.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from rl_gpu.envs.minatar.common import ACTIONS, MinAtarEnv, cells
from rl_gpu.envs.random_draws import draw_keys

SHOT_COOL_DOWN = 5
ENEMY_MOVE_INTERVAL = 12
ENEMY_SHOT_INTERVAL = 10
_LEFT, _RIGHT, _FIRE = ACTIONS.index("l"), ACTIONS.index("r"), ACTIONS.index("f")


class SpaceInvadersState(NamedTuple):
    """Inner state of N games; ``[N]`` int64 unless said."""

    pos: Tensor
    """the cannon's column"""
    f_bullets: Tensor
    """``[N, 10, 10]`` bool: the cannon's bullets"""
    e_bullets: Tensor
    """``[N, 10, 10]`` bool: the aliens' bullets"""
    aliens: Tensor
    """``[N, 10, 10]`` bool"""
    alien_dir: Tensor
    """-1 (left) or +1 (right)"""
    move_interval: Tensor
    """steps between the aliens' moves (12, lowered by the ramp)"""
    move_timer: Tensor
    shot_timer: Tensor
    """steps until the aliens fire"""
    ramp_index: Tensor
    cool_down: Tensor
    """steps until the cannon can fire again"""
    last_action: Tensor
    key: Tensor
    t: Tensor


def _fresh_aliens(n: int, device: torch.device) -> Tensor:
    aliens = torch.zeros(n, 10, 10, dtype=torch.bool, device=device)
    aliens[:, 0:4, 2:8] = True
    return aliens


class SpaceInvadersEnv(MinAtarEnv[SpaceInvadersState]):
    """MinAtar's Space Invaders (module docstring)."""

    obs_shape = (10, 10, 6)
    minimal_actions = "nlrf"

    def _sample_initial_state(self, n: int, g: torch.Generator) -> SpaceInvadersState:
        d = self.device
        zeros = torch.zeros(n, dtype=torch.int64, device=d)
        empty = torch.zeros(n, 10, 10, dtype=torch.bool, device=d)
        return SpaceInvadersState(zeros + 5, empty, empty.clone(), _fresh_aliens(n, d), zeros - 1,
                                  zeros + ENEMY_MOVE_INTERVAL, zeros + ENEMY_MOVE_INTERVAL, zeros + ENEMY_SHOT_INTERVAL,
                                  zeros.clone(), zeros.clone(), zeros.clone(), draw_keys(n, g, d), zeros.clone())

    def _transition(self, s: SpaceInvadersState, action: Tensor) -> tuple[SpaceInvadersState, Tensor, Tensor]:
        n, d = s.pos.shape[0], self.device
        rows = torch.arange(n, device=d)
        a = self.sticky(action, s.last_action, s.key, s.t)
        # Firing and moving exclude each other: a shot fired stays in place.
        fire = (a == _FIRE) & (s.cool_down == 0)
        f_bullets = s.f_bullets | (fire[:, None, None] & cells(torch.full_like(s.pos, 9), s.pos))
        cool_down = torch.where(fire, SHOT_COOL_DOWN, s.cool_down)
        pos = torch.where(a == _LEFT, (s.pos - 1).clamp(min=0), torch.where(a == _RIGHT, (s.pos + 1).clamp(max=9),
                                                                             s.pos))
        # Bullets: the cannon's one row up, the aliens' one row down (what leaves the grid is gone).
        f_bullets = torch.cat([f_bullets[:, 1:], torch.zeros_like(f_bullets[:, :1])], dim=1)
        e_bullets = torch.cat([torch.zeros_like(s.e_bullets[:, :1]), s.e_bullets[:, :-1]], dim=1)
        terminated = e_bullets[rows, 9, pos] | s.aliens[rows, 9, pos]

        # The aliens: sideways, or at a wall down one row (MinAtar rolls the grid: the bottom row wraps to the top)
        # and turning round.
        count = s.aliens.flatten(1).sum(1)
        move = s.move_timer == 0
        move_timer = torch.where(move, torch.minimum(count, s.move_interval), s.move_timer)
        at_wall = (s.aliens[:, :, 0].any(1) & (s.alien_dir < 0)) | (s.aliens[:, :, 9].any(1) & (s.alien_dir > 0))
        down = move & at_wall
        terminated = terminated | (down & s.aliens[:, 9].any(1))
        sideways = torch.where((s.alien_dir > 0)[:, None, None], s.aliens.roll(1, dims=2), s.aliens.roll(-1, dims=2))
        aliens = torch.where(down[:, None, None], s.aliens.roll(1, dims=1),
                             torch.where((move & ~at_wall)[:, None, None], sideways, s.aliens))
        alien_dir = torch.where(down, -s.alien_dir, s.alien_dir)
        terminated = terminated | (move & aliens[rows, 9, pos])

        # Every ENEMY_SHOT_INTERVAL steps the lowest alien of the column nearest the cannon (the left one of two
        # equally near) fires.
        shoot = s.shot_timer == 0
        shot_timer = torch.where(shoot, ENEMY_SHOT_INTERVAL, s.shot_timer)
        columns = torch.arange(10, device=d)
        occupied = aliens.any(1)
        order = torch.where(occupied, (columns - pos[:, None]).abs() * 10 + columns, 1000)
        column = order.argmin(1)
        in_column = aliens[rows, :, column]
        lowest = torch.where(in_column, columns, -1).max(1).values
        e_bullets = e_bullets | ((shoot & occupied.any(1))[:, None, None] & cells(lowest.clamp(min=0), column))

        kill = aliens & f_bullets
        reward = kill.flatten(1).sum(1).float()
        aliens, f_bullets = aliens & ~kill, f_bullets & ~kill
        cool_down = cool_down - (cool_down > 0).long()
        move_timer, shot_timer = move_timer - 1, shot_timer - 1
        cleared = ~aliens.flatten(1).any(1)
        ramp = cleared & (s.move_interval > 6) & self.params.difficulty_ramping
        aliens = torch.where(cleared[:, None, None], _fresh_aliens(n, d), aliens)
        nxt = SpaceInvadersState(pos, f_bullets, e_bullets, aliens, alien_dir, s.move_interval - ramp.long(),
                                 move_timer, shot_timer, s.ramp_index + ramp.long(), cool_down, a, s.key, s.t + 1)
        return nxt, reward, terminated

    def _observe(self, s: SpaceInvadersState) -> Tensor:
        cannon = cells(torch.full_like(s.pos, 9), s.pos)
        left = s.aliens & (s.alien_dir < 0)[:, None, None]
        right = s.aliens & (s.alien_dir > 0)[:, None, None]
        return torch.stack([cannon, s.aliens, left, right, s.f_bullets, s.e_bullets], dim=-1)
