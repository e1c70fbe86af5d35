"""MountainCar-v0 and MountainCarContinuous-v0 (Gymnasium 1.x) as N tensor environments.

Precision. ``MountainCarEnv`` computes in float64 Python/NumPy scalars and casts the observation to float32;
the inner state here is float64 with the same operation order, so observations agree to float32 rounding.

``Continuous_MountainCarEnv`` is subtler: its reset state is a float64 array, but every ``step`` stores the
state as a float32 array, and under NumPy 2 promotion rules (NEP 50: a Python float takes the dtype of the
NumPy scalar it meets) part of the arithmetic then runs in float32 and part in float64 (``math.cos``, and
Python floats wherever ``min``/``max`` clipped the action). :class:`MountainCarContinuousEnv` reproduces that
mix exactly: its state carries a ``stepped`` flag that says whether Gymnasium would hold it in float32, and
the transition evaluates each operation in the precision Gymnasium uses. Plain float64 would differ from
Gymnasium by float32 rounding on every step, and those differences accumulate over 999 steps. (NumPy 1.x
value-based casting computes more of it in float64; parity with that is only to ~1e-7.)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch
from torch import Tensor

from rl_gpu.envs.base import TensorEnv, stack_float32


def _round_f32(x: float) -> float:
    """``x`` rounded to the nearest float32, as a Python float (what NumPy compares a float32 scalar with)."""
    return struct.unpack("f", struct.pack("f", x))[0]


@dataclass(frozen=True)
class MountainCarParams:
    """Constants of Gymnasium's ``MountainCarEnv`` (same attribute names)."""

    positive: ClassVar[tuple[str, ...]] = ('max_speed',)
    """Parameters that must be above 0 (checked when the environment is built)."""

    min_position: float = -1.2
    max_position: float = 0.6
    max_speed: float = 0.07
    goal_position: float = 0.5
    goal_velocity: float = 0.0
    force: float = 0.001
    """Velocity change per step of a full push (action 0 or 2)."""
    gravity: float = 0.0025
    """Slope term: ``velocity += -gravity * cos(3 * position)`` (the hill is ``sin(3 x)``)."""


@dataclass(frozen=True)
class ContinuousMountainCarParams:
    """Constants of Gymnasium's ``Continuous_MountainCarEnv`` (same attribute names)."""

    positive: ClassVar[tuple[str, ...]] = ('max_speed', 'power')
    """Parameters that must be above 0 (checked when the environment is built)."""

    min_action: float = -1.0
    max_action: float = 1.0
    min_position: float = -1.2
    max_position: float = 0.6
    max_speed: float = 0.07
    goal_position: float = 0.45
    goal_velocity: float = 0.0
    power: float = 0.0015
    """Velocity change per step per unit of (clipped) action."""
    gravity: float = 0.0025
    """A literal inside Gymnasium's ``step``: ``velocity += force * power - gravity * cos(3 * position)``."""
    goal_reward: float = 100.0
    action_cost: float = 0.1
    """Reward per step is ``-action_cost * action**2`` on the unclipped action."""


def _obs_bounds(p: MountainCarParams | ContinuousMountainCarParams) -> tuple[tuple[float, ...], ...]:
    """Gymnasium's box: the position and speed clip limits."""
    return (p.min_position, -p.max_speed), (p.max_position, p.max_speed)


class MountainCarState(NamedTuple):
    """Inner state of N discrete mountain cars; every field is ``[N]`` float64."""

    position: Tensor
    velocity: Tensor


class ContinuousMountainCarState(NamedTuple):
    """Inner state of N continuous mountain cars."""

    position: Tensor
    """``[N]`` float64 (float32-representable once ``stepped``)."""
    velocity: Tensor
    """``[N]`` float64 (float32-representable once ``stepped``)."""
    stepped: Tensor
    """``[N]`` bool: the episode has taken a step, so Gymnasium holds the state in float32 (its reset state is
    float64). Selects the precision of the next transition."""


