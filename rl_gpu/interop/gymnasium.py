"""rl_gpu environments seen from outside: a Gymnasium ``VectorEnv`` (:func:`to_gymnasium`) and a
Stable-Baselines3 ``VecEnv`` (:func:`to_sb3`), numpy in and out.

The Gymnasium view speaks either auto-reset mode of Gymnasium's vector API:

- ``AutoresetMode.SAME_STEP`` (default; rl_gpu's own): the observation returned for a finished row is already
  the next episode's first, and the one it finished in is in ``infos["final_obs"]`` (an object array, with
  ``infos["_final_obs"]`` marking the rows). SB3's ``VecEnv`` works the same way
  (``infos[i]["terminal_observation"]``).
- ``AutoresetMode.NEXT_STEP``: a finished row returns the observation it finished in; the next ``step``
  ignores that row's action and resets it, returning the new episode's first observation with reward 0 and
  ``terminated`` / ``truncated`` False. The wrappers that refuse same-step auto-reset (e.g.
  ``gymnasium.wrappers.vector.NormalizeObservation``) take this one.

Each step costs one host-to-device copy of the actions and one device-to-host copy of everything the step
returns (two in a ``NEXT_STEP`` step that resets rows).
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from rl_gpu.core.types import VecEnv
from rl_gpu.interop.bridge import HostBridge

AUTORESET_MODES = (AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP)


class TensorVectorEnv(VectorEnv):
    """A single-player rl_gpu environment as a ``gymnasium.vector.VectorEnv``.

    ``step`` returns ``(obs, reward, terminated, truncated, infos)`` as numpy arrays (float32 observations,
    float64 rewards, as Gymnasium's vector environments return them). Spaces: a float32 ``Box`` bounded by
    the environment's ``obs_low`` / ``obs_high`` when it declares them (the classic-control ones declare
    Gymnasium's), ``Discrete(num_actions)`` or a bounded float32 ``Box`` of actions.

    ``autoreset_mode``: ``AutoresetMode.SAME_STEP`` (default) or ``NEXT_STEP`` (module docstring). With
    ``SAME_STEP``, when some rows finish ``infos`` holds ``final_obs`` (object array: the observation each
    finished row ended in, None elsewhere) and ``final_info``, each with its ``_key`` row mask, as
    ``SyncVectorEnv(autoreset_mode=SAME_STEP)`` lays them out. Episode statistics: wrap it in
    ``gymnasium.wrappers.vector.RecordEpisodeStatistics``. Discrete environments also return
    ``infos["action_mask"]`` (``[N, A]`` bool). ``reset(options={"reset_mask": mask})`` resets only those
    rows (the environment's ``reset_rows``).
    """

    def __init__(self, env: VecEnv, autoreset_mode: AutoresetMode = AutoresetMode.SAME_STEP) -> None:
        if autoreset_mode not in AUTORESET_MODES:
            raise ValueError(f"autoreset_mode must be AutoresetMode.SAME_STEP or AutoresetMode.NEXT_STEP, "
                             f"got {autoreset_mode!r}")
        self._bridge = HostBridge(env)
        self.env = env
        self.num_envs = int(env.num_envs)
        self.single_observation_space = self._bridge.observation_space
        self.single_action_space = self._bridge.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = {"autoreset_mode": autoreset_mode}
        self.autoreset_mode = autoreset_mode
        self.render_mode = None
        self.closed = False
        self._pending = np.zeros(self.num_envs, dtype=bool)
        """NEXT_STEP: rows that finished in the last step and are reset by the next one."""

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every row (or only ``options["reset_mask"]`` rows); an int ``seed`` re-seeds the batch."""
        if seed is not None:
            self._np_random, self._np_random_seed = gymnasium.utils.seeding.np_random(
                seed if isinstance(seed, int) else next((s for s in seed if s is not None), None)
            )
        host = self._bridge.reset(seed, options)
        mask = (options or {}).get("reset_mask")
        if mask is None:
            self._pending[:] = False
        else:
            self._pending &= ~np.asarray(mask, dtype=bool).reshape(self.num_envs)
        return host["obs"], self._infos(host)

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every row (see the class docstring for what a finished row returns in each mode)."""
        host = self._bridge.to_host(self.env.step(self._bridge.to_device(actions)))
        done = host["terminated"] | host["truncated"]
        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            return self._next_step(host, done)
        infos = self._infos(host)
        if done.any():
            final_obs = np.full(self.num_envs, None, dtype=object)
            final_info = np.full(self.num_envs, None, dtype=object)
            for i in np.flatnonzero(done):
                final_obs[i] = host["final_obs"][i]
                final_info[i] = {}
            infos.update({"final_obs": final_obs, "_final_obs": done.copy(),
                          "final_info": {}, "_final_info": done.copy()})
        return host["obs"], host["reward"], host["terminated"], host["truncated"], infos

    def _next_step(
        self, host: dict[str, np.ndarray], done: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """``host`` as Gymnasium's ``NEXT_STEP`` mode reports it.

        The environment underneath has stepped every row, pending ones included (an environment cannot step
        some rows and not others). A pending row's transition is thrown away and the row reset again with
        ``reset_rows``: what this step reports for it is that reset. An environment built with
        ``autoreset=False`` keeps its finished rows frozen until then, so nothing is thrown away.
        """
        pending = self._pending
        obs = host["obs"].copy()
        obs[done] = host["final_obs"][done]
        reward, terminated, truncated = host["reward"], host["terminated"], host["truncated"]
        mask = host.get("action_mask")
        if pending.any():
            fresh = self._bridge.to_host(self.env.reset_rows(torch.from_numpy(pending).to(self.env.device)))
            obs[pending] = fresh["obs"][pending]
            reward[pending] = 0.0
            terminated[pending] = False
            truncated[pending] = False
            if mask is not None:
                mask[pending] = fresh["action_mask"][pending]
        self._pending = done & ~pending
        return obs, reward, terminated, truncated, self._infos({} if mask is None else {"action_mask": mask})

    def _infos(self, host: dict[str, np.ndarray]) -> dict[str, Any]:
        if "action_mask" in host:
            return {"action_mask": host["action_mask"], "_action_mask": np.ones(self.num_envs, dtype=bool)}
        return {}

    def close_extras(self, **kwargs: Any) -> None:
        """Nothing to release: the environment is tensors."""

    def __repr__(self) -> str:
        return f"TensorVectorEnv({self.env!r}, autoreset_mode={self.autoreset_mode})"


def to_gymnasium(env: VecEnv, autoreset_mode: AutoresetMode = AutoresetMode.SAME_STEP) -> TensorVectorEnv:
    """Expose a single-player rl_gpu environment (``TensorEnv`` or ``GymnasiumEnv``) as a Gymnasium
    ``VectorEnv`` with ``metadata["autoreset_mode"] == autoreset_mode`` (``SAME_STEP`` or ``NEXT_STEP``; see
    :class:`TensorVectorEnv`)."""
    return TensorVectorEnv(env, autoreset_mode)
