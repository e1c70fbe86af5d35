"""rl_gpu environments seen from outside: a Gymnasium ``VectorEnv`` (:func:`to_gymnasium`) and a
Stable-Baselines3 ``VecEnv`` (:func:`to_sb3`), numpy in and out.

Both keep rl_gpu's same-step auto-reset: the observation returned for a finished row is already the next
episode's first, and the one it finished in is in the infos (Gymnasium: ``infos["final_obs"]``, an object
array with ``infos["_final_obs"]`` marking the rows; SB3: ``infos[i]["terminal_observation"]``). Each step
costs one host-to-device copy of the actions and one device-to-host copy of everything the step returns.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space


def single_spaces(env: Any) -> tuple[spaces.Space, spaces.Space]:
    """``(observation space, action space)`` of one row of ``env``.

    Observations: a float32 ``Box`` of ``env.obs_shape``, bounded by ``env.obs_low`` / ``env.obs_high`` when
    the environment has them, else unbounded. Actions: ``Discrete(env.num_actions)``, or a float32 ``Box`` of
    ``env.action_shape`` bounded by ``env.action_low`` / ``env.action_high`` (unbounded where absent).
    """
    obs_shape = tuple(int(d) for d in env.obs_shape)
    obs_size = math.prod(obs_shape)
    low = getattr(env, "obs_low", None) or (-np.inf,) * obs_size
    high = getattr(env, "obs_high", None) or (np.inf,) * obs_size
    low = np.asarray(low, dtype=np.float32).reshape(obs_shape)
    high = np.asarray(high, dtype=np.float32).reshape(obs_shape)
    observation_space = spaces.Box(low, high, obs_shape, dtype=np.float32)
    if env.is_continuous:
        shape = tuple(int(d) for d in env.action_shape)
        size = math.prod(shape)
        a_low = np.asarray(env.action_low or (-np.inf,) * size, dtype=np.float32).reshape(shape)
        a_high = np.asarray(env.action_high or (np.inf,) * size, dtype=np.float32).reshape(shape)
        action_space: spaces.Space = spaces.Box(a_low, a_high, shape, dtype=np.float32)
    else:
        action_space = spaces.Discrete(int(env.num_actions))
    return observation_space, action_space


class _Bridge:
    """The host side of a batch: actions to the device, one packed copy of each step's results back."""

    def __init__(self, env: Any) -> None:
        if getattr(env, "num_players", 1) != 1:
            raise ValueError(f"{type(env).__name__} has {env.num_players} players: only single-player "
                             "environments can be exposed as Gymnasium or SB3 vector environments")
        self.env = env
        self.obs_shape = tuple(int(d) for d in env.obs_shape)
        self.obs_size = math.prod(self.obs_shape)
        self.observation_space, self.action_space = single_spaces(env)

    def to_device(self, actions: Any) -> torch.Tensor:
        env = self.env
        if env.is_continuous:
            array = np.asarray(actions, dtype=np.float32).reshape(env.num_envs, *env.action_shape)
            return torch.from_numpy(array).to(env.device)
        array = np.asarray(actions).reshape(env.num_envs).astype(np.int64)
        return torch.from_numpy(array).to(env.device)

    def to_host(self, step: Any) -> dict[str, np.ndarray]:
        """``obs``, ``final_obs`` (float32), ``reward`` (float64), ``terminated``, ``truncated`` (bool),
        ``episode_return``, ``episode_length`` and, for discrete actions, ``action_mask``."""
        n, o = self.env.num_envs, self.obs_size
        columns = (step.reward, step.terminated, step.truncated, step.episode_return, step.episode_length)
        fields = [step.obs.reshape(n, o), step.final_obs.reshape(n, o), *(c.reshape(n, 1) for c in columns)]
        if not self.env.is_continuous:
            fields.append(step.action_mask)
        host = torch.cat([f.float() for f in fields], dim=1).cpu().numpy()
        out = {
            "obs": host[:, :o].reshape(n, *self.obs_shape).copy(),
            "final_obs": host[:, o:2 * o].reshape(n, *self.obs_shape).copy(),
            "reward": host[:, 2 * o].astype(np.float64),
            "terminated": host[:, 2 * o + 1] > 0.5,
            "truncated": host[:, 2 * o + 2] > 0.5,
            "episode_return": host[:, 2 * o + 3].astype(np.float64),
            "episode_length": host[:, 2 * o + 4].astype(np.int64),
        }
        if not self.env.is_continuous:
            out["action_mask"] = host[:, 2 * o + 5:] > 0.5
        return out

    def reset(
        self, seed: int | list[int | None] | None, options: dict[str, Any] | None
    ) -> dict[str, np.ndarray]:
        if isinstance(seed, (list, tuple)):
            # One stream seeds the whole batch: its first seed stands for all of them.
            seed = next((s for s in seed if s is not None), None)
        mask = (options or {}).get("reset_mask")
        if mask is not None and hasattr(self.env, "reset_rows"):
            step = self.env.reset_rows(torch.as_tensor(np.asarray(mask, dtype=bool), device=self.env.device))
        else:
            step = self.env.reset(seed=seed)
        return self.to_host(step)


