"""Pendulum-v1 (Gymnasium 1.x ``PendulumEnv``) as N tensor environments.

Precision: Gymnasium keeps the state in float64 but receives a float32 torque, and under NumPy 2 promotion
rules (NEP 50) the torque terms ``3.0 / (m l^2) * u`` and ``0.001 * u**2`` are evaluated in float32 before
joining the float64 sums. The inner state here is float64 and the torque terms are float32, in Gymnasium's
operation order, so observations agree to float32 rounding. Devices without float64 (MPS) are not supported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch
from torch import Tensor

from rl_gpu.envs.base import TensorEnv, stack_float32


@dataclass(frozen=True)
class PendulumParams:
    """Constants of Gymnasium's ``PendulumEnv`` (same attribute names)."""

    positive: ClassVar[tuple[str, ...]] = ('max_speed', 'max_torque', 'dt', 'm', 'l')
    """Parameters that must be above 0 (checked when the environment is built)."""

    max_speed: float = 8
    max_torque: float = 2.0
    dt: float = 0.05
    g: float = 10.0
    m: float = 1.0
    l: float = 1.0  # noqa: E741 (Gymnasium's name)
    reset_max_theta: float = math.pi
    reset_max_speed: float = 1.0
    """Reset draws theta uniform in ``±reset_max_theta`` and its rate uniform in ``±reset_max_speed``."""


class PendulumState(NamedTuple):
    """Inner state of N pendulums; every field is ``[N]`` float64."""

    theta: Tensor
    """Angle in radians, 0 = upright; not wrapped (Gymnasium lets it wind up)."""
    theta_dot: Tensor


def angle_normalize(x: Tensor) -> Tensor:
    """``((x + pi) % (2 pi)) - pi`` with NumPy's float ``%``: ``fmod`` moved into ``[0, 2 pi)``."""
    period = 2 * math.pi
    r = torch.fmod(x + math.pi, period)
    return torch.where(r < 0, r + period, r) - math.pi


class PendulumEnv(TensorEnv[PendulumState]):
    """``Pendulum-v1``: swing a torque-limited pendulum up and hold it upright.

    - Observation ``[N, 3]`` float32: ``cos(theta), sin(theta), theta_dot``; Gymnasium's box:
      ``±(1, 1, max_speed=8)``.
    - Action ``[N, 1]`` float torque in ``[-2, 2]``; values outside are clipped.
    - Reward: ``-(angle_normalize(theta)**2 + 0.1 * theta_dot**2 + 0.001 * torque**2)`` of the state before
      the step and the clipped torque; between about -16.27 and 0.
    - Terminated: never.
    - Truncated: after 200 steps.
    - Reset: theta uniform in ``[-pi, pi)``, theta_dot uniform in ``[-1, 1)``.

    Keyword arguments other than the base class's override fields of :class:`PendulumParams` (``g`` is the
    one ``gymnasium.make`` accepts).
    """

    obs_shape = (3,)
    action_shape = (1,)
    action_low = (-PendulumParams.max_torque,)
    action_high = (PendulumParams.max_torque,)
    max_episode_steps = 200
    # Gymnasium's box: cosine and sine in ±1, the angular speed's clip limit.
    obs_high = (1.0, 1.0, float(PendulumParams.max_speed))
    obs_low = tuple(-v for v in obs_high)

    params_type = PendulumParams

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.action_low = (-self.params.max_torque,)
        self.action_high = (self.params.max_torque,)
        self.obs_high = (1.0, 1.0, float(self.params.max_speed))
        self.obs_low = tuple(-v for v in self.obs_high)

    def _sample_initial_state(self, num_envs: int, generator: torch.Generator) -> PendulumState:
        p = self.params
        u = torch.rand(2, num_envs, dtype=torch.float64, device=self.device, generator=generator)
        theta = -p.reset_max_theta + (p.reset_max_theta - -p.reset_max_theta) * u[0]
        theta_dot = -p.reset_max_speed + (p.reset_max_speed - -p.reset_max_speed) * u[1]
        return PendulumState(theta, theta_dot)

    def _transition(self, s: PendulumState, action: Tensor) -> tuple[PendulumState, Tensor, Tensor]:
        p = self.params
        u = action[:, 0].float().clamp(-p.max_torque, p.max_torque)
        torque_cost = (0.001 * u.square()).double()
        costs = angle_normalize(s.theta) ** 2 + 0.1 * s.theta_dot**2 + torque_cost
        torque_acc = (3.0 / (p.m * p.l**2) * u).double()
        theta_dot = s.theta_dot + (3 * p.g / (2 * p.l) * torch.sin(s.theta) + torque_acc) * p.dt
        theta_dot = theta_dot.clamp(-p.max_speed, p.max_speed)
        theta = s.theta + theta_dot * p.dt
        terminated = torch.zeros_like(s.theta, dtype=torch.bool)
        return PendulumState(theta, theta_dot), (-costs).float(), terminated

    def _observe(self, s: PendulumState) -> Tensor:
        return stack_float32((torch.cos(s.theta), torch.sin(s.theta), s.theta_dot))


class PendulumNoVelEnv(PendulumEnv):
    """``PendulumNoVel-v1``: Pendulum-v1 with the angular velocity hidden (as RL-Zoo's ``PendulumNoVel-v1``):
    observation ``[N, 2]`` = cos and sin of the angle. Everything else is Pendulum-v1's."""

    obs_shape = (2,)
    obs_high = (1.0, 1.0)
    obs_low = (-1.0, -1.0)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.obs_high, self.obs_low = (1.0, 1.0), (-1.0, -1.0)

    def _observe(self, s: PendulumState) -> Tensor:
        return stack_float32((torch.cos(s.theta), torch.sin(s.theta)))
