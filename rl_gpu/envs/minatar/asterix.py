"""``MinAtar-Asterix-v1``: the player roams the field between eight lanes where enemies and treasure drive across.

Frames ``[N, 10, 10, 4]`` bool: player, enemies, trails (the cell behind each moving thing), treasure. Actions
(minimal set): no-op, left, up, right, down (rows 1 to 8 only). Every ``spawn_speed`` steps a thing enters a free
lane from the left or the right edge (treasure one time in three); every ``move_speed`` steps everything moves one
cell and leaves at the far edge. +1 per treasure touched (before or after things move); touching an enemy ends the
episode. With ``difficulty_ramping``, every 100 steps things spawn one step sooner and, every other time, move one
step sooner (down to every step). Sticky actions and the time limit: :mod:`rl_gpu.envs.minatar.common`.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from rl_gpu.envs.minatar.common import ACTIONS, MinAtarEnv, cells
from rl_gpu.envs.random_draws import draw_keys, hash_uniform

RAMP_INTERVAL = 100
INIT_SPAWN_SPEED = 10
INIT_MOVE_INTERVAL = 5
SPAWN_STREAM = 1
"""The :func:`~rl_gpu.envs.random_draws.hash_uniform` stream of a spawn: side, treasure or not, and free lane."""
_LEFT, _UP, _RIGHT, _DOWN = (ACTIONS.index(c) for c in "lurd")


class AsterixState(NamedTuple):
    """Inner state of N games; ``[N]`` int64 unless said. Lane i is row i + 1."""

    player_x: Tensor
    player_y: Tensor
    alive: Tensor
    """``[N, 8]`` bool: a thing drives in the lane"""
    thing_x: Tensor
    """``[N, 8]``: its column"""
    rightward: Tensor
    """``[N, 8]`` bool: it drives to the right (it entered on the left)"""
    gold: Tensor
    """``[N, 8]`` bool: it is treasure (else an enemy)"""
    spawn_speed: Tensor
    spawn_timer: Tensor
    move_speed: Tensor
    move_timer: Tensor
    ramp_timer: Tensor
    ramp_index: Tensor
    last_action: Tensor
    key: Tensor
    t: Tensor


class AsterixEnv(MinAtarEnv[AsterixState]):
    """MinAtar's Asterix (module docstring)."""

    obs_shape = (10, 10, 4)
    minimal_actions = "nlurd"

    def _sample_initial_state(self, n: int, g: torch.Generator) -> AsterixState:
        d = self.device
        zeros = torch.zeros(n, dtype=torch.int64, device=d)
        no = torch.zeros(n, 8, dtype=torch.bool, device=d)
        return AsterixState(zeros + 5, zeros + 5, no, torch.zeros(n, 8, dtype=torch.int64, device=d), no.clone(),
                            no.clone(), zeros + INIT_SPAWN_SPEED, zeros + INIT_SPAWN_SPEED, zeros + INIT_MOVE_INTERVAL,
                            zeros + INIT_MOVE_INTERVAL, zeros + RAMP_INTERVAL, zeros.clone(), zeros.clone(),
                            draw_keys(n, g, d), zeros.clone())

    def _transition(self, s: AsterixState, action: Tensor) -> tuple[AsterixState, Tensor, Tensor]:
        a = self.sticky(action, s.last_action, s.key, s.t)
        # A spawn (its three draws are made even when no lane is free, as MinAtar makes them).
        spawn = s.spawn_timer == 0
        u = hash_uniform(s.key, s.t, SPAWN_STREAM, 3)
        right, is_gold = u[:, 0] < 0.5, u[:, 1] < 1 / 3
        free = ~s.alive
        count = free.sum(1)
        choice = (u[:, 2] * count).floor().long()
        pick = free & (free.cumsum(1) - 1 == choice[:, None]) & spawn[:, None]
        alive = s.alive | pick
        thing_x = torch.where(pick, torch.where(right, 0, 9)[:, None], s.thing_x)
        rightward = torch.where(pick, right[:, None], s.rightward)
        gold = torch.where(pick, is_gold[:, None], s.gold)
        spawn_timer = torch.where(spawn, s.spawn_speed, s.spawn_timer)

        px = torch.where(a == _LEFT, (s.player_x - 1).clamp(min=0),
                         torch.where(a == _RIGHT, (s.player_x + 1).clamp(max=9), s.player_x))
        py = torch.where(a == _UP, (s.player_y - 1).clamp(min=1),
                         torch.where(a == _DOWN, (s.player_y + 1).clamp(max=8), s.player_y))
        lane = py[:, None] == torch.arange(1, 9, device=self.device)

        def touch(alive: Tensor, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
            at = alive & lane & (x == px[:, None])
            return alive & ~(at & gold), (at & gold).sum(1), (at & ~gold).any(1)

        alive, reward, hit = touch(alive, thing_x)
        moves = s.move_timer == 0
        thing_x = torch.where(moves[:, None] & alive, thing_x + torch.where(rightward, 1, -1), thing_x)
        alive = alive & (thing_x >= 0) & (thing_x <= 9)
        alive_after, reward_after, hit_after = touch(alive, thing_x)
        alive = torch.where(moves[:, None], alive_after, alive)
        reward = reward + torch.where(moves, reward_after, 0)
        hit = hit | (moves & hit_after)
        move_timer = torch.where(moves, s.move_speed, s.move_timer) - 1
        spawn_timer = spawn_timer - 1

        spawn_speed, move_speed, ramp_timer, ramp_index = s.spawn_speed, s.move_speed, s.ramp_timer, s.ramp_index
        if self.params.difficulty_ramping:
            ramping = (spawn_speed > 1) | (move_speed > 1)
            wait = ramping & (ramp_timer >= 0)
            step_up = ramping & ~wait
            move_speed = move_speed - (step_up & (move_speed > 1) & (ramp_index % 2 == 1)).long()
            spawn_speed = spawn_speed - (step_up & (spawn_speed > 1)).long()
            ramp_index = ramp_index + step_up.long()
            ramp_timer = torch.where(wait, ramp_timer - 1, torch.where(step_up, RAMP_INTERVAL, ramp_timer))
        # An empty lane holds zeros (a state has one form: the reference's empty slot).
        thing_x, rightward, gold = torch.where(alive, thing_x, 0), rightward & alive, gold & alive
        nxt = AsterixState(px, py, alive, thing_x, rightward, gold, spawn_speed, spawn_timer, move_speed, move_timer,
                           ramp_timer, ramp_index, a, s.key, s.t + 1)
        return nxt, reward.float(), hit

    def _observe(self, s: AsterixState) -> Tensor:
        n = s.player_x.shape[0]

        def lanes(on: Tensor, x: Tensor) -> Tensor:
            """``[N, 10, 10]``: cell ``(i + 1, x_i)`` of every lane i where ``on`` (``x`` clamped into the grid)."""
            grid = torch.nn.functional.one_hot(x.clamp(0, 9), 10).bool() & on[..., None]
            edge = torch.zeros(n, 1, 10, dtype=torch.bool, device=self.device)
            return torch.cat([edge, grid, edge], 1)

        back = s.thing_x - torch.where(s.rightward, 1, -1)
        trail = s.alive & (back >= 0) & (back <= 9)
        return torch.stack([cells(s.player_y, s.player_x), lanes(s.alive & ~s.gold, s.thing_x), lanes(trail, back),
                            lanes(s.alive & s.gold, s.thing_x)], -1)
