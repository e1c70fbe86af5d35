"""``minatar``'s own games as the scalar references of :mod:`rl_gpu.envs.minatar`, for
:func:`~rl_gpu.envs.testing.check_reference_parity`. Requires ``minatar`` (``pip install rl-gpu[games]``; imported
here, not by the environments).

A reference state is one row of the environment's inner state (a dict of plain values and numpy grids). It is
written into a ``minatar.Environment``'s game object field by field; the game's random draws are fed ours: the
sticky-action draw of each step is the row's :func:`~rl_gpu.envs.random_draws.hash_uniform` number, handed to
``minatar`` in place of its ``numpy`` generator, so both sides take the same action and the comparison is exact::

    from rl_gpu.envs.minatar.breakout import BreakoutEnv
    from rl_gpu.envs.testing import check_reference_parity
    from rl_gpu.envs.testing.minatar_reference import reference_for

    check_reference_parity(BreakoutEnv(256, seed=0), *reference_for(BreakoutEnv(1)))
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rl_gpu.envs.minatar.common import ACTIONS, STICKY_STREAM, MinAtarEnv
from rl_gpu.envs.random_draws import hash_uniform


def _environment_class() -> type:
    """``minatar.Environment``, imported on first use: minatar loads matplotlib and seaborn for its rendering
    (seconds), and warns at import when seaborn is missing (quieted here)."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        from minatar import Environment
    finally:
        root.setLevel(level)
    return Environment


GAMES = {"BreakoutEnv": "breakout", "SpaceInvadersEnv": "space_invaders", "FreewayEnv": "freeway",
         "AsterixEnv": "asterix", "SeaquestEnv": "seaquest"}
"""Our class name -> minatar's game module."""

# Our inner-state field -> the minatar game attribute that holds it (grids are float arrays there).
FIELDS = {
    "breakout": {"ball_x": "ball_x", "ball_y": "ball_y", "ball_dir": "ball_dir", "pos": "pos", "last_x": "last_x",
                 "last_y": "last_y", "bricks": "brick_map", "strike": "strike"},
    "space_invaders": {"pos": "pos", "f_bullets": "f_bullet_map", "e_bullets": "e_bullet_map",
                       "aliens": "alien_map", "alien_dir": "alien_dir", "move_interval": "enemy_move_interval",
                       "move_timer": "alien_move_timer", "shot_timer": "alien_shot_timer",
                       "ramp_index": "ramp_index", "cool_down": "shot_timer"},
    "freeway": {"pos": "pos", "move_timer": "move_timer", "terminate_timer": "terminate_timer"},
    "asterix": {"player_x": "player_x", "player_y": "player_y", "spawn_speed": "spawn_speed",
                "spawn_timer": "spawn_timer", "move_speed": "move_speed", "move_timer": "move_timer",
                "ramp_timer": "ramp_timer", "ramp_index": "ramp_index"},
    "seaquest": {"sub_x": "sub_x", "sub_y": "sub_y", "sub_right": "sub_or", "oxygen": "oxygen",
                 "diver_count": "diver_count", "e_spawn_speed": "e_spawn_speed", "e_spawn_timer": "e_spawn_timer",
                 "d_spawn_timer": "d_spawn_timer", "move_speed": "move_speed", "ramp_index": "ramp_index",
                 "shot_timer": "shot_timer", "surface": "surface"},
}
THINGS = ("alive", "thing_x", "rightward", "gold")
"""Asterix's lanes: ours as four ``[8]`` arrays, minatar's as a list of ``None`` or ``[x, row, rightward, gold]``."""
CARS = ("car_x", "car_timer", "car_speed")
"""Freeway's cars: ours as three ``[8]`` arrays, minatar's as a list of ``[x, row, timer, speed]``."""
SEAQUEST_LISTS = {"fb": ("f_bullets", ("x", "y", "right")), "eb": ("e_bullets", ("x", "y", "right")),
                  "fish": ("e_fish", ("x", "y", "right", "timer")),
                  "subs": ("e_subs", ("x", "y", "right", "timer", "shot")),
                  "div": ("divers", ("x", "y", "right", "timer"))}
"""Seaquest's lists: ours as slot arrays (``PREFIX_on`` and a field per item entry, live slots first in order),
minatar's as lists of ``[x, row, rightward, timers...]``."""


