"""A single-player rl_gpu environment as a Stable-Baselines3 ``VecEnv`` (needs ``stable-baselines3``).

SB3 steps its own ``VecEnv`` interface rather than Gymnasium's vector API; this adapter gives it the same
same-step auto-reset SB3's ``DummyVecEnv`` implements: a finished row's ``infos[i]`` holds
``terminal_observation`` and ``TimeLimit.truncated`` (``truncated and not terminated``), and the returned
observation is already the next episode's first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import VecEnv as SB3BaseVecEnv

from rl_gpu.core.types import VecEnv
from rl_gpu.interop.bridge import HostBridge


class SB3VecEnv(SB3BaseVecEnv):
    """Stable-Baselines3 view of an rl_gpu environment (``TensorEnv`` or ``GymnasiumEnv``).

    ``infos[i]["episode"]`` (``r``, ``l``) is filled for finished rows, as SB3's ``Monitor`` does, so SB3's
    ``ep_rew_mean`` logging works without a ``VecMonitor``. Attribute and method forwarding (``get_attr``,
    ``env_method``) reach the one batched environment, not per-row copies.
    """

    def __init__(self, env: VecEnv) -> None:
        self._bridge = HostBridge(env)
        self.env = env
        super().__init__(int(env.num_envs), self._bridge.observation_space, self._bridge.action_space)
        self._actions: np.ndarray | None = None

    def reset(self) -> np.ndarray:
        """Reset every row; a seed given through ``seed()`` applies to this reset only."""
        seed = next((s for s in self._seeds if s is not None), None)
        host = self._bridge.reset(seed, None)
        self._reset_seeds()
        self._reset_options()
        self.reset_infos = [{} for _ in range(self.num_envs)]
        return host["obs"]

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        host = self._bridge.to_host(self.env.step(self._bridge.to_device(self._actions)))
        done = host["terminated"] | host["truncated"]
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        for i in np.flatnonzero(done):
            infos[i] = {
                "terminal_observation": host["final_obs"][i],
                "TimeLimit.truncated": bool(host["truncated"][i]),
                "episode": {"r": float(host["episode_return"][i]), "l": int(host["episode_length"][i])},
            }
        return host["obs"], host["reward"].astype(np.float32), done, infos

    def close(self) -> None:
        self.env.close()

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        if attr_name == "render_mode":
            return [getattr(self.env, "render_mode", None)] * len(self._get_indices(indices))
        return [getattr(self.env, attr_name)] * len(self._get_indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        setattr(self.env, attr_name, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any
    ) -> list[Any]:
        result = getattr(self.env, method_name)(*method_args, **method_kwargs)
        return [result] * len(self._get_indices(indices))

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        return [False] * len(self._get_indices(indices))

    def get_images(self) -> Sequence[np.ndarray | None]:
        return [None] * self.num_envs


def to_sb3(env: VecEnv) -> SB3VecEnv:
    """Expose a single-player rl_gpu environment as a Stable-Baselines3 ``VecEnv`` (see :class:`SB3VecEnv`)."""
    return SB3VecEnv(env)
