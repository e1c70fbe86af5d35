"""``MinAtar-Seaquest-v1``: a submarine shoots fish and enemy submarines, rescues divers and surfaces for oxygen.

Frames ``[N, 10, 10, 10]`` bool: the submarine's front and back, its bullets, trails (the cell behind each enemy
and diver), enemy bullets, fish, enemy submarines, the oxygen gauge and the divers gauge (bottom row), divers.
Actions: no-op, left, up, right, down, fire (at most once every 5 steps). +1 per enemy shot. Enemies (a fish, or
one time in three a submarine that fires every 11 steps) enter a random row from a random side every
``e_spawn_speed + 1`` steps unless that row holds enemies driving the other way; divers every 31 steps. Touching a
diver picks it up (six at most). Oxygen falls by one per step under water; surfacing with a diver on board refills
it and drops a diver (with six: all of them, and ``oxygen * 10 // 200`` points), and with ``difficulty_ramping``
makes enemies spawn sooner and, every other time, move sooner. The episode ends when an enemy or its bullet
touches the submarine, when the oxygen runs out, or on surfacing without a diver.

The game's objects live in lists whose order decides who meets whom first (a bullet hits the first fish listed in
its cell); each list here is a fixed number of slots kept in the list's order (the live ones first, in the order
they were added), large enough for the most the rules allow at once. Objects are processed as ``minatar``
processes its lists, last to first, one slot at a time where one object's fate can change another's, including
its quirks: a submarine removed in a step still fires if its shot is due (the bullet is dropped at once when the
submarine left the grid), and surfacing with six divers leaves the count at -1. Sticky actions and the time
limit: :mod:`rl_gpu.envs.minatar.common`.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from rl_gpu.envs.minatar.common import ACTIONS, MinAtarEnv, cells
from rl_gpu.envs.random_draws import draw_keys, hash_uniform

MAX_OXYGEN = 200
INIT_SPAWN_SPEED = 20
DIVER_SPAWN_SPEED = 30
INIT_MOVE_INTERVAL = 5
SHOT_COOL_DOWN = 5
ENEMY_SHOT_INTERVAL = 10
DIVER_MOVE_INTERVAL = 5
ENEMY_STREAM, DIVER_STREAM = 1, 2
"""The :func:`~rl_gpu.envs.random_draws.hash_uniform` streams of an enemy's spawn (side, submarine or fish, row)
and of a diver's (side, row)."""
BULLETS, DIVERS, ENEMIES = 3, 4, 32
"""Slots per list: the submarine's bullets (one shot per 5 steps, each gone within 10), divers (one per 31 steps,
each gone within 60), and each kind of enemy and enemy bullets (at most one spawn per step, each enemy gone within
30 steps at the fastest)."""
_LEFT, _UP, _RIGHT, _DOWN, _FIRE = (ACTIONS.index(c) for c in "lurdf")


class SeaquestState(NamedTuple):
    """Inner state of N games; ``[N]`` int64 unless said. A list's fields are ``[N, slots]``: ``*_on`` (bool, the
    slot holds an object; live slots first, in the list's order), column, row, ``*_right`` (bool, moving right) and
    the object's timers."""

    sub_x: Tensor
    sub_y: Tensor
    sub_right: Tensor
    """``[N]`` bool: the submarine faces right"""
    oxygen: Tensor
    diver_count: Tensor
    e_spawn_speed: Tensor
    e_spawn_timer: Tensor
    d_spawn_timer: Tensor
    move_speed: Tensor
    ramp_index: Tensor
    shot_timer: Tensor
    surface: Tensor
    """``[N]`` bool: at the surface since the last dive"""
    fb_on: Tensor
    fb_x: Tensor
    fb_y: Tensor
    fb_right: Tensor
    eb_on: Tensor
    eb_x: Tensor
    eb_y: Tensor
    eb_right: Tensor
    fish_on: Tensor
    fish_x: Tensor
    fish_y: Tensor
    fish_right: Tensor
    fish_timer: Tensor
    subs_on: Tensor
    subs_x: Tensor
    subs_y: Tensor
    subs_right: Tensor
    subs_timer: Tensor
    subs_shot: Tensor
    div_on: Tensor
    div_x: Tensor
    div_y: Tensor
    div_right: Tensor
    div_timer: Tensor
    last_action: Tensor
    key: Tensor
    t: Tensor


