"""Acrobot-v1 (Gymnasium 1.x ``AcrobotEnv``, book dynamics, RK4 with dt = 0.2) as N tensor environments.

Precision: Gymnasium integrates in float64 NumPy (its reset state is drawn in float64 and rounded to float32)
and casts the observation to float32. The inner state here is float64 and every expression follows
Gymnasium's operation order, so one step matches Gymnasium's to float32 rounding. The acrobot is chaotic,
though: the occasional 1-ulp float64 differences between torch's and libm's sin/cos/pow grow over an
episode, to ~1e-7 within 50 steps at worst and ~1e-3 after a few hundred, as Gymnasium's own trajectories
would on another libm. Devices without float64 (MPS) are not supported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch
from torch import Tensor

from rl_gpu.envs.base import TensorEnv, stack_float32


@dataclass(frozen=True)
class AcrobotParams:
    """Physical constants of Gymnasium's acrobot (same names as ``AcrobotEnv`` class attributes)."""

    positive: ClassVar[tuple[str, ...]] = ('dt', 'LINK_MASS_1', 'LINK_MASS_2', 'LINK_MOI', 'max_vel_1_pi', 'max_vel_2_pi')
    """Parameters that must be above 0 (checked when the environment is built)."""

    dt: float = 0.2
    """Integration step in seconds (one RK4 step per action)."""
    LINK_LENGTH_1: float = 1.0
    LINK_LENGTH_2: float = 1.0
    """Only drawn in Gymnasium's renderer; the dynamics use the centre-of-mass positions."""
    LINK_MASS_1: float = 1.0
    LINK_MASS_2: float = 1.0
    LINK_COM_POS_1: float = 0.5
    LINK_COM_POS_2: float = 0.5
    LINK_MOI: float = 1.0
    """Moment of inertia of either link."""
    gravity: float = 9.8
    """A literal inside Gymnasium's ``_dsdt``."""
    max_vel_1_pi: float = 4
    max_vel_2_pi: float = 9
    """Velocity bounds as multiples of pi."""
    AVAIL_TORQUE: tuple[float, float, float] = (-1.0, 0.0, 1.0)

    @property
    def MAX_VEL_1(self) -> float:
        return self.max_vel_1_pi * math.pi

    @property
    def MAX_VEL_2(self) -> float:
        return self.max_vel_2_pi * math.pi


def _obs_high(p: AcrobotParams) -> tuple[float, ...]:
    """Gymnasium's box: cosines and sines in ±1, the angular velocities' clip limits."""
    return (1.0, 1.0, 1.0, 1.0, p.MAX_VEL_1, p.MAX_VEL_2)


class AcrobotState(NamedTuple):
    """Inner state of N acrobots; every field is ``[N]`` float64. Angles in ``[-pi, pi]``."""

    theta1: Tensor
    """Angle of the first link, 0 = hanging straight down."""
    theta2: Tensor
    """Angle of the second link relative to the first."""
    dtheta1: Tensor
    dtheta2: Tensor


WRAP_ITERATIONS = 8
"""Gymnasium's ``wrap`` subtracts (or adds) 2 pi in a ``while`` loop; here the loop is unrolled this many
times, which wraps any angle below 17 pi. Velocities are bounded only after the RK4 step, so one step from
the most extreme states can leave an angle at about 33 rad (found by grid search and gradient ascent over
states with velocities at their bounds), which takes 5 iterations. Repeated subtraction rather than
``remainder`` keeps the result bit-identical to Gymnasium's."""


def _wrap(x: Tensor, low: float, high: float) -> Tensor:
    diff = high - low
    for _ in range(WRAP_ITERATIONS):
        x = torch.where(x > high, x - diff, x)
    for _ in range(WRAP_ITERATIONS):
        x = torch.where(x < low, x + diff, x)
    return x