class TensorVectorEnv(VectorEnv):
    """A single-player rl_gpu environment as a ``gymnasium.vector.VectorEnv`` with same-step auto-reset.

    ``step`` returns ``(obs, reward, terminated, truncated, infos)`` as numpy arrays (float32 observations,
    float64 rewards, as Gymnasium's vector environments return them). When some rows finish, ``infos`` holds
    ``final_obs`` (object array: the observation each finished row ended in, None elsewhere) and
    ``final_info``, each with its ``_key`` row mask, as ``SyncVectorEnv(autoreset_mode=SAME_STEP)`` lays them
    out (episode statistics: wrap it in ``gymnasium.wrappers.vector.RecordEpisodeStatistics``). Discrete
    environments also return ``infos["action_mask"]`` (``[N, A]`` bool). ``reset(options={"reset_mask":
    mask})`` resets only those rows when the environment supports it (``TensorEnv.reset_rows``).
    """

    def __init__(self, env: Any) -> None:
        self._bridge = _Bridge(env)
        self.env = env
        self.num_envs = int(env.num_envs)
        self.single_observation_space = self._bridge.observation_space
        self.single_action_space = self._bridge.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        self.render_mode = None
        self.closed = False

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every row (or only ``options["reset_mask"]`` rows); an int ``seed`` re-seeds the batch."""
        if seed is not None:
            self._np_random, self._np_random_seed = gymnasium.utils.seeding.np_random(
                seed if isinstance(seed, int) else next((s for s in seed if s is not None), None)
            )
        host = self._bridge.reset(seed, options)
        return host["obs"], self._infos(host)

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every row; finished rows restart in the same call (their last observation is in the infos)."""
        host = self._bridge.to_host(self.env.step(self._bridge.to_device(actions)))
        infos = self._infos(host)
        done = host["terminated"] | host["truncated"]
        if done.any():
            final_obs = np.full(self.num_envs, None, dtype=object)
            final_info = np.full(self.num_envs, None, dtype=object)
            for i in np.flatnonzero(done):
                final_obs[i] = host["final_obs"][i]
                final_info[i] = {}
            infos.update({"final_obs": final_obs, "_final_obs": done.copy(),
                          "final_info": {}, "_final_info": done.copy()})
        return host["obs"], host["reward"], host["terminated"], host["truncated"], infos

    def _infos(self, host: dict[str, np.ndarray]) -> dict[str, Any]:
        if "action_mask" in host:
            return {"action_mask": host["action_mask"], "_action_mask": np.ones(self.num_envs, dtype=bool)}
        return {}

    def close_extras(self, **kwargs: Any) -> None:
        """Nothing to release: the environment is tensors."""

    def __repr__(self) -> str:
        return f"TensorVectorEnv({self.env!r})"


def to_gymnasium(env: Any) -> TensorVectorEnv:
    """Expose a single-player rl_gpu environment (``TensorEnv`` or ``GymnasiumEnv``) as a Gymnasium
    ``VectorEnv`` with ``metadata["autoreset_mode"] == AutoresetMode.SAME_STEP`` (see
    :class:`TensorVectorEnv`)."""
    return TensorVectorEnv(env)


def to_sb3(env: Any):
    """Expose a single-player rl_gpu environment as a Stable-Baselines3 ``VecEnv`` (needs
    ``stable-baselines3``); see :class:`rl_gpu.sb3_vec_env.SB3VecEnv`."""
    from rl_gpu.sb3_vec_env import SB3VecEnv

    return SB3VecEnv(env)