RESET_LOW = -0.6
RESET_HIGH = -0.4
"""Both mountain cars start at rest at a position uniform in ``[RESET_LOW, RESET_HIGH)``."""


class MountainCarEnv(TensorEnv[MountainCarState]):
    """``MountainCar-v0``: drive an underpowered car up the right hill by rocking it back and forth.

    - Observation ``[N, 2]`` float32: position in ``[-1.2, 0.6]``, velocity in ``[-0.07, 0.07]``.
    - Actions: 3 discrete, all legal: accelerate left, don't accelerate, accelerate right.
    - Dynamics: ``velocity += (action - 1) * force - gravity * cos(3 * position)``, clipped to
      ``±max_speed``; ``position += velocity``, clipped to ``[min_position, max_position]``; hitting the
      left wall stops the car.
    - Reward: -1 per step (including the terminating one).
    - Terminated: ``position >= 0.5`` and ``velocity >= goal_velocity`` (0).
    - Truncated: after 200 steps.
    - Reset: position uniform in ``[-0.6, -0.4)``, velocity 0.

    Keyword arguments other than the base class's override fields of :class:`MountainCarParams`
    (``goal_velocity`` is the one ``gymnasium.make`` accepts).
    """

    obs_shape = (2,)
    num_actions = 3
    max_episode_steps = 200
    obs_low, obs_high = _obs_bounds(MountainCarParams())

    params_type = MountainCarParams

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.obs_low, self.obs_high = _obs_bounds(self.params)

    def _sample_initial_state(self, num_envs: int, generator: torch.Generator) -> MountainCarState:
        u = torch.rand(num_envs, dtype=torch.float64, device=self.device, generator=generator)
        position = RESET_LOW + (RESET_HIGH - RESET_LOW) * u
        return MountainCarState(position, torch.zeros_like(position))

    def _transition(self, s: MountainCarState, action: Tensor) -> tuple[MountainCarState, Tensor, Tensor]:
        p = self.params
        push = (action - 1).double() * p.force
        velocity = s.velocity + (push + torch.cos(3 * s.position) * (-p.gravity))
        velocity = velocity.clamp(-p.max_speed, p.max_speed)
        position = (s.position + velocity).clamp(p.min_position, p.max_position)
        velocity = torch.where((position == p.min_position) & (velocity < 0), 0.0, velocity)
        terminated = (position >= p.goal_position) & (velocity >= p.goal_velocity)
        reward = torch.full_like(position, -1.0, dtype=torch.float32)
        return MountainCarState(position, velocity), reward, terminated

    def _observe(self, s: MountainCarState) -> Tensor:
        return stack_float32(tuple(s))