_M32 = 0xFFFFFFFF


def _mix32(x: int) -> int:
    """lowbias32 on one Python int in ``[0, 2**32)``."""
    x ^= x >> 16
    x = (x * 0x7FEB352D) & _M32
    x ^= x >> 15
    x = (x * 0x846CA68B) & _M32
    return x ^ (x >> 16)


def row_uniforms(key: int, counter: int, stream: int, size: int) -> np.ndarray:
    """``[size]`` float64: :func:`~rl_gpu.envs.random_draws.hash_uniform` of one row, in plain integers (the
    reference steps one row at a time, where a tensor call per draw costs far more than the hash; tested equal)."""
    k, c = int(key) & _M32, int(counter) & _M32  # Python ints: a numpy int64 product would overflow
    lanes = range(64 * stream, 64 * stream + size)
    return np.array([_mix32(_mix32(k ^ _mix32((((c * 0x9E3779B1) & _M32) + lane) & _M32)) ^ 0x5BD1E995) / 2.0**32
                     for lane in lanes])


class _Draws:
    """Stands in for minatar's ``numpy`` generator for one step: ``rand()`` is our sticky-action draw."""

    def __init__(self, u: float) -> None:
        self.u = u

    def rand(self) -> float:
        return self.u


class _GameDraws:
    """Stands in for a game's own ``numpy`` generator for one step, giving it our draws of that step: Freeway's
    ``randint(1, 6, 8)`` speeds and ``rand(8)`` directions (its car stream), Asterix's two ``rand()`` (side,
    treasure) and ``randint(free lanes)`` (its spawn stream)."""

    def __init__(self, game: str, key: int, t: int) -> None:
        from rl_gpu.envs.minatar.asterix import SPAWN_STREAM
        from rl_gpu.envs.minatar.freeway import CAR_STREAM

        stream, size = {"freeway": (CAR_STREAM, 16), "asterix": (SPAWN_STREAM, 3)}.get(game, (1, 1))
        self.u = row_uniforms(key, t, stream, size)
        self.game, self.calls = game, 0
        self.queue: list[float] = []
        """Seaquest: the step's draws in the order the game asks for them (see :meth:`seaquest`)."""

    @classmethod
    def seaquest(cls, key: int, t: int, enemy_spawns: bool) -> _GameDraws:
        """Seaquest's draws of a step: an enemy's spawn (side, submarine, row) when it spawns, then a diver's (side,
        row); each ``randint(1, 9)`` is ``1 + floor(8 u)`` of its uniform number."""
        from rl_gpu.envs.minatar.seaquest import DIVER_STREAM, ENEMY_STREAM

        draws = cls("seaquest", key, t)
        enemy = row_uniforms(key, t, ENEMY_STREAM, 3).tolist() if enemy_spawns else []
        draws.queue = [*enemy, *row_uniforms(key, t, DIVER_STREAM, 2).tolist()]
        return draws

    def randint(self, low: int, high: int | None = None, size: int | None = None) -> Any:
        if self.game == "freeway":
            return 1 + np.minimum(np.floor(self.u[:8] * 5), 4).astype(int)
        if self.game == "seaquest":
            return low + int(np.floor(self.queue.pop(0) * (high - low)))
        return int(np.floor(self.u[2] * low))

    def rand(self, size: int | None = None) -> Any:
        if self.game == "seaquest":
            return self.queue.pop(0)
        if size is not None:
            return self.u[8:].copy()
        self.calls += 1
        return float(self.u[self.calls - 1])


