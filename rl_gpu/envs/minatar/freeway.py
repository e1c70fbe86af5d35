"""``MinAtar-Freeway-v1``: a chicken crosses eight lanes of traffic, from the bottom row to the top.

Frames ``[N, 10, 10, 7]`` bool: chicken, cars, and five trail channels (a car's trail cell, behind it, in the channel
of its speed: it moves once every 1 to 5 steps). Actions (minimal set): no-op, up, down; the chicken moves at
most once every 3 steps. +1 each time it reaches the top row, which sends it back to the bottom and redraws every
car's speed and direction (positions kept); a car on its cell (before or after the car's move) sends it back too.
The game ends by itself at its 2,501st step (MinAtar's rule: ``terminated``, not a time limit); there is no
difficulty ramp. Sticky actions: :mod:`rl_gpu.envs.minatar.common`.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from rl_gpu.envs.minatar.common import ACTIONS, MinAtarEnv, cells
from rl_gpu.envs.random_draws import draw_keys, hash_uniform

PLAYER_SPEED = 3
TIME_LIMIT = 2500
CAR_STREAM = 1
"""The :func:`~rl_gpu.envs.random_draws.hash_uniform` stream of the speeds redrawn when the chicken scores."""
_UP, _DOWN = ACTIONS.index("u"), ACTIONS.index("d")


class FreewayState(NamedTuple):
    """Inner state of N games; ``[N]`` int64 unless said. Car i drives on row i + 1."""

    pos: Tensor
    """the chicken's row (9: bottom; it always stands in column 4)"""
    move_timer: Tensor
    """steps until the chicken may move again"""
    terminate_timer: Tensor
    """steps left before the game ends (it ends when this falls below 0)"""
    car_x: Tensor
    """``[N, 8]``: each car's column"""
    car_timer: Tensor
    """``[N, 8]``: steps until each car moves"""
    car_speed: Tensor
    """``[N, 8]``: steps between a car's moves (1 to 5), signed by its direction (+: to the right)"""
    last_action: Tensor
    key: Tensor
    t: Tensor


def car_draws(u_speed: Tensor, u_direction: Tensor) -> Tensor:
    """``[N, 8]`` signed speeds from uniform draws, as MinAtar's ``randint(1, 6, 8) * sign(rand(8) - 0.5)`` (a draw
    of exactly 0.5, which MinAtar turns into a car that never reaches any trail channel, counts as +)."""
    speed = 1 + (u_speed * 5).floor().long().clamp(max=4)
    return torch.where(u_direction < 0.5, -speed, speed)


class FreewayEnv(MinAtarEnv[FreewayState]):
    """MinAtar's Freeway (module docstring)."""

    obs_shape = (10, 10, 7)
    minimal_actions = "nud"
    # The game ends itself (terminated) at its 2,501st step; the limit only bounds episodes for evaluation and is
    # never reached first.
    max_episode_steps = TIME_LIMIT + 1

    def _sample_initial_state(self, n: int, g: torch.Generator) -> FreewayState:
        d = self.device
        speed = car_draws(torch.rand(n, 8, generator=g, device=d, dtype=torch.float64),
                          torch.rand(n, 8, generator=g, device=d, dtype=torch.float64))
        zeros = torch.zeros(n, dtype=torch.int64, device=d)
        return FreewayState(zeros + 9, zeros + PLAYER_SPEED, zeros + TIME_LIMIT, torch.zeros_like(speed),
                            speed.abs(), speed, zeros.clone(), draw_keys(n, g, d), zeros.clone())

    def _transition(self, s: FreewayState, action: Tensor) -> tuple[FreewayState, Tensor, Tensor]:
        a = self.sticky(action, s.last_action, s.key, s.t)
        ready = s.move_timer == 0
        up, down = ready & (a == _UP), ready & (a == _DOWN)
        move_timer = torch.where(up | down, PLAYER_SPEED, s.move_timer)
        pos = torch.where(up, (s.pos - 1).clamp(min=0), torch.where(down, (s.pos + 1).clamp(max=9), s.pos))
        scored = pos == 0
        u = hash_uniform(s.key, s.t, CAR_STREAM, 16)
        car_speed = torch.where(scored[:, None], car_draws(u[:, :8], u[:, 8:]), s.car_speed)
        car_timer = torch.where(scored[:, None], car_speed.abs(), s.car_timer)
        pos = torch.where(scored, 9, pos)
        # Cars: a hit before or after a car's move sends the chicken back (no car drives on row 9, so the order of
        # the cars does not matter).
        lane = pos[:, None] == torch.arange(1, 9, device=self.device)
        hit = lane & (s.car_x == 4)
        moves = car_timer == 0
        car_x = torch.where(moves, (s.car_x + car_speed.sign()) % 10, s.car_x)
        car_timer = torch.where(moves, car_speed.abs(), car_timer - 1)
        hit = (hit | (lane & (car_x == 4))).any(1)
        pos = torch.where(hit, 9, pos)
        terminate_timer = s.terminate_timer - 1
        nxt = FreewayState(pos, move_timer - (move_timer > 0).long(), terminate_timer, car_x, car_timer, car_speed,
                           a, s.key, s.t + 1)
        return nxt, scored.float(), terminate_timer < 0

    def _observe(self, s: FreewayState) -> Tensor:
        n, d = s.pos.shape[0], self.device
        rows = torch.arange(1, 9, device=d).expand(n, 8)
        cars = torch.zeros(n, 100, dtype=torch.bool, device=d).scatter_(1, rows * 10 + s.car_x, True)
        back = (s.car_x - s.car_speed.sign()) % 10
        trails = torch.zeros(n, 5, 100, dtype=torch.bool, device=d)
        trails.scatter_(2, (rows * 10 + back).unsqueeze(1).expand(n, 5, 8),
                                 (s.car_speed.abs().unsqueeze(1) == torch.arange(1, 6, device=d)[:, None]))
        chicken = cells(s.pos, torch.full_like(s.pos, 4))
        return torch.cat([chicken.view(n, 1, 100), cars.view(n, 1, 100), trails], 1).view(n, 7, 10, 10).permute(
            0, 2, 3, 1).contiguous()