class AcrobotEnv(TensorEnv[AcrobotState]):
    """``Acrobot-v1``: swing the free end of a two-link chain above the bar by torquing the middle joint.

    - Observation ``[N, 6]`` float32: ``cos(theta1), sin(theta1), cos(theta2), sin(theta2), dtheta1,
      dtheta2``; Gymnasium's box: ``±(1, 1, 1, 1, 4 pi, 9 pi)``.
    - Actions: 3 discrete, all legal: torque -1, 0, +1 on the middle joint.
    - Reward: -1 per step, 0 on the terminating step.
    - Terminated: ``-cos(theta1) - cos(theta1 + theta2) > 1`` (the free end is one link above the pivot).
    - Truncated: after 500 steps.
    - Reset: all four state variables uniform in ``[-0.1, 0.1)``, rounded to float32 as Gymnasium does.

    Keyword arguments other than the base class's override fields of :class:`AcrobotParams`.
    """

    obs_shape = (6,)
    num_actions = 3
    max_episode_steps = 500
    reset_low = -0.1
    reset_high = 0.1
    obs_high = _obs_high(AcrobotParams())
    obs_low = tuple(-v for v in obs_high)

    params_type = AcrobotParams

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # The bounds follow this instance's parameters (max_vel_1, max_vel_2), as Gymnasium's space does.
        self.obs_high = _obs_high(self.params)
        self.obs_low = tuple(-v for v in self.obs_high)
        self._torques = torch.tensor(self.params.AVAIL_TORQUE, dtype=torch.float64, device=self.device)

    def _sample_initial_state(self, num_envs: int, generator: torch.Generator) -> AcrobotState:
        u = torch.rand(4, num_envs, dtype=torch.float64, device=self.device, generator=generator)
        s = self.reset_low + (self.reset_high - self.reset_low) * u
        return AcrobotState(*s.float().double())

    def _dsdt(self, s: AcrobotState, a: Tensor) -> AcrobotState:
        """Time derivative of the state under torque ``a`` (Gymnasium's ``_dsdt``, book equations)."""
        p = self.params
        m1, m2 = p.LINK_MASS_1, p.LINK_MASS_2
        l1 = p.LINK_LENGTH_1
        lc1, lc2 = p.LINK_COM_POS_1, p.LINK_COM_POS_2
        I1 = I2 = p.LINK_MOI
        g = p.gravity
        pi = math.pi
        theta1, theta2, dtheta1, dtheta2 = s
        cos_theta2 = torch.cos(theta2)
        sin_theta2 = torch.sin(theta2)
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * cos_theta2) + I1 + I2
        d2 = m2 * (lc2**2 + l1 * lc2 * cos_theta2) + I2
        phi2 = m2 * lc2 * g * torch.cos(theta1 + theta2 - pi / 2.0)
        phi1 = (
            -m2 * l1 * lc2 * dtheta2**2 * sin_theta2
            - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin_theta2
            + (m1 * lc1 + m2 * l1) * g * torch.cos(theta1 - pi / 2)
            + phi2
        )
        ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * sin_theta2 - phi2) / (
            m2 * lc2**2 + I2 - d2**2 / d1
        )
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return AcrobotState(dtheta1, dtheta2, ddtheta1, ddtheta2)

    def _transition(self, s: AcrobotState, action: Tensor) -> tuple[AcrobotState, Tensor, Tensor]:
        p = self.params
        torque = self._torques[action]
        # Gymnasium's rk4 over t = [0, dt]: one classical Runge-Kutta step, same association of the sums.
        dt = p.dt
        dt2 = dt / 2.0
        k1 = self._dsdt(s, torque)
        k2 = self._dsdt(AcrobotState(*(y + dt2 * k for y, k in zip(s, k1))), torque)
        k3 = self._dsdt(AcrobotState(*(y + dt2 * k for y, k in zip(s, k2))), torque)
        k4 = self._dsdt(AcrobotState(*(y + dt * k for y, k in zip(s, k3))), torque)
        y = [y0 + dt / 6.0 * (a + 2 * b + 2 * c + d) for y0, a, b, c, d in zip(s, k1, k2, k3, k4)]
        nxt = AcrobotState(
            theta1=_wrap(y[0], -math.pi, math.pi),
            theta2=_wrap(y[1], -math.pi, math.pi),
            dtheta1=y[2].clamp(-p.MAX_VEL_1, p.MAX_VEL_1),
            dtheta2=y[3].clamp(-p.MAX_VEL_2, p.MAX_VEL_2),
        )
        terminated = -torch.cos(nxt.theta1) - torch.cos(nxt.theta2 + nxt.theta1) > 1.0
        reward = torch.where(terminated, 0.0, -1.0)
        return nxt, reward, terminated

    def _observe(self, s: AcrobotState) -> Tensor:
        angles = (torch.cos(s.theta1), torch.sin(s.theta1), torch.cos(s.theta2), torch.sin(s.theta2))
        return stack_float32((*angles, s.dtheta1, s.dtheta2))
