"""Gymnasium's MuJoCo v5 locomotion tasks on the batched engine: same MJCF, frame skip, observation, reward
terms, termination, reset distribution and time limit as ``gymnasium.make("<id>")`` with default arguments.

Gymnasium steps one world with the solver warm-started from the previous control step; the engine starts each
control step's solve cold (see :mod:`rl_gpu.envs.mujoco.engine`), so trajectories agree with Gymnasium's to
solver tolerance rather than bit for bit (tests/envs/mujoco measure it), and exactly when Gymnasium's
``qacc_warmstart`` is zeroed before the step.
"""

from __future__ import annotations

import abc
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
    action_shape = (6,)
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


class _PlanarWalker(MujocoEnv):
    """Hopper and Walker2d: a body in the x-z plane (``qpos = [x, z, pitch, joints...]``) rewarded for x
    velocity while healthy; the subclass says what healthy is (:meth:`_healthy`)."""

    frame_skip = 4
    max_episode_steps = 1000
    reward_terms = ("forward", "healthy", "ctrl")

    @abc.abstractmethod
    def _healthy(self, qpos: Tensor, qvel: Tensor) -> Tensor:
        """``[N]`` bool from ``[N, nq]`` qpos and ``[N, nv]`` qvel after the step."""

    def _reset_physics(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        scale = self.params.reset_noise_scale
        qpos = self.init_qpos + self.uniform(-scale, scale, (n, self.layout.nq), generator)
        qvel = self.init_qvel + self.uniform(-scale, scale, (n, self.layout.nv), generator)
        return qpos, qvel

    def _observe(self, inner: MjInner) -> Tensor:
        return torch.cat((self.qpos(inner)[:, 1:], self.qvel(inner).clamp(-10.0, 10.0)), dim=1).float()

    def _rewards(self, before: MjInner, after: MjInner, action: Tensor) -> tuple[dict[str, Tensor], Tensor]:
        p = self.params
        qpos = self.qpos(after)
        x_velocity = (qpos[:, 0] - self.qpos(before)[:, 0]) / self.dt
        healthy = self._healthy(qpos, self.qvel(after))
        terms = {"forward": p.forward_reward_weight * x_velocity,
                 "healthy": p.healthy_reward * healthy.double(),
                 "ctrl": -p.ctrl_cost_weight * action.double().square().sum(dim=1)}
        terminated = ~healthy if p.terminate_when_unhealthy else torch.zeros_like(healthy)
        return terms, terminated


def _inside(x: Tensor, bounds: tuple[float, float]) -> Tensor:
    """``low < x < high`` elementwise (Gymnasium's healthy ranges are open)."""
    return (bounds[0] < x) & (x < bounds[1])


@dataclass(frozen=True)
class HopperParams:
    """``Hopper-v5``'s keyword arguments (Gymnasium's names and defaults)."""

    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 1e-3
    healthy_reward: float = 1.0
    terminate_when_unhealthy: bool = True
    healthy_state_range: tuple[float, float] = (-100.0, 100.0)
    healthy_z_range: tuple[float, float] = (0.7, float("inf"))
    healthy_angle_range: tuple[float, float] = (-0.2, 0.2)
    reset_noise_scale: float = 5e-3


class HopperEnv(_PlanarWalker):
    """``Hopper-v5``: make a one-legged planar robot hop forward.

    - Observation ``[N, 11]``: ``qpos[1:]`` (all but the x position), ``qvel`` clipped to ``[-10, 10]``.
    - Action ``[N, 3]`` torques in ``[-1, 1]``.
    - Reward: ``forward`` = weight * x velocity over the control step, ``healthy`` = 1 while healthy (0 on the
      step that makes it unhealthy), ``ctrl`` = -weight * sum(action**2).
    - Healthy: ``qpos[2:]`` and ``qvel`` inside ``(-100, 100)``, height ``qpos[1] > 0.7``, torso angle
      ``qpos[2]`` inside ``(-0.2, 0.2)``. Terminated: when not healthy. Truncated: after 1000 steps.
    - Reset: qpos0 + U(±0.005) per coordinate, qvel U(±0.005).
    """

    obs_shape = (11,)
    action_shape = (3,)
    params_type = HopperParams

    @classmethod
    def model_path(cls) -> str:
        return gymnasium_asset("hopper.xml")

    def _healthy(self, qpos: Tensor, qvel: Tensor) -> Tensor:
        p = self.params
        state = torch.cat((qpos[:, 2:], qvel), dim=1)
        return (_inside(state, p.healthy_state_range).all(dim=1) & _inside(qpos[:, 1], p.healthy_z_range)
                & _inside(qpos[:, 2], p.healthy_angle_range))


@dataclass(frozen=True)
class Walker2dParams:
    """``Walker2d-v5``'s keyword arguments (Gymnasium's names and defaults)."""

    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 1e-3
    healthy_reward: float = 1.0
    terminate_when_unhealthy: bool = True
    healthy_z_range: tuple[float, float] = (0.8, 2.0)
    healthy_angle_range: tuple[float, float] = (-1.0, 1.0)
    reset_noise_scale: float = 5e-3


class Walker2dEnv(_PlanarWalker):
    """``Walker2d-v5``: make a two-legged planar robot walk forward (``walker2d_v5.xml``: both feet have
    friction 1.9; the older ``walker2d.xml`` gives the right foot 0.9).

    - Observation ``[N, 17]``: ``qpos[1:]`` (all but the x position), ``qvel`` clipped to ``[-10, 10]``.
    - Action ``[N, 6]`` torques in ``[-1, 1]``.
    - Reward: ``forward`` = weight * x velocity over the control step, ``healthy`` = 1 while healthy (0 on the
      step that makes it unhealthy), ``ctrl`` = -weight * sum(action**2).
    - Healthy: height ``qpos[1]`` inside ``(0.8, 2)``, torso angle ``qpos[2]`` inside ``(-1, 1)``.
      Terminated: when not healthy. Truncated: after 1000 steps.
    - Reset: qpos0 + U(±0.005) per coordinate, qvel U(±0.005).
    """

    obs_shape = (17,)
    action_shape = (6,)
    params_type = Walker2dParams

    @classmethod
    def model_path(cls) -> str:
        return gymnasium_asset("walker2d_v5.xml")

    def _healthy(self, qpos: Tensor, qvel: Tensor) -> Tensor:
        p = self.params
        return _inside(qpos[:, 1], p.healthy_z_range) & _inside(qpos[:, 2], p.healthy_angle_range)