class MountainCarContinuousEnv(TensorEnv[ContinuousMountainCarState]):
    """``MountainCarContinuous-v0``: the mountain car with a continuous, costly throttle.

    - Observation ``[N, 2]`` float32: position in ``[-1.2, 0.6]``, velocity in ``[-0.07, 0.07]``.
    - Action ``[N, 1]`` float in ``[-1, 1]``; values outside are clipped for the dynamics (the reward uses the
      unclipped value, as Gymnasium's does).
    - Dynamics: ``velocity += clip(action) * power - 0.0025 * cos(3 * position)``, clipped to ``±max_speed``;
      ``position += velocity``, clipped to ``[min_position, max_position]``; hitting the left wall stops the
      car. Evaluated in Gymnasium's mix of float32 and float64 (module docstring).
    - Reward: ``-0.1 * action**2`` per step, plus 100 on the terminating step.
    - Terminated: ``position >= 0.45`` and ``velocity >= goal_velocity`` (0).
    - Truncated: after 999 steps.
    - Reset: position uniform in ``[-0.6, -0.4)``, velocity 0.

    Keyword arguments other than the base class's override fields of :class:`ContinuousMountainCarParams`
    (``goal_velocity`` is the one ``gymnasium.make`` accepts).
    """

    obs_shape = (2,)
    action_shape = (1,)
    action_low = (ContinuousMountainCarParams.min_action,)
    action_high = (ContinuousMountainCarParams.max_action,)
    max_episode_steps = 999
    obs_low, obs_high = _obs_bounds(ContinuousMountainCarParams())

    params_type = ContinuousMountainCarParams

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.action_low = (self.params.min_action,)
        self.action_high = (self.params.max_action,)
        self.obs_low, self.obs_high = _obs_bounds(self.params)

    def _sample_initial_state(self, num_envs: int, generator: torch.Generator) -> ContinuousMountainCarState:
        u = torch.rand(num_envs, dtype=torch.float64, device=self.device, generator=generator)
        position = RESET_LOW + (RESET_HIGH - RESET_LOW) * u
        stepped = torch.zeros(num_envs, dtype=torch.bool, device=self.device)
        return ContinuousMountainCarState(position, torch.zeros_like(position), stepped)

    def _move(
        self, position: Tensor, velocity: Tensor, increment: Tensor, as_float32: bool
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Gymnasium's update after the velocity increment, with the state held in float32 or float64.

        In float32 NumPy compares and adds with each Python constant rounded to float32; a clipped value is a
        Python float that is stored back as float32, i.e. the rounded bound.
        """
        p = self.params
        c = _round_f32 if as_float32 else float
        velocity = (velocity + increment).clamp(-c(p.max_speed), c(p.max_speed))
        position = (position + velocity).clamp(c(p.min_position), c(p.max_position))
        velocity = torch.where((position == c(p.min_position)) & (velocity < 0), 0.0, velocity)
        terminated = (position >= c(p.goal_position)) & (velocity >= c(p.goal_velocity))
        return position.double(), velocity.double(), terminated

    def _transition(
        self, s: ContinuousMountainCarState, action: Tensor
    ) -> tuple[ContinuousMountainCarState, Tensor, Tensor]:
        p = self.params
        a = action[:, 0].float()
        # Python's min(max(a, low), high) returns the float32 action itself when it is within bounds, so
        # NumPy float32 arithmetic follows; otherwise it returns the Python float bound, and float64
        # arithmetic follows.
        within = (a >= _round_f32(p.min_action)) & (a <= _round_f32(p.max_action))
        force = a.double().clamp(p.min_action, p.max_action)
        # math.cos of 3 * position, where 3 * position is computed in the state's precision.
        position32 = s.position.float()
        three_p = torch.where(s.stepped, (3 * position32).double(), 3 * s.position)
        slope = p.gravity * torch.cos(three_p)
        increment32 = a * _round_f32(p.power) - slope.float()
        increment = torch.where(within, increment32.double(), force * p.power - slope)
        # A float32 velocity plus a Python float increment: NumPy rounds the increment to float32 first.
        pos32, vel32, term32 = self._move(position32, s.velocity.float(), increment.float(), as_float32=True)
        pos64, vel64, term64 = self._move(s.position, s.velocity, increment, as_float32=False)
        position = torch.where(s.stepped, pos32, pos64)
        velocity = torch.where(s.stepped, vel32, vel64)
        terminated = torch.where(s.stepped, term32, term64)
        # Gymnasium stores the state as float32 after every step.
        nxt = ContinuousMountainCarState(
            position.float().double(), velocity.float().double(), torch.ones_like(s.stepped)
        )
        reward = p.goal_reward * terminated.double() - a.double().square() * p.action_cost
        # Gymnasium charges the unclipped action; past |a| ~ 6e19 that cost overflows float32, so it saturates
        # at float32's lowest finite value instead of becoming -inf.
        lowest = torch.finfo(torch.float32).min
        return nxt, reward.clamp(min=lowest).float(), terminated

    def _observe(self, s: ContinuousMountainCarState) -> Tensor:
        return stack_float32((s.position, s.velocity))
