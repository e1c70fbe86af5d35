"""Gymnasium's MuJoCo v5 locomotion tasks in 3D (a free-floating torso): same MJCF, frame skip, observation,
reward terms, termination, reset distribution and time limit as ``gymnasium.make("<id>")`` with default
arguments (see :mod:`rl_gpu.envs.mujoco.locomotion` for the solver warm-start).

Gymnasium reads body positions, inertias and contact forces from ``MjData`` after ``mj_step``, where they are
left over from the last substep's computation (RK4's last stage), not those of the new state; the engine's
derived fields (``derived_fields``) are those values, and a task measures its velocity between two such
readings, as Gymnasium does (after a reset: from the reset state's forward pass).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch
from torch import Tensor

from rl_gpu.envs.mujoco.base import MjInner, MujocoEnv
from rl_gpu.envs.mujoco.locomotion import gymnasium_asset

try:
    import mujoco
except ImportError:  # pragma: no cover - exercised only without the optional dependency
    mujoco = None


def derived_columns(model, fields: tuple[tuple[str, int], ...]) -> dict[str, slice]:
    """Where each of the derived ``fields`` of ``model`` (a task's ``derived_fields``) sits among the columns
    of ``inner.observed``."""
    data = mujoco.MjData(model)
    columns, start = {}, model.nsensordata
    for name, first in fields:
        size = getattr(data, name)[first:].size
        columns[name] = slice(start, start + size)
        start += size
    return columns


@dataclass(frozen=True)
class AntParams:
    """``Ant-v5``'s keyword arguments (Gymnasium's names and defaults)."""

    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 0.5
    contact_cost_weight: float = 5e-4
    healthy_reward: float = 1.0
    terminate_when_unhealthy: bool = True
    healthy_z_range: tuple[float, float] = (0.2, 1.0)
    contact_force_range: tuple[float, float] = (-1.0, 1.0)
    reset_noise_scale: float = 0.1


class AntEnv(MujocoEnv):
    """``Ant-v5``: make a four-legged robot walk forward (+x).

    - Observation ``[N, 105]``: ``qpos[2:]`` (all but the torso's x, y), ``qvel``, then the contact forces
      ``cfrc_ext`` of the 13 bodies clipped to ``[-1, 1]`` (``[N, 13 * 6]``; zero in a reset observation).
    - Action ``[N, 8]`` torques in ``[-1, 1]``.
    - Reward: ``forward`` = weight * x velocity of the torso over the control step, ``healthy`` = 1 while
      healthy (0 on the step that makes it unhealthy), ``ctrl`` = -weight * sum(action**2), ``contact`` =
      -weight * sum(clipped cfrc_ext**2).
    - Healthy: ``qpos``, ``qvel`` finite and torso height ``qpos[2]`` in ``[0.2, 1]``. Terminated: when not
      healthy. Truncated: after 1000 steps.
    - Reset: qpos0 + U(±0.1) per coordinate (the quaternion too, unnormalised, as Gymnasium), qvel
      0.1 * N(0, 1).
    """

    frame_skip = 5
    obs_shape = (105,)
    action_shape = (8,)
    max_episode_steps = 1000
    params_type = AntParams
    reward_terms = ("forward", "healthy", "ctrl", "contact")
    # The world's row of cfrc_ext (row 0) is always zero: MuJoCo adds contact forces to bodies 1.. only.
    derived_fields = (("cfrc_ext", 1), ("xpos", 1))

    @cached_property
    def _cfrc_ext(self) -> slice:
        return derived_columns(self.model, self.derived_fields)["cfrc_ext"]

    @cached_property
    def _torso_x(self) -> int:
        """The column of the torso's x in ``inner.observed``."""
        return derived_columns(self.model, self.derived_fields)["xpos"].start

    @classmethod
    def model_path(cls) -> str:
        return gymnasium_asset("ant.xml")

    def _sample_initial_state(self, num_envs: int, generator: torch.Generator) -> MjInner:
        inner = super()._sample_initial_state(num_envs, generator)
        # Gymnasium's reset ends with mj_forward, where the torso's xpos is its free joint's qpos[:3] (bit for
        # bit); cfrc_ext stays zero. Writing it here spares a forward pass per reset row (reset_forward).
        observed = inner.observed.clone()
        observed[:, self._torso_x:self._torso_x + 2] = self.qpos(inner)[:, :2]
        return inner._replace(observed=observed)

    def _reset_physics(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        scale = self.params.reset_noise_scale
        qpos = self.init_qpos + self.uniform(-scale, scale, (n, self.layout.nq), generator)
        qvel = self.init_qvel + self.normal(scale, (n, self.layout.nv), generator)
        return qpos, qvel

    def _contact_forces(self, inner: MjInner) -> Tensor:
        """``[N, 13 * 6]`` float64 clipped contact forces of the bodies."""
        low, high = self.params.contact_force_range
        return inner.observed[:, self._cfrc_ext].clamp(low, high)

    def _observe(self, inner: MjInner) -> Tensor:
        qpos, qvel = self.qpos(inner), self.qvel(inner)
        return torch.cat((qpos[:, 2:], qvel, self._contact_forces(inner)), dim=1).float()

    def _rewards(self, before: MjInner, after: MjInner, action: Tensor) -> tuple[dict[str, Tensor], Tensor]:
        p = self.params
        x_velocity = (after.observed[:, self._torso_x] - before.observed[:, self._torso_x]) / self.dt
        qpos, qvel = self.qpos(after), self.qvel(after)
        z = qpos[:, 2]
        finite = torch.isfinite(qpos).all(dim=1) & torch.isfinite(qvel).all(dim=1)
        healthy = finite & (p.healthy_z_range[0] <= z) & (z <= p.healthy_z_range[1])
        terms = {"forward": p.forward_reward_weight * x_velocity,
                 "healthy": p.healthy_reward * healthy.double(),
                 "ctrl": -p.ctrl_cost_weight * action.double().square().sum(dim=1),
                 "contact": -p.contact_cost_weight * self._contact_forces(after).square().sum(dim=1)}
        terminated = ~healthy if p.terminate_when_unhealthy else torch.zeros_like(healthy)
        return terms, terminated


@dataclass(frozen=True)
class HumanoidParams:
    """``Humanoid-v5``'s keyword arguments (Gymnasium's names and defaults)."""

    forward_reward_weight: float = 1.25
    ctrl_cost_weight: float = 0.1
    contact_cost_weight: float = 5e-7
    contact_cost_range: tuple[float, float] = (float("-inf"), 10.0)
    healthy_reward: float = 5.0
    terminate_when_unhealthy: bool = True
    healthy_z_range: tuple[float, float] = (1.0, 2.0)
    reset_noise_scale: float = 1e-2


class HumanoidEnv(MujocoEnv):
    """``Humanoid-v5``: make a humanoid walk forward (+x) without falling.

    - Observation ``[N, 348]``: ``qpos[2:]`` (22; all but the torso's x, y), ``qvel`` (23), then for the 13
      bodies ``cinert`` (130) and ``cvel`` (78), the actuator forces ``qfrc_actuator[6:]`` (17) and the
      contact forces ``cfrc_ext`` (78; zero in a reset observation).
    - Action ``[N, 17]`` torques in ``[-0.4, 0.4]``.
    - Reward: ``forward`` = weight * x velocity of the centre of mass over the control step, ``healthy`` = 5
      while healthy (0 on the step that makes it unhealthy), ``ctrl`` = -weight * sum(action**2),
      ``contact`` = -min(weight * sum(cfrc_ext**2), 10).
    - Healthy: torso height ``qpos[2]`` inside ``(1, 2)``. Terminated: when not healthy. Truncated: after 1000
      steps.
    - Reset: qpos0 + U(±0.01) per coordinate (the quaternion too, unnormalised, as Gymnasium), qvel U(±0.01).
    """

    frame_skip = 5
    obs_shape = (348,)
    action_shape = (17,)
    max_episode_steps = 1000
    params_type = HumanoidParams
    reward_terms = ("forward", "healthy", "ctrl", "contact")
    # In the observation's order, then the bodies' centres of mass for the mass centre. The world's rows
    # (row 0) are left out: its mass is zero and MuJoCo never adds contact forces to it.
    derived_fields = (("cinert", 1), ("cvel", 1), ("qfrc_actuator", 6), ("cfrc_ext", 1), ("xipos", 1))
    reset_forward = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        columns = derived_columns(self.model, self.derived_fields)
        self._features = slice(columns["cinert"].start, columns["cfrc_ext"].stop)
        self._cfrc_ext = columns["cfrc_ext"]
        self._xipos = columns["xipos"]
        mass = torch.tensor(self.model.body_mass[1:], dtype=torch.float64, device=self.device)
        self._mass_fraction = mass / mass.sum()

    @classmethod
    def model_path(cls) -> str:
        return gymnasium_asset("humanoid.xml")

    def _reset_physics(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        scale = self.params.reset_noise_scale
        qpos = self.init_qpos + self.uniform(-scale, scale, (n, self.layout.nq), generator)
        qvel = self.init_qvel + self.uniform(-scale, scale, (n, self.layout.nv), generator)
        return qpos, qvel

    def _mass_center_x(self, inner: MjInner) -> Tensor:
        """``[N]`` float64 x of the centre of mass, as Gymnasium's ``mass_center`` reads it (``xipos``)."""
        return inner.observed[:, self._xipos].unflatten(1, (-1, 3))[:, :, 0] @ self._mass_fraction

    def _observe(self, inner: MjInner) -> Tensor:
        return torch.cat((self.qpos(inner)[:, 2:], self.qvel(inner), inner.observed[:, self._features]),
                         dim=1).float()

    def _rewards(self, before: MjInner, after: MjInner, action: Tensor) -> tuple[dict[str, Tensor], Tensor]:
        p = self.params
        x_velocity = (self._mass_center_x(after) - self._mass_center_x(before)) / self.dt
        z = self.qpos(after)[:, 2]
        healthy = (p.healthy_z_range[0] < z) & (z < p.healthy_z_range[1])
        contact = p.contact_cost_weight * after.observed[:, self._cfrc_ext].square().sum(dim=1)
        terms = {"forward": p.forward_reward_weight * x_velocity,
                 "healthy": p.healthy_reward * healthy.double(),
                 "ctrl": -p.ctrl_cost_weight * action.double().square().sum(dim=1),
                 "contact": -contact.clamp(*p.contact_cost_range)}
        terminated = ~healthy if p.terminate_when_unhealthy else torch.zeros_like(healthy)
        return terms, terminated
