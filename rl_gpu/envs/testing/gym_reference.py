"""Gymnasium 1.x reference environments for parity checks of the classic-control tensor environments.

A Gymnasium environment holds one state; a :class:`~rl_gpu.envs.base.TensorEnv` holds N. These helpers copy
one row of our state (inner state and episode step) into a ``gymnasium.make`` environment and read
Gymnasium's state back, so both can be stepped from the same point with the same actions. Requires
``gymnasium`` (imported here, not by the environments).

Gymnasium's ``TimeLimit`` sets ``truncated`` whenever the step limit is reached, even on a terminating step;
our contract never sets both, so compare ``truncated`` against ``gym_truncated and not gym_terminated``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium.wrappers import TimeLimit

from rl_gpu.envs.base import EnvState, TensorEnv
from rl_gpu.envs.testing.drive import inner_row


@dataclass(frozen=True)
class _Adapter:
    """How one id's inner state maps to its Gymnasium environment's ``state`` attribute."""

    to_gym: Callable[[Sequence[Any]], Any]
    """Our inner row (Python scalars, in field order) → the value of ``env.unwrapped.state``."""
    from_gym: Callable[[Any], tuple]
    """``env.unwrapped.state`` → our inner row (Python scalars, in field order)."""
    episode_attrs: tuple[tuple[str, Any], ...] = ()
    """Per-episode attributes Gymnasium's ``reset`` sets besides the state, with their reset values."""


def _float64(row: Sequence[Any]) -> np.ndarray:
    return np.array([float(v) for v in row], dtype=np.float64)


def _floats(state: Any) -> tuple[float, ...]:
    return tuple(float(v) for v in np.asarray(state, dtype=np.float64))


def _continuous_car_to_gym(row: Sequence[Any]) -> np.ndarray:
    position, velocity, stepped = row
    return np.array([float(position), float(velocity)], dtype=np.float32 if stepped else np.float64)


def _continuous_car_from_gym(state: np.ndarray) -> tuple:
    return (*_floats(state), state.dtype == np.float32)


_ADAPTERS: dict[str, _Adapter] = {
    # CartPole reward after termination depends on steps_beyond_terminated; reset it with every injection.
    "CartPole-v1": _Adapter(_float64, _floats, (("steps_beyond_terminated", None),)),
    "Acrobot-v1": _Adapter(_float64, _floats),
    "MountainCar-v0": _Adapter(_float64, _floats),
    # Gymnasium holds this state in float64 after reset and in float32 after a step (see mountain_car.py).
    "MountainCarContinuous-v0": _Adapter(_continuous_car_to_gym, _continuous_car_from_gym),
    "Pendulum-v1": _Adapter(_float64, _floats, (("last_u", None),)),
}

REFERENCE_IDS: tuple[str, ...] = tuple(_ADAPTERS)
"""The ids that have a Gymnasium reference."""


def _adapter(env_id: str) -> _Adapter:
    if env_id not in _ADAPTERS:
        raise ValueError(f"no Gymnasium reference for {env_id!r}; available: {', '.join(REFERENCE_IDS)}")
    return _ADAPTERS[env_id]


def make_reference(env_id: str, seed: int | None = None, **kwargs: Any) -> gymnasium.Env:
    """``gymnasium.make(env_id, **kwargs)`` (without the passive checker), reset so it may be stepped."""
    _adapter(env_id)
    env = gymnasium.make(env_id, disable_env_checker=True, **kwargs)
    env.reset(seed=seed)
    return env


def time_limit(gym_env: gymnasium.Env) -> TimeLimit:
    """The ``TimeLimit`` wrapper around ``gym_env`` (its ``_elapsed_steps`` is the episode step)."""
    env = gym_env
    while not isinstance(env, TimeLimit):
        if not isinstance(env, gymnasium.Wrapper):
            raise ValueError(f"{gym_env} has no TimeLimit wrapper")
        env = env.env
    return env


def inner_row_scalars(env: TensorEnv, row: int) -> tuple:
    """Row ``row`` of ``env``'s current inner state as Python scalars, in field order: the form
    :func:`set_gym_state` takes and :func:`get_gym_state` returns (:func:`~rl_gpu.envs.testing.inner_row`
    gives the same row as tensors)."""
    return tuple(t.item() for t in inner_row(env.state.inner, row))


def set_gym_state(gym_env: gymnasium.Env, env_id: str, row: Sequence[Any], episode_step: int = 0) -> None:
    """Put Gymnasium's ``gym_env`` (an ``env_id`` environment) in the state ``row`` (our inner fields, in
    order) at step ``episode_step`` of its episode, as if it had been reset there and stepped."""
    adapter = _adapter(env_id)
    unwrapped = gym_env.unwrapped
    unwrapped.state = adapter.to_gym(row)
    for name, value in adapter.episode_attrs:
        setattr(unwrapped, name, value)
    time_limit(gym_env)._elapsed_steps = int(episode_step)


def get_gym_state(gym_env: gymnasium.Env, env_id: str) -> tuple[tuple, int]:
    """Gymnasium's state as our inner row (Python scalars, in field order) and its episode step."""
    return _adapter(env_id).from_gym(gym_env.unwrapped.state), int(time_limit(gym_env)._elapsed_steps)


def copy_row_to_gym(env: TensorEnv, row: int, gym_env: gymnasium.Env, env_id: str) -> None:
    """Copy row ``row`` of ``env`` (inner state and episode step) into ``gym_env``."""
    set_gym_state(gym_env, env_id, inner_row_scalars(env, row), int(env.state.episode_step[row]))


def copy_gym_to_rows(
    env: TensorEnv, rows: Sequence[int], gym_envs: Sequence[gymnasium.Env], env_id: str
) -> None:
    """Set ``env``'s rows ``rows`` to the states and episode steps of ``gym_envs`` (one per row); their
    episode returns restart at zero."""
    states = [get_gym_state(g, env_id) for g in gym_envs]
    template = env.state.inner
    fields = [
        torch.tensor([row[i] for row, _ in states], dtype=t.dtype, device=env.device)
        for i, t in enumerate(template)
    ]
    index = torch.as_tensor(list(rows), dtype=torch.long, device=env.device)
    env.set_rows(index, type(template)(*fields))
    episode_step = env.state.episode_step.clone()
    episode_step[index] = torch.tensor([step for _, step in states], dtype=torch.long, device=env.device)
    env.set_state(EnvState(env.state.inner, episode_step, env.state.episode_return, env.state.done))
