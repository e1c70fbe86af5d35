"""Gymnasium's MuJoCo environments as references for :class:`~rl_gpu.envs.mujoco.base.MujocoEnv` tasks.

:func:`check_mujoco_parity` injects each row's ``qpos``/``qvel`` into ``gymnasium.make(gym_id)`` (its
``set_state``), steps both with the same action and compares observation, reward, termination and the next
physics state. With ``zero_warmstart`` (the default) Gymnasium's solver warm-start is cleared before each step,
which is what the engine does (each control step's solve starts cold), so the two run the same floating-point
operations; without it the difference is the warm-start's effect on the solver's answer. Requires
``gymnasium[mujoco]``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from rl_gpu.envs.mujoco.base import MujocoEnv


@dataclass(frozen=True)
class MujocoParity:
    """Largest absolute differences over every compared row and step."""

    obs: float
    reward: float
    qpos: float
    qvel: float
    terminated_mismatches: int
    transitions: int

    @property
    def worst(self) -> float:
        return max(self.obs, self.reward, self.qpos, self.qvel)


def make_gym_reference(gym_id: str, **kwargs):
    """``gymnasium.make(gym_id, **kwargs).unwrapped`` reset once (MuJoCo's compiler warnings silenced)."""
    import gymnasium

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gymnasium.make(gym_id, **kwargs).unwrapped
    env.reset(seed=0)
    return env


def check_mujoco_parity(env: MujocoEnv, gym_id: str, num_steps: int, *, zero_warmstart: bool = True,
                        action_scale: float = 1.0, seed: int = 0, **gym_kwargs) -> MujocoParity:
    """Step ``env`` (``autoreset`` on) ``num_steps`` times with uniform random actions (``action_scale`` times
    the control range, so values beyond it test clamping), replaying every row's transition on one Gymnasium
    environment from the same state; returns the largest differences (rows that reset are compared through
    ``final_obs``)."""
    gym = make_gym_reference(gym_id, **gym_kwargs)
    lay = env.layout
    gen = torch.Generator().manual_seed(seed)
    low = torch.tensor(env.action_low, dtype=torch.float64)
    high = torch.tensor(env.action_high, dtype=torch.float64)
    errs = dict(obs=0.0, reward=0.0, qpos=0.0, qvel=0.0)
    mismatches = transitions = 0
    for _ in range(num_steps):
        physics = env.state.inner.physics.cpu().numpy().copy()
        u = torch.rand(env.num_envs, len(env.action_low), dtype=torch.float64, generator=gen)
        mid, half = (low + high) / 2, (high - low) / 2
        action = (mid + action_scale * half * (2 * u - 1)).float()
        result = env.step(action.to(env.device))
        ours_next = physics_after_step(env, result)
        for i in range(env.num_envs):
            gym.set_state(physics[i, lay.qpos], physics[i, lay.qvel])
            if zero_warmstart:
                gym.data.qacc_warmstart[:] = 0
            obs, reward, terminated, _, _ = gym.step(action[i].double().numpy())
            errs["obs"] = max(errs["obs"], float(np.abs(obs - result.final_obs[i].double().cpu().numpy()).max()))
            errs["reward"] = max(errs["reward"], abs(float(reward) - float(result.reward[i])))
            errs["qpos"] = max(errs["qpos"], float(np.abs(gym.data.qpos - ours_next[i, lay.qpos]).max()))
            errs["qvel"] = max(errs["qvel"], float(np.abs(gym.data.qvel - ours_next[i, lay.qvel]).max()))
            mismatches += bool(terminated) != bool(result.terminated[i])
            transitions += 1
    gym.close()
    return MujocoParity(**errs, terminated_mismatches=mismatches, transitions=transitions)


def physics_after_step(env: MujocoEnv, result) -> np.ndarray:
    """``[N, nstate]`` physics each row reached in the step that produced ``result`` (before any reset): the
    engine's last output, kept by the environment."""
    return env.last_physics.cpu().numpy()