class MinAtarReference:
    """One ``minatar`` game behind the :class:`~rl_gpu.envs.testing.ScalarReference` protocol."""

    current_player = 0

    def __init__(self, game: str, minimal_actions: str, sticky_action_prob: float, ramping: bool) -> None:
        self.game, self.minimal_actions = game, minimal_actions
        self.env = _environment_class()(game, sticky_action_prob=sticky_action_prob, difficulty_ramping=ramping)
        self.key, self.t = 0, 0
        self._draws: tuple[int, int, np.ndarray] | None = None
        """``(key, first counter, draws)``: a block of the row's sticky-action draws, computed at once."""

    def set_state(self, state: dict[str, Any]) -> None:
        g = self.env.env
        for ours, theirs in FIELDS[self.game].items():
            value = state[ours]
            setattr(g, theirs, value.astype(float) if isinstance(value, np.ndarray) else value)
        if self.game == "freeway":
            g.cars = [[int(state["car_x"][i]), i + 1, int(state["car_timer"][i]), int(state["car_speed"][i])]
                      for i in range(8)]
        if self.game == "asterix":
            g.entities = [[int(state["thing_x"][i]), i + 1, bool(state["rightward"][i]), bool(state["gold"][i])]
                          if state["alive"][i] else None for i in range(8)]
        if self.game == "seaquest":
            for prefix, (attr, names) in SEAQUEST_LISTS.items():
                on = state[f"{prefix}_on"]
                setattr(g, attr, [[_plain(state[f"{prefix}_{name}"][i]) for name in names]
                                  for i in range(len(on)) if on[i]])
        g.terminal = False
        self.env.last_action = state["last_action"]
        self.key, self.t = state["key"], state["t"]

    def get_state(self) -> dict[str, Any]:
        g = self.env.env
        state = {ours: getattr(g, theirs) for ours, theirs in FIELDS[self.game].items()}
        state = {k: v.astype(bool) if isinstance(v, np.ndarray) else v for k, v in state.items()}
        if self.game == "freeway":
            state.update({name: np.array([car[i] for car in g.cars]) for name, i in zip(CARS, (0, 2, 3))})
        if self.game == "asterix":
            things = [(True, e[0], e[2], e[3]) if e is not None else (False, 0, False, False) for e in g.entities]
            state.update({name: np.array([thing[i] for thing in things]) for i, name in enumerate(THINGS)})
        if self.game == "seaquest":
            for prefix, (attr, names) in SEAQUEST_LISTS.items():
                items = getattr(g, attr)
                size = {"fb": 3, "div": 4}.get(prefix, 32)
                state[f"{prefix}_on"] = np.arange(size) < len(items)
                for j, name in enumerate(names):
                    column = np.zeros(size, dtype=bool if name == "right" else np.int64)
                    column[:len(items)] = [item[j] for item in items]
                    state[f"{prefix}_{name}"] = column
        return {**state, "last_action": self.env.last_action, "key": self.key, "t": self.t}

    def _draw(self) -> float:
        """The row's sticky-action draw at its current step (:func:`hash_uniform`, 256 steps at a time)."""
        cached = self._draws
        if cached is None or cached[0] != self.key or not 0 <= self.t - cached[1] < len(cached[2]):
            counters = torch.arange(self.t, self.t + 256)
            draws = hash_uniform(torch.full((256,), self.key), counters, STICKY_STREAM, 1)[:, 0].numpy()
            cached = self._draws = (self.key, self.t, draws)
        return float(cached[2][self.t - cached[1]])

    def step(self, action: int) -> tuple[float, bool]:
        self.env.random = _Draws(self._draw())
        g = self.env.env
        g.random = (_GameDraws.seaquest(self.key, self.t, g.e_spawn_timer == 0) if self.game == "seaquest"
                    else _GameDraws(self.game, self.key, self.t))
        reward, terminal = self.env.act(ACTIONS.index(self.minimal_actions[action]))
        self.t += 1
        return float(reward), bool(terminal)

    def observation(self) -> np.ndarray:
        return self.env.state()

    def legal_actions(self) -> list[bool]:
        return [True] * len(self.minimal_actions)


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value minatar's lists hold."""
    return bool(value) if isinstance(value, (bool, np.bool_)) else int(value)


def to_reference(row: Any) -> dict[str, Any]:
    """One row of a MinAtar environment's inner state as a reference state."""
    out = {}
    for name, value in row._asdict().items():
        value = value.cpu()
        out[name] = value.numpy().copy() if value.dim() else (bool(value) if value.dtype == torch.bool else int(value))
    return out


def reference_for(env: MinAtarEnv) -> tuple[Callable[[], MinAtarReference], Callable[[Any], dict[str, Any]]]:
    """``(reference_factory, to_reference)`` for ``env``'s game with its parameters."""
    game = GAMES[type(env).__name__]
    p = env.params
    return (lambda: MinAtarReference(game, env.minimal_actions, p.sticky_action_prob, p.difficulty_ramping),
            to_reference)
