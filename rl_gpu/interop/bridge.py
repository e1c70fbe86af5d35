"""The host side of a batch seen from numpy-speaking libraries (Gymnasium, Stable-Baselines3): spaces, actions to
the device, one packed copy of each step's results back."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from rl_gpu.core.types import VecEnv


def single_spaces(env: VecEnv) -> tuple[spaces.Space, spaces.Space]:
    """``(observation space, action space)`` of one row of ``env``.

    Observations: a ``Box`` of ``spec.obs_shape`` and the policy group's dtype (float32 unless the environment
    declares uint8 or bool, e.g. pixels), bounded by ``spec.obs_low`` / ``spec.obs_high`` when the environment has
    them, else unbounded (for integer dtypes: the dtype's range). Actions: ``Discrete(spec.num_actions)``, or a float32 ``Box`` of
    ``spec.action_shape`` bounded by ``spec.action_low`` / ``spec.action_high`` (unbounded where absent).
    """
    spec = env.spec
    obs_shape = tuple(int(d) for d in spec.obs_shape)
    obs_size = math.prod(obs_shape)
    dtype = obs_numpy_dtype(env)
    if np.issubdtype(dtype, np.floating):
        wide = (-np.inf, np.inf)
    elif dtype == np.bool_:
        wide = (0, 1)
    else:
        wide = (np.iinfo(dtype).min, np.iinfo(dtype).max)
    low = np.asarray(spec.obs_low or (wide[0],) * obs_size, dtype=dtype).reshape(obs_shape)
    high = np.asarray(spec.obs_high or (wide[1],) * obs_size, dtype=dtype).reshape(obs_shape)
    observation_space = spaces.Box(low, high, obs_shape, dtype=dtype)
    if spec.is_continuous:
        shape = tuple(int(d) for d in spec.action_shape)
        size = math.prod(shape)
        a_low = np.asarray(spec.action_low or (-np.inf,) * size, dtype=np.float32).reshape(shape)
        a_high = np.asarray(spec.action_high or (np.inf,) * size, dtype=np.float32).reshape(shape)
        action_space: spaces.Space = spaces.Box(a_low, a_high, shape, dtype=np.float32)
    else:
        action_space = spaces.Discrete(int(spec.num_actions))
    return observation_space, action_space


def obs_numpy_dtype(env: VecEnv) -> np.dtype:
    """The numpy dtype of the policy group's observations (float32 unless the spec declares another)."""
    return np.dtype(str(env.spec.obs_dtype()).removeprefix("torch."))


class HostBridge:
    """The host side of a batch: actions to the device, one packed copy of each step's results back."""

    def __init__(self, env: VecEnv) -> None:
        if env.spec.num_players != 1:
            raise ValueError(f"{type(env).__name__} has {env.num_players} players: only single-player "
                             "environments can be exposed as Gymnasium or SB3 vector environments")
        if env.spec.num_agents != 1:
            raise ValueError(f"{type(env).__name__} has {env.spec.num_agents} agents acting at once: only "
                             "single-agent environments can be exposed as Gymnasium or SB3 vector environments")
        self.env = env
        self.spec = env.spec
        self.obs_shape = tuple(int(d) for d in self.spec.obs_shape)
        self.obs_size = math.prod(self.obs_shape)
        self.observation_space, self.action_space = single_spaces(env)
        self.obs_dtype = obs_numpy_dtype(env)

    def to_device(self, actions: Any) -> torch.Tensor:
        env = self.env
        if self.spec.is_continuous:
            array = np.asarray(actions, dtype=np.float32).reshape(env.num_envs, *self.spec.action_shape)
            return torch.from_numpy(array).to(env.device)
        array = np.asarray(actions).reshape(env.num_envs).astype(np.int64)
        return torch.from_numpy(array).to(env.device)

    def to_host(self, step: Any) -> dict[str, np.ndarray]:
        """``obs``, ``final_obs`` (the observation space's dtype), ``reward`` (float64), ``terminated``, ``truncated`` (bool),
        ``episode_return``, ``episode_length`` and, for discrete actions, ``action_mask``."""
        n, o = self.env.num_envs, self.obs_size
        columns = (step.reward, step.terminated, step.truncated, step.episode_return, step.episode_length)
        fields = [step.obs.reshape(n, o), step.final_obs.reshape(n, o), *(c.reshape(n, 1) for c in columns)]
        if not self.spec.is_continuous:
            fields.append(step.action_mask)
        host = torch.cat([f.float() for f in fields], dim=1).cpu().numpy()
        out = {
            # uint8 and bool values are exact in the float32 transfer.
            "obs": host[:, :o].reshape(n, *self.obs_shape).astype(self.obs_dtype),
            "final_obs": host[:, o:2 * o].reshape(n, *self.obs_shape).astype(self.obs_dtype),
            "reward": host[:, 2 * o].astype(np.float64),
            "terminated": host[:, 2 * o + 1] > 0.5,
            "truncated": host[:, 2 * o + 2] > 0.5,
            "episode_return": host[:, 2 * o + 3].astype(np.float64),
            "episode_length": host[:, 2 * o + 4].astype(np.int64),
        }
        if not self.spec.is_continuous:
            out["action_mask"] = host[:, 2 * o + 5:] > 0.5
        return out

    def reset(
        self, seed: int | list[int | None] | None, options: dict[str, Any] | None
    ) -> dict[str, np.ndarray]:
        if isinstance(seed, (list, tuple)):
            # One stream seeds the whole batch: its first seed stands for all of them.
            seed = next((s for s in seed if s is not None), None)
        mask = (options or {}).get("reset_mask")
        if mask is not None:
            step = self.env.reset_rows(torch.as_tensor(np.asarray(mask, dtype=bool), device=self.env.device))
        else:
            step = self.env.reset(seed=seed)
        return self.to_host(step)
