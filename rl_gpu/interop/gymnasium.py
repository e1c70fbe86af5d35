"""rl_gpu environments seen from outside: a Gymnasium ``VectorEnv`` (:func:`to_gymnasium`) and a
Stable-Baselines3 ``VecEnv`` (:func:`to_sb3`), numpy in and out.

Both keep rl_gpu's same-step auto-reset: the observation returned for a finished row is already the next
episode's first, and the one it finished in is in the infos (Gymnasium: ``infos["final_obs"]``, an object
array with ``infos["_final_obs"]`` marking the rows; SB3: ``infos[i]["terminal_observation"]``). Each step
costs one host-to-device copy of the actions and one device-to-host copy of everything the step returns.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from rl_gpu.core.types import VecEnv
from rl_gpu.interop.bridge import HostBridge


class TensorVectorEnv(VectorEnv):
    """A single-player rl_gpu environment as a ``gymnasium.vector.VectorEnv`` with same-step auto-reset.

    ``step`` returns ``(obs, reward, terminated, truncated, infos)`` as numpy arrays (float32 observations,
    float64 rewards, as Gymnasium's vector environments return them). When some rows finish, ``infos`` holds
    ``final_obs`` (object array: the observation each finished row ended in, None elsewhere) and
    ``final_info``, each with its ``_key`` row mask, as ``SyncVectorEnv(autoreset_mode=SAME_STEP)`` lays them
    out (episode statistics: wrap it in ``gymnasium.wrappers.vector.RecordEpisodeStatistics``). Discrete
    environments also return ``infos["action_mask"]`` (``[N, A]`` bool). ``reset(options={"reset_mask":
    mask})`` resets only those rows (the environment's ``reset_rows``).
    """

    def __init__(self, env: VecEnv) -> None:
        self._bridge = HostBridge(env)
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


def to_gymnasium(env: VecEnv) -> TensorVectorEnv:
    """Expose a single-player rl_gpu environment (``TensorEnv`` or ``GymnasiumEnv``) as a Gymnasium
    ``VectorEnv`` with ``metadata["autoreset_mode"] == AutoresetMode.SAME_STEP`` (see
    :class:`TensorVectorEnv`)."""
    return TensorVectorEnv(env)
