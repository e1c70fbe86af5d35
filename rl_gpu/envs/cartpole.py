"""CartPole-v1 (Gymnasium 1.x ``CartPoleEnv``) as N tensor environments.

Precision: Gymnasium integrates in float64 NumPy and casts the observation to float32. The inner state here
is float64 too, with every expression written in Gymnasium's operation order, so the observations agree to
float32 rounding (the only differences are 1-ulp float64 differences between torch's and libm's sin/cos).
Float32 inner state would drift from Gymnasium by ~1e-7 relative per step and could flip termination at the
thresholds; float64 costs next to nothing for a 4-number state. Devices without float64 (MPS) are not
supported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch
from torch import Tensor

from rl_gpu.envs.base import TensorEnv, stack_float32


@dataclass(frozen=True)
class CartPoleParams:
    """Physical constants of Gymnasium's cart-pole (same names as ``CartPoleEnv`` attributes)."""

    positive: ClassVar[tuple[str, ...]] = ('masscart', 'masspole', 'length', 'force_mag', 'tau', 'theta_threshold_degrees', 'x_threshold')
    """Parameters that must be above 0 (checked when the environment is built)."""

    gravity: float = 9.8
    masscart: float = 1.0
    masspole: float = 0.1
    length: float = 0.5
    """Half the pole's length."""
    force_mag: float = 10.0
    tau: float = 0.02
    """Seconds between state updates (explicit Euler)."""
    theta_threshold_degrees: float = 12
    x_threshold: float = 2.4
    sutton_barto_reward: bool = False
    """Reward 0 per surviving step and -1 on termination instead of +1 per step."""

    @property
    def total_mass(self) -> float:
        return self.masspole + self.masscart

    @property
    def polemass_length(self) -> float:
        return self.masspole * self.length

    @property
    def theta_threshold_radians(self) -> float:
        # Gymnasium's expression, kept verbatim so the float64 threshold is bit-identical.
        return self.theta_threshold_degrees * 2 * math.pi / 360


def _obs_high(p: CartPoleParams) -> tuple[float, ...]:
    # Gymnasium's box: twice the termination thresholds, so a terminal observation is still inside it.
    return (2 * p.x_threshold, math.inf, 2 * p.theta_threshold_radians, math.inf)


class CartPoleState(NamedTuple):
    """Inner state of N cart-poles; every field is ``[N]`` float64."""

    x: Tensor
    x_dot: Tensor
    theta: Tensor
    theta_dot: Tensor


class CartPoleEnv(TensorEnv[CartPoleState]):
    """``CartPole-v1``: balance a pole on a cart by pushing the cart left or right.

    - Observation ``[N, 4]`` float32: cart position, cart velocity, pole angle (rad), pole angular velocity.
      Gymnasium's box: ``±(2 * x_threshold, inf, 2 * theta_threshold_radians, inf)``.
    - Actions: 2 discrete, all legal. 0 pushes the cart left with ``force_mag``, 1 pushes it right.
    - Reward: +1 for every step, including the terminating one (``sutton_barto_reward=True``: 0 per step and
      -1 on the terminating step).
    - Terminated: ``|x| > x_threshold`` (2.4) or ``|theta| > theta_threshold_radians`` (12 degrees).
    - Truncated: after 500 steps.
    - Reset: all four state variables uniform in ``[-0.05, 0.05)``.

    Keyword arguments other than the base class's override fields of :class:`CartPoleParams`
    (``sutton_barto_reward=True`` is the one ``gymnasium.make`` accepts).
    """

    obs_shape = (4,)
    num_actions = 2
    max_episode_steps = 500
    reset_low = -0.05
    reset_high = 0.05
    obs_high = _obs_high(CartPoleParams())
    obs_low = tuple(-v for v in obs_high)

    params_type = CartPoleParams
    row_params = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.obs_high = _obs_high(self.params)
        self.obs_low = tuple(-v for v in self.obs_high)
        # The two pushes as float64 scalars on the device: the force is one where(), with no cast or product.
        self._push_left, self._push_right = (torch.tensor(f, dtype=torch.float64, device=self.device)
                                             for f in (-self.params.force_mag, self.params.force_mag))

    def _sample_initial_state(self, num_envs: int, generator: torch.Generator) -> CartPoleState:
        u = torch.rand(4, num_envs, dtype=torch.float64, device=self.device, generator=generator)
        # In place, rounded exactly as low + (high - low) * u.
        return CartPoleState(*u.mul_(self.reset_high - self.reset_low).add_(self.reset_low))

    def _transition(self, s: CartPoleState, action: Tensor) -> tuple[CartPoleState, Tensor, Tensor]:
        p = self.params
        if isinstance(p.force_mag, Tensor):  # a force per row (row_params)
            force = torch.where(action == 1, p.force_mag, -p.force_mag)
        else:
            force = torch.where(action == 1, self._push_right, self._push_left)
        costheta = torch.cos(s.theta)
        sintheta = torch.sin(s.theta)
        temp = (force + p.polemass_length * s.theta_dot.square() * sintheta) / p.total_mass
        thetaacc = (p.gravity * sintheta - costheta * temp) / (
            p.length * (4.0 / 3.0 - p.masspole * costheta.square() / p.total_mass)
        )
        xacc = temp - p.polemass_length * thetaacc * costheta / p.total_mass
        nxt = CartPoleState(
            x=s.x + p.tau * s.x_dot,
            x_dot=s.x_dot + p.tau * xacc,
            theta=s.theta + p.tau * s.theta_dot,
            theta_dot=s.theta_dot + p.tau * thetaacc,
        )
        theta_limit = p.theta_threshold_radians
        # |x| > t is Gymnasium's x < -t or x > t exactly (abs is exact; NaN is False in both).
        terminated = (nxt.x.abs() > p.x_threshold) | (nxt.theta.abs() > theta_limit)
        if p.sutton_barto_reward:
            reward = torch.where(terminated, -1.0, 0.0).float()
        else:
            reward = torch.ones_like(nxt.x, dtype=torch.float32)
        return nxt, reward, terminated

    def _observe(self, s: CartPoleState) -> Tensor:
        return stack_float32(tuple(s))


class CartPoleNoVelEnv(CartPoleEnv):
    """``CartPoleNoVel-v1``: CartPole-v1 with the velocities hidden (the standard partially observed benchmark,
    as RL-Zoo's ``CartPoleNoVel-v1``): observation ``[N, 2]`` = cart position and pole angle. Everything else is
    CartPole-v1's; a policy must infer the velocities from successive observations (memory)."""

    obs_shape = (2,)
    obs_high = tuple(CartPoleEnv.obs_high[i] for i in (0, 2))
    obs_low = tuple(-v for v in obs_high)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.obs_high = (self.obs_high[0], self.obs_high[2])
        self.obs_low = tuple(-v for v in self.obs_high)

    def _observe(self, s: CartPoleState) -> Tensor:
        return stack_float32((s.x, s.theta))
