"""Gymnasium's MuJoCo v5 locomotion tasks on the batched engine: same MJCF, frame skip, observation, reward
terms, termination, reset distribution and time limit as ``gymnasium.make("<id>")`` with default arguments.

Gymnasium steps one world with the solver warm-started from the previous control step; the engine starts each
control step's solve cold (see :mod:`rl_gpu.envs.mujoco.engine`), so trajectories agree with Gymnasium's to
solver tolerance rather than bit for bit (tests/envs/mujoco measure it), and exactly when Gymnasium's
``qacc_warmstart`` is zeroed before the step.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch import Tensor

from rl_gpu.envs.mujoco.base import MjInner, MujocoEnv


def gymnasium_asset(name: str) -> str:
    """Path of one of Gymnasium's MuJoCo MJCF files (they ship with ``gymnasium``)."""
    try:
        import gymnasium.envs.mujoco as gym_mujoco
    except ImportError as e:  # pragma: no cover - exercised only without the optional dependency
        raise ImportError("Gymnasium's MuJoCo tasks read its MJCF files: pip install 'rl-gpu[mujoco]'") from e
    return os.path.join(os.path.dirname(gym_mujoco.__file__), "assets", name)


@dataclass(frozen=True)
class HalfCheetahParams:
    """``HalfCheetah-v5``'s keyword arguments (Gymnasium's names and defaults)."""

    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 0.1
    reset_noise_scale: float = 0.1


class HalfCheetahEnv(MujocoEnv):
    """``HalfCheetah-v5``: make a planar cheetah run forward.

    - Observation ``[N, 17]``: ``qpos[1:]`` (all but the x position), ``qvel``.
    - Action ``[N, 6]`` torques in ``[-1, 1]``.
    - Reward: ``forward`` = weight * x velocity over the control step, ``ctrl`` = -weight * sum(action**2).
    - Terminated: never. Truncated: after 1000 steps.
    - Reset: qpos0 + U(±0.1) per coordinate, qvel 0.1 * N(0, 1).
    """

    frame_skip = 5
    obs_shape = (17,)
    max_episode_steps = 1000
    params_type = HalfCheetahParams
    reward_terms = ("forward", "ctrl")

    @classmethod
    def model_path(cls) -> str:
        return gymnasium_asset("half_cheetah.xml")

    def _reset_physics(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        scale = self.params.reset_noise_scale
        qpos = self.init_qpos + self.uniform(-scale, scale, (n, self.layout.nq), generator)
        qvel = self.init_qvel + self.normal(scale, (n, self.layout.nv), generator)
        return qpos, qvel

    def _observe(self, inner: MjInner) -> Tensor:
        return torch.cat((self.qpos(inner)[:, 1:], self.qvel(inner)), dim=1).float()

    def _rewards(self, before: MjInner, after: MjInner, action: Tensor) -> tuple[dict[str, Tensor], Tensor]:
        p = self.params
        x_velocity = (self.qpos(after)[:, 0] - self.qpos(before)[:, 0]) / self.dt
        terms = {"forward": p.forward_reward_weight * x_velocity,
                 "ctrl": -p.ctrl_cost_weight * action.double().square().sum(dim=1)}
        return terms, torch.zeros_like(x_velocity, dtype=torch.bool)