_LISTS = {"fb": ("on", "x", "y", "right"), "eb": ("on", "x", "y", "right"),
          "fish": ("on", "x", "y", "right", "timer"), "subs": ("on", "x", "y", "right", "timer", "shot"),
          "div": ("on", "x", "y", "right", "timer")}


def _step_x(x: Tensor, right: Tensor) -> Tensor:
    return x + torch.where(right, 1, -1)


def _inside(x: Tensor) -> Tensor:
    return (x >= 0) & (x <= 9)


def _compact(prefix: str, s: dict[str, Tensor]) -> None:
    """Move a list's live slots to the front, keeping their order (in place in ``s``); free slots hold zeros (a
    state has one form)."""
    order = torch.argsort((~s[f"{prefix}_on"]).to(torch.int8), dim=1, stable=True)
    kept = s[f"{prefix}_on"].gather(1, order)
    for name in _LISTS[prefix]:
        value = s[f"{prefix}_{name}"].gather(1, order)
        s[f"{prefix}_{name}"] = torch.where(kept, value, torch.zeros_like(value))


class SeaquestEnv(MinAtarEnv[SeaquestState]):
    """MinAtar's Seaquest (module docstring)."""

    obs_shape = (10, 10, 10)
    minimal_actions = "nlurdf"

    def _sample_initial_state(self, n: int, g: torch.Generator) -> SeaquestState:
        d = self.device
        zeros = torch.zeros(n, dtype=torch.int64, device=d)
        no = torch.zeros(n, dtype=torch.bool, device=d)
        lists = {}
        for prefix, names in _LISTS.items():
            size = {"fb": BULLETS, "div": DIVERS}.get(prefix, ENEMIES)
            for name in names:
                dtype = torch.bool if name in ("on", "right") else torch.int64
                lists[f"{prefix}_{name}"] = torch.zeros(n, size, dtype=dtype, device=d)
        return SeaquestState(sub_x=zeros + 5, sub_y=zeros.clone(), sub_right=no, oxygen=zeros + MAX_OXYGEN,
                             diver_count=zeros.clone(), e_spawn_speed=zeros + INIT_SPAWN_SPEED,
                             e_spawn_timer=zeros + INIT_SPAWN_SPEED, d_spawn_timer=zeros + DIVER_SPAWN_SPEED,
                             move_speed=zeros + INIT_MOVE_INTERVAL, ramp_index=zeros.clone(), shot_timer=zeros.clone(),
                             surface=~no, **lists, last_action=zeros.clone(), key=draw_keys(n, g, d),
                             t=zeros.clone())

    def _transition(self, state: SeaquestState, action: Tensor) -> tuple[SeaquestState, Tensor, Tensor]:
        s = state._asdict()
        a = self.sticky(action, state.last_action, state.key, state.t)
        reward = torch.zeros_like(a)
        terminal = torch.zeros_like(s["surface"])

        # Spawns: an enemy (unless its row holds enemies driving the other way), then a diver.
        spawn = s["e_spawn_timer"] == 0
        u = hash_uniform(state.key, state.t, ENEMY_STREAM, 3)
        right, is_sub, row = u[:, 0] < 0.5, u[:, 1] < 1 / 3, 1 + (u[:, 2] * 8).floor().long()

        def against(p: str) -> Tensor:
            return (s[f"{p}_on"] & (s[f"{p}_y"] == row[:, None]) & (s[f"{p}_right"] != right[:, None])).any(1)

        spawn_ok = spawn & ~against("subs") & ~against("fish")
        x0 = torch.where(right, 0, 9)
        new = {"x": x0, "y": row, "right": right, "timer": s["move_speed"],
               "shot": torch.full_like(x0, ENEMY_SHOT_INTERVAL)}
        for prefix, add in (("subs", spawn_ok & is_sub), ("fish", spawn_ok & ~is_sub)):
            self._add(s, prefix, new, add)
        s["e_spawn_timer"] = torch.where(spawn, s["e_spawn_speed"], s["e_spawn_timer"])
        d_spawn = s["d_spawn_timer"] == 0
        u = hash_uniform(state.key, state.t, DIVER_STREAM, 2)
        right, row = u[:, 0] < 0.5, 1 + (u[:, 1] * 8).floor().long()
        self._add(s, "div", {"x": torch.where(right, 0, 9), "y": row, "right": right,
                             "timer": torch.full_like(row, DIVER_MOVE_INTERVAL)}, d_spawn)
        s["d_spawn_timer"] = torch.where(d_spawn, DIVER_SPAWN_SPEED, s["d_spawn_timer"])

        # The submarine.
        fire = (a == _FIRE) & (s["shot_timer"] == 0)
        self._add(s, "fb", {"x": s["sub_x"], "y": s["sub_y"], "right": s["sub_right"]}, fire)
        s["shot_timer"] = torch.where(fire, SHOT_COOL_DOWN, s["shot_timer"])
        sx = torch.where(a == _LEFT, (s["sub_x"] - 1).clamp(min=0),
                         torch.where(a == _RIGHT, (s["sub_x"] + 1).clamp(max=9), s["sub_x"]))
        s["sub_right"] = torch.where(a == _LEFT, False, torch.where(a == _RIGHT, True, s["sub_right"]))
        sy = torch.where(a == _UP, (s["sub_y"] - 1).clamp(min=0),
                         torch.where(a == _DOWN, (s["sub_y"] + 1).clamp(max=8), s["sub_y"]))
        s["sub_x"], s["sub_y"] = sx, sy

        def at_sub(x: Tensor, y: Tensor) -> Tensor:
            """Where ``(x, y)`` (``[N]`` or ``[N, K]``) is the submarine's cell."""
            shape = (-1,) + (1,) * (x.dim() - 1)
            return (x == sx.view(shape)) & (y == sy.view(shape))

        def first(match: Tensor) -> Tensor:
            """``[N, K]`` bool: the first True of each row (the list's first match)."""
            return match & (match.cumsum(1) == 1)

        # The submarine's bullets, last to first: each moves, then hits the first fish, else the first enemy
        # submarine, in its cell.
        for i in reversed(range(BULLETS)):
            on = s["fb_on"][:, i]
            x = torch.where(on, _step_x(s["fb_x"][:, i], s["fb_right"][:, i]), s["fb_x"][:, i])
            s["fb_x"] = s["fb_x"].clone()
            s["fb_x"][:, i] = x
            on = on & _inside(x)
            y = s["fb_y"][:, i]
            for prefix in ("fish", "subs"):
                hit = first(s[f"{prefix}_on"] & (s[f"{prefix}_x"] == x[:, None]) & (s[f"{prefix}_y"] == y[:, None])
                            & on[:, None])
                struck = hit.any(1)
                s[f"{prefix}_on"] = s[f"{prefix}_on"] & ~hit
                reward = reward + struck.long()
                on = on & ~struck
            s["fb_on"] = s["fb_on"].clone()
            s["fb_on"][:, i] = on

        # Divers, last to first: picked up where the submarine is (six at most), else moving every 6 steps.
        count = s["diver_count"]
        for i in reversed(range(DIVERS)):
            on, x, y, timer = s["div_on"][:, i], s["div_x"][:, i], s["div_y"][:, i], s["div_timer"][:, i]
            take = on & at_sub(x, y) & (count < 6)
            moves = on & ~take & (timer == 0)
            x = torch.where(moves, _step_x(x, s["div_right"][:, i]), x)
            gone = moves & ~_inside(x)
            take_after = moves & ~gone & at_sub(x, y) & (count + take.long() < 6)
            count = count + take.long() + take_after.long()
            timer = torch.where(moves, DIVER_MOVE_INTERVAL, torch.where(on & ~take, timer - 1, timer))
            self._set(s, "div", i, on=on & ~take & ~gone & ~take_after, x=x, timer=timer)
        s["diver_count"] = count

        # Enemy submarines: touching the submarine ends the game; every move_speed + 1 steps they move, and one that
        # lands on a bullet of the submarine's is shot; every 11 steps each fires (even one removed this step).
        reward, terminal, fires = self._enemies(s, "subs", at_sub, reward, terminal)
        x, y, right = s["subs_x"], s["subs_y"], s["subs_right"]
        self._add_many(s, "eb", {"x": x, "y": y, "right": right}, fires)
        s["subs_shot"] = torch.where(fires, ENEMY_SHOT_INTERVAL, s["subs_shot"] - s["subs_was_on"].long())
        del s["subs_was_on"]

        # Enemy bullets (no two meet, so all at once): on the submarine, or moving onto it, end the game.
        on = s["eb_on"]
        terminal = terminal | (on & (s["eb_x"] == sx[:, None]) & (s["eb_y"] == sy[:, None])).any(1)
        x = torch.where(on, _step_x(s["eb_x"], s["eb_right"]), s["eb_x"])
        on = on & _inside(x)
        terminal = terminal | (on & (x == sx[:, None]) & (s["eb_y"] == sy[:, None])).any(1)
        s["eb_on"], s["eb_x"] = on, x

        # Fish: as the enemy submarines, without firing.
        reward, terminal, _ = self._enemies(s, "fish", at_sub, reward, terminal)
        del s["fish_was_on"]

        # Timers, oxygen and surfacing.
        for name in ("e_spawn_timer", "d_spawn_timer", "shot_timer"):
            s[name] = s[name] - (s[name] > 0).long()
        terminal = terminal | (s["oxygen"] <= 0)
        under = sy > 0
        arrive = ~under & ~s["surface"]
        terminal = terminal | (arrive & (s["diver_count"] == 0))
        surfacing = arrive & (s["diver_count"] != 0)
        full = surfacing & (s["diver_count"] == 6)
        reward = reward + torch.where(full, s["oxygen"] * 10 // MAX_OXYGEN, 0)
        s["diver_count"] = torch.where(full, 0, s["diver_count"]) - surfacing.long()
        s["oxygen"] = torch.where(under, s["oxygen"] - 1, torch.where(surfacing, MAX_OXYGEN, s["oxygen"]))
        s["surface"] = torch.where(under, False, s["surface"] | surfacing)
        if self.params.difficulty_ramping:
            ramp = surfacing & ((s["e_spawn_speed"] > 1) | (s["move_speed"] > 2))
            s["move_speed"] = s["move_speed"] - (ramp & (s["move_speed"] > 2) & (s["ramp_index"] % 2 == 1)).long()
            s["e_spawn_speed"] = s["e_spawn_speed"] - (ramp & (s["e_spawn_speed"] > 1)).long()
            s["ramp_index"] = s["ramp_index"] + ramp.long()
        for prefix in _LISTS:
            _compact(prefix, s)
        s["last_action"], s["t"] = a, state.t + 1
        return SeaquestState(**s), reward.float(), terminal

    @staticmethod
    def _enemies(s: dict[str, Tensor], prefix: str, at_sub, reward: Tensor,
                 terminal: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """One step of list ``prefix`` (fish or enemy submarines), in place in ``s``: ``(reward, terminal, due)``
        with ``due`` ``[N, E]`` the live slots whose shot timer is 0 (``s[prefix + "_was_on"]`` keeps the slots
        live before the step).

        minatar walks the list last to first and a moved enemy takes the first listed bullet in its cell that is
        still there; so within a cell the enemies, last slot first, take the cell's bullets in list order, one
        each: the enemy of rank r (landed enemies of that cell in higher slots) takes the bullet of rank r (live
        bullets of that cell listed before it)."""
        on, x, y = s[f"{prefix}_on"], s[f"{prefix}_x"], s[f"{prefix}_y"]
        timer = s[f"{prefix}_timer"]
        terminal = terminal | (on & at_sub(x, y)).any(1)
        moves = on & (timer == 0)
        x = torch.where(moves, _step_x(x, s[f"{prefix}_right"]), x)
        gone = moves & ~_inside(x)
        landed = moves & ~gone
        caught = landed & at_sub(x, y)
        terminal = terminal | caught.any(1)
        hunting = landed & ~caught
        b_on = s["fb_on"]
        match = (hunting[:, :, None] & b_on[:, None, :] & (x[:, :, None] == s["fb_x"][:, None, :])
                 & (y[:, :, None] == s["fb_y"][:, None, :]))  # [N, E, B]: enemy e is in bullet j's cell
        rank = match.flip(1).cumsum(1).flip(1) - match.long()  # the cell's enemies in higher slots
        b_cell = s["fb_y"] * 10 + s["fb_x"]
        earlier = torch.ones(b_on.shape[1], b_on.shape[1], dtype=torch.bool, device=on.device).tril(-1)
        b_rank = (b_on[:, :, None] & b_on[:, None, :] & (b_cell[:, :, None] == b_cell[:, None, :]) & earlier).sum(-1)
        take = match & (rank == b_rank[:, None, :])
        struck = take.any(-1)
        s["fb_on"] = b_on & ~take.any(1)
        reward = reward + struck.sum(1)
        s[f"{prefix}_timer"] = torch.where(moves, s["move_speed"][:, None], torch.where(on, timer - 1, timer))
        s[f"{prefix}_x"], s[f"{prefix}_on"], s[f"{prefix}_was_on"] = x, on & ~gone & ~struck, on
        due = on & (s[f"{prefix}_shot"] == 0) if f"{prefix}_shot" in s else torch.zeros_like(on)
        return reward, terminal, due

    @staticmethod
    def _add_many(s: dict[str, Tensor], prefix: str, new: dict[str, Tensor], add: Tensor) -> None:
        """Append the objects of the slots where ``add`` (``[N, E]``; ``new``: ``[N, E]`` values) to list
        ``prefix``, last slot first (as minatar's walk appends them), in place in ``s``."""
        on = s[f"{prefix}_on"]
        size = on.shape[1]
        after = add.flip(1).cumsum(1).flip(1) - add.long()  # the adding slots after each one
        # Each added object's slot; the others (and any past the end: the capacities make it unreachable) go to
        # a spare column, dropped.
        target = torch.where(add, on.sum(1, keepdim=True) + after, size).clamp(max=size)

        def put(column: Tensor, value: Tensor) -> Tensor:
            spare = torch.cat([column, column[:, :1]], 1)
            return spare.scatter(1, target, value.to(column.dtype))[:, :size]

        s[f"{prefix}_on"] = put(on, add)
        for name in _LISTS[prefix][1:]:  # the list's own fields of ``new``
            s[f"{prefix}_{name}"] = put(s[f"{prefix}_{name}"], new[name])

    @classmethod
    def _add(cls, s: dict[str, Tensor], prefix: str, new: dict[str, Tensor], add: Tensor) -> None:
        """Append one object (``new``: ``[N]`` values) to list ``prefix`` of the rows where ``add``, in place."""
        cls._add_many(s, prefix, {k: v[:, None] for k, v in new.items()}, add[:, None])

    @staticmethod
    def _set(s: dict[str, Tensor], prefix: str, i: int, **values: Tensor) -> None:
        """Write slot ``i`` of list ``prefix``'s fields (in place in ``s``, on copies)."""
        for name, value in values.items():
            column = s[f"{prefix}_{name}"].clone()
            column[:, i] = value
            s[f"{prefix}_{name}"] = column

    def _observe(self, s: SeaquestState) -> Tensor:
        n = s.sub_x.shape[0]
        d = self.device

        def grid(on: Tensor, x: Tensor, y: Tensor) -> Tensor:
            """``[N, 10, 10]``: the cells ``(y, x)`` of the slots where ``on`` (and x inside the grid)."""
            on = on & _inside(x)
            flat = torch.where(on, y * 10 + x, 0)
            count = torch.zeros(n, 100, dtype=torch.int32, device=d).scatter_add_(1, flat, on.int())
            return count.gt(0).view(n, 10, 10)

        def trail(prefix: str) -> Tensor:
            on, x = getattr(s, f"{prefix}_on"), getattr(s, f"{prefix}_x")
            return grid(on, x - torch.where(getattr(s, f"{prefix}_right"), 1, -1), getattr(s, f"{prefix}_y"))

        back = s.sub_x - torch.where(s.sub_right, 1, -1)
        column = torch.arange(10, device=d)
        bottom = torch.zeros(n, 10, 10, dtype=torch.bool, device=d)
        oxygen = bottom.clone()
        oxygen[:, 9] = column < (s.oxygen.clamp(min=0) * 10 // MAX_OXYGEN)[:, None]
        divers = bottom.clone()
        divers[:, 9] = (column >= (9 - s.diver_count)[:, None]) & (column < 9)
        return torch.stack([cells(s.sub_y, s.sub_x), cells(s.sub_y, back.remainder(10)),
                            grid(s.fb_on, s.fb_x, s.fb_y), trail("fish") | trail("subs") | trail("div"),
                            grid(s.eb_on, s.eb_x, s.eb_y), grid(s.fish_on, s.fish_x, s.fish_y),
                            grid(s.subs_on, s.subs_x, s.subs_y), oxygen, divers,
                            grid(s.div_on, s.div_x, s.div_y)], -1)
