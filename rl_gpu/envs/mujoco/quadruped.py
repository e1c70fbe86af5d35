"""A legged robot tracking velocity commands: Unitree Go1 on flat ground (``Go1-Velocity-v0``), the task of
legged_gym, Isaac Lab and mjlab's flat velocity environments on the batched MuJoCo engine.

The model is MuJoCo Menagerie's Go1 with its visual meshes removed (``assets/go1``: collision primitives only,
so each domain-randomisation variant is a small copy). Everything the task adds lives in ``inner.task``:
commands, a step counter, the last action and a per-row random key. Command resampling and pushes need
randomness mid-episode; it comes from a counter-based hash of (row key, step, stream) in torch, so a
transition stays a pure function of the state: same seed, same episode; a restored state continues exactly.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields

import torch
from torch import Tensor

from rl_gpu.core.types import Mirror
from rl_gpu.envs.mujoco.base import MjInner, MujocoEnv, check_task_params
from rl_gpu.envs.mujoco.randomization import Randomization
from rl_gpu.envs.params import build_params
from rl_gpu.envs.random_draws import hash_uniform

ASSETS = os.path.join(os.path.dirname(__file__), "assets", "go1")


def quat_rotate_inverse(quat: Tensor, v: Tensor) -> Tensor:
    """``[N, 3]`` world vectors ``v`` in the frame of ``[N, 4]`` (w, x, y, z) quaternions: ``R(q)^T v``."""
    q = quat / quat.norm(dim=1, keepdim=True)
    w, u = q[:, :1], -q[:, 1:]
    t = 2.0 * torch.linalg.cross(u, v, dim=1)
    return v + w * t + torch.linalg.cross(u, t, dim=1)


MAX_ACTION_DELAY = 10
"""Most policy steps of motor latency (0.2 s at 50 Hz)."""

OBS_NOISE_SCALES = (0.1,) * 3 + (0.2,) * 3 + (0.05,) * 3 + (0.0,) * 3 + (0.01,) * 12 + (1.5,) * 12 + (0.0,) * 12
"""Per observation entry, the noise at level 1 (:attr:`Go1VelocityParams.obs_noise`)."""

def _legs(offset: int) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """The mirror of 12 per-joint entries from ``offset`` (legs FR, FL, RR, RL; hip abduction, thigh, calf):
    right and left legs swap, and abduction (a rotation about the forward axis) changes sign."""
    index = tuple(offset + 3 * leg + j for leg in (1, 0, 3, 2) for j in range(3))
    return index, (-1.0, 1.0, 1.0) * 4


def go1_mirror() -> Mirror:
    """Go1's left-right symmetry (y -> -y): velocities (vx, -vy, vz), angular velocities (-wx, wy, -wz), gravity
    (gx, -gy, gz), commands (vx, -vy, -yaw rate), joints, joint velocities and actions by :func:`_legs`; the critic
    group's height, friction and mass stay, its foot contacts swap sides."""
    vectors = (tuple(range(12)), (1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0, 1.0, -1.0, -1.0))
    parts = [vectors, _legs(12), _legs(24), _legs(36)]
    action = _legs(0)
    return Mirror(obs_index=sum((p[0] for p in parts), ()), obs_sign=sum((p[1] for p in parts), ()),
                  action_index=action[0], action_sign=action[1],
                  critic_index=(0, 1, 2, 4, 3, 6, 5), critic_sign=(1.0,) * 7)


# Streams of the per-row hash draws (rl_gpu.envs.random_draws.hash_uniform): each its own lanes.
_COMMANDS, _PUSHES, _OBS_NOISE, _IMU_BIAS, _DELAY = 1, 2, 3, 4, 5


@dataclass(frozen=True)
class Go1VelocityParams:
    """Commands, action, reward weights, terminations, pushes and resets of ``Go1-Velocity-v0``.

    Reward weights are per second: each term is ``weight * dt * value`` (legged_gym's convention), so the
    return of an episode does not depend on the control rate.
    """

    lin_vel_x: tuple[float, float] = (-1.0, 1.0)
    """Forward velocity command range (m/s, body frame)."""
    lin_vel_y: tuple[float, float] = (-0.5, 0.5)
    """Sideways velocity command range (m/s, body frame)."""
    ang_vel_z: tuple[float, float] = (-1.0, 1.0)
    """Yaw-rate command range (rad/s)."""
    zero_command_probability: float = 0.1
    """Chance that a drawn command is all zeros (standing still)."""
    command_resample_steps: int = 500
    """Commands are drawn again every this many steps (10 s)."""
    action_scale: float = 0.25
    """Joint target = home pose + action_scale * action (rad)."""
    stiffness: float = 35.0
    """Proportional gain of every joint's position servo (N m / rad): the model's 100 holds the pose rigidly but
    turns exploration noise on the targets into torque spikes at the force limits; 35 is MuJoCo Playground's
    gain for this model."""
    joint_damping: float = 0.5
    """Damping of every leg joint (N m s / rad), replacing the model's 1-2, with :attr:`stiffness`."""
    clip_actions: float = 10.0
    """Actions are clipped to ``[-clip_actions, clip_actions]`` (the spec's bounds)."""
    tracking_sigma: float = 0.25
    """Width of the tracking kernels ``exp(-error**2 / sigma)``."""
    track_lin_vel_xy: float = 1.0
    track_ang_vel_z: float = 0.5
    lin_vel_z: float = -2.0
    ang_vel_xy: float = -0.05
    orientation: float = -2.5
    torques: float = -2e-4
    action_rate: float = -0.01
    feet_air_time: float = 1.0
    """Paid at each touchdown, ``sum over feet of (air time - air_time_target)`` (seconds, times ``dt`` like every
    term), while the planar command is above 0.1 m/s: it rewards stepping, where a robot that stands still is a
    local optimum of the tracking terms alone (commands average zero)."""
    air_time_target: float = 0.5
    """Swing duration (s) above which a step earns :attr:`feet_air_time` (legged_gym's 0.5 s)."""
    termination: float = -10.0
    only_positive_rewards: bool = False
    """True: the reward is ``max(0, sum of the other terms) + termination`` (legged_gym's option against a policy
    that learns to fall early because its steps cost more than they earn)."""
    max_tilt: float = 1.0
    """Terminated when the trunk's up axis is more than this many radians from vertical."""
    min_base_height: float = 0.12
    """Terminated when the trunk origin is lower than this (m); the home pose stands at about 0.26."""
    push_interval_steps: int = 750
    """A planar velocity kick every this many steps (15 s); 0 turns pushes off."""
    max_push_velocity: float = 1.0
    """Each kick adds U(-v, v) m/s to the trunk's world x and y velocities."""
    reset_joint_noise: float = 0.1
    """Episode starts: home joint angles + U(-noise, noise) rad (kept inside the joint ranges)."""
    reset_velocity_noise: float = 0.1
    """Episode starts: trunk linear and angular velocity U(-noise, noise); yaw is uniform."""
    obs_noise: float = 0.0
    """Observation noise level: every step, U(-1, 1) x level x the entry's scale is added to each observation
    entry (legged_gym's scales: base linear velocity 0.1 m/s, angular velocity 0.2 rad/s, projected gravity 0.05,
    joint positions 0.01 rad, joint velocities 1.5 rad/s; the command and the last action are exact). 0: none."""
    action_delay: tuple[int, int] = (0, 0)
    """Motor latency in policy steps: each episode of each row applies the action taken this many steps earlier,
    drawn uniformly from the range (0: the current action; the queue starts at the home pose)."""
    imu_bias: float = 0.0
    """A miscalibrated IMU: per episode and row, a constant U(-b, b) added to the observed angular velocity
    (rad/s) and projected gravity. 0: none."""

    def __post_init__(self) -> None:
        check_task_params(self)
        for name in ("lin_vel_x", "lin_vel_y", "ang_vel_z"):
            low, high = getattr(self, name)
            if not low <= high:
                raise ValueError(f"{name} must be a (low, high) range with low <= high, got {(low, high)}")
        for name, least in (("command_resample_steps", 1), ("push_interval_steps", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
        if not 0.0 <= self.zero_command_probability <= 1.0:
            raise ValueError(f"zero_command_probability must be in [0, 1], got "
                             f"{self.zero_command_probability}")
        if not (self.tracking_sigma > 0 and self.clip_actions > 0 and self.stiffness > 0):
            raise ValueError("tracking_sigma, clip_actions and stiffness must be positive")
        if not isinstance(self.only_positive_rewards, bool):
            raise TypeError(f"only_positive_rewards must be True or False, got {self.only_positive_rewards!r}")
        if not (self.joint_damping >= 0 and self.air_time_target >= 0 and self.imu_bias >= 0):
            raise ValueError("joint_damping, air_time_target and imu_bias must be >= 0")
        low, high = self.action_delay
        if not (isinstance(low, int) and isinstance(high, int) and 0 <= low <= high <= MAX_ACTION_DELAY):
            raise ValueError(f"action_delay must be a (low, high) range of whole steps, 0 <= low <= high <= "
                             f"{MAX_ACTION_DELAY}, got {self.action_delay!r}")


DEFAULT_RANDOMIZATION = Randomization(friction=(0.4, 1.25), mass=(0.9, 1.1), motor_strength=(0.9, 1.1),
                                      damping=(0.8, 1.2), num_variants=32)
"""``Go1-Velocity-v0``'s default physics ranges (rsl_rl / Isaac Lab's usual friction range, +-10% masses and
motor strength, +-20% joint damping) over a pool of 32 model variants."""


class Go1VelocityEnv(MujocoEnv):
    """``Go1-Velocity-v0``: a Unitree Go1 follows per-row velocity commands on flat ground.

    - Observation ``[N, 48]`` float32: base linear velocity (body frame, 3), base angular velocity (body
      frame, 3), projected gravity (3), command (vx, vy, yaw rate; 3), joint positions minus the home pose
      (12), joint velocities (12), last action (12; clipped). Unscaled.
    - Action ``[N, 12]``: joint position offsets; target = home + ``action_scale`` * action, held by the
      MJCF's position servos (kp 100, joint damping 1-2) for 5 physics steps of 4 ms: a 50 Hz policy.
    - Reward: the sum of :attr:`reward_terms` (each ``weight * dt * value``, see :class:`Go1VelocityParams`;
      ``only_positive_rewards`` clips all but ``termination`` at zero).
    - Terminated: trunk tilted beyond ``max_tilt`` or lower than ``min_base_height``. Truncated: 1000 steps.
    - Pushes every ``push_interval_steps``; commands redrawn every ``command_resample_steps``.
    - Randomisation events, off by default (:class:`Go1VelocityParams`): ``obs_noise``, ``action_delay`` (a queue
      of the last actions after the fixed task columns), ``imu_bias``; and the pool of randomised models.
    """

    frame_skip = 5
    obs_shape = (48,)
    critic_obs_shape = (7,)
    """The ``critic`` group: :meth:`privileged_obs` (an asymmetric actor-critic's value function reads it)."""
    action_shape = (12,)
    max_episode_steps = 1000
    params_type = Go1VelocityParams
    mirror = go1_mirror()
    reward_terms = ("track_lin_vel_xy", "track_ang_vel_z", "lin_vel_z", "ang_vel_xy", "orientation",
                    "torques", "action_rate", "feet_air_time", "termination")
    task_size = 25
    CMD, STEP, KEY, LAST_ACTION, AIR_TIME, LAST_CONTACT = (slice(0, 3), 3, 4, slice(5, 17), slice(17, 21),
                                                           slice(21, 25))
    """Columns of ``inner.task``: command, steps since reset, random key (hash draws), last action, each foot's
    time in the air (s) and whether it touched at the previous step."""

    @classmethod
    def model_path(cls) -> str:
        return os.path.join(ASSETS, "scene.xml")

    def __init__(self, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None, **kwargs):
        # Randomised physics unless told otherwise (randomization=None: the nominal model): a walking policy
        # must not depend on one friction or one set of link masses.
        kwargs.setdefault("randomization", DEFAULT_RANDOMIZATION)
        # The servo gains are part of the model every variant is built from: known before the model loads.
        names = {f.name for f in fields(Go1VelocityParams)}
        self._gains = build_params(Go1VelocityParams, {k: v for k, v in kwargs.items() if k in names},
                                   type(self).__name__)
        # The last action_delay[1] actions are state (a queue after the fixed columns).
        self.task_size = type(self).task_size + 12 * self._gains.action_delay[1]
        self.QUEUE = slice(type(self).task_size, self.task_size)
        super().__init__(num_envs, device, seed, **kwargs)
        clip = float(self.params.clip_actions)
        self.action_low, self.action_high = (-clip,) * self.model.nu, (clip,) * self.model.nu
        self._error_sums = torch.zeros(3, dtype=torch.float64, device=self.device)
        self._error_count = torch.zeros((), dtype=torch.float64, device=self.device)

    def load_model(self):
        model = super().load_model()
        if self.backend == "mujoco-warp":
            # Menagerie's elliptic cone (go1.xml): MuJoCo Warp's float32 solver returns NaN with the pyramidal
            # cone and go1.xml's impratio of 100 (rl_gpu.envs.mujoco.warp_engine.check_supported).
            import mujoco  # present: the environment's engine needs it

            model.opt.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
        # MuJoCo's position servo: force = gain * ctrl + bias[1] * qpos, so gain = kp, bias[1] = -kp.
        model.actuator_gainprm[:, 0] = self._gains.stiffness
        model.actuator_biasprm[:, 1] = -self._gains.stiffness
        model.dof_damping[6:] = self._gains.joint_damping
        self.home_qpos = torch.tensor(model.key("home").qpos, dtype=torch.float64)
        ranges = torch.tensor(model.jnt_range[1:], dtype=torch.float64)  # the hinges after the free joint
        self.joint_low, self.joint_high = ranges[:, 0], ranges[:, 1]
        self.trunk_body = model.body("trunk").id
        return model

    def _sample_initial_state(self, num_envs: int, generator: torch.Generator) -> MjInner:
        for name in ("home_qpos", "joint_low", "joint_high"):
            setattr(self, name, getattr(self, name).to(self.device))
        return super()._sample_initial_state(num_envs, generator)

    # --- views ------------------------------------------------------------------------------------------

    def base_velocity(self, inner: MjInner) -> tuple[Tensor, Tensor]:
        """``([N, 3] linear, [N, 3] angular)`` float64 velocity of the trunk in its own frame. MuJoCo's free
        joint keeps the linear velocity in the world frame (``qvel[0:3]``) and the angular one in the body
        frame (``qvel[3:6]``)."""
        qpos, qvel = self.qpos(inner), self.qvel(inner)
        return quat_rotate_inverse(qpos[:, 3:7], qvel[:, 0:3]), qvel[:, 3:6]

    def projected_gravity(self, inner: MjInner) -> Tensor:
        """``[N, 3]`` the unit gravity direction in the trunk frame (``(0, 0, -1)`` when level)."""
        down = torch.zeros_like(self.qvel(inner)[:, :3])
        down[:, 2] = -1.0
        return quat_rotate_inverse(self.qpos(inner)[:, 3:7], down)

    def commands(self, inner: MjInner) -> Tensor:
        """``[N, 3]`` float64 (vx, vy, yaw rate) commands."""
        return inner.task[:, self.CMD]

    def tracking_error(self, inner: MjInner) -> Tensor:
        """``[N, 3]`` float64 absolute errors ``|command - velocity|`` of (vx, vy, yaw rate), body frame."""
        lin, ang = self.base_velocity(inner)
        actual = torch.cat((lin[:, :2], ang[:, 2:]), dim=1)
        return (self.commands(inner) - actual).abs()

    def joint_torques(self, inner: MjInner) -> Tensor:
        """``[N, 12]`` actuator forces of the last physics step (``actuatorfrc`` sensors; 0 at a reset)."""
        return inner.observed[:, :self.model.nu]

    def foot_contact(self, inner: MjInner) -> Tensor:
        """``[N, 4]`` bool: the FR, FL, RR, RL feet touch something at the last physics step (``touch``
        sensors; False at a reset)."""
        return inner.observed[:, self.model.nu:self.model.nu + 4] > 0

    def privileged_obs(self, inner: MjInner) -> Tensor:
        """``[N, 7]`` float32 for a critic (not used by the policy observation): trunk height, the row
        variant's friction scale and trunk mass scale (1 without randomisation), four foot contact flags."""
        friction = mass = torch.ones(inner.variant.shape[0], dtype=torch.float64, device=self.device)
        if self.variant_scales is not None:
            scales = self.variant_scales
            friction = torch.from_numpy(scales["friction"][:, 0]).to(self.device)[inner.variant]
            mass = torch.from_numpy(scales["mass"][:, self.trunk_body]).to(self.device)[inner.variant]
        height = self.qpos(inner)[:, 2]
        return torch.cat((torch.stack((height, friction, mass), dim=1), self.foot_contact(inner).double()),
                         dim=1).float()

    def _observe_critic(self, inner: MjInner) -> Tensor:
        return self.privileged_obs(inner)

    # --- the task ---------------------------------------------------------------------------------------

    def _reset_physics(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        p = self.params
        qpos = self.home_qpos.expand(n, -1).clone()
        yaw = self.uniform(-math.pi, math.pi, (n,), generator)
        qpos[:, 3], qpos[:, 6] = torch.cos(yaw / 2), torch.sin(yaw / 2)
        noise = self.uniform(-p.reset_joint_noise, p.reset_joint_noise, (n, self.model.nu), generator)
        qpos[:, 7:] = torch.clamp(qpos[:, 7:] + noise, self.joint_low, self.joint_high)
        qvel = torch.zeros(n, self.layout.nv, dtype=torch.float64, device=self.device)
        qvel[:, :6] = self.uniform(-p.reset_velocity_noise, p.reset_velocity_noise, (n, 6), generator)
        return qpos, qvel

    def _draw_commands(self, key: Tensor, counter: Tensor) -> Tensor:
        p = self.params
        u = hash_uniform(key, counter, stream=_COMMANDS, size=4)
        low, high = torch.tensor([p.lin_vel_x, p.lin_vel_y, p.ang_vel_z], dtype=torch.float64,
                                 device=key.device).T
        command = low + (high - low) * u[:, :3]
        return torch.where(u[:, 3:] < p.zero_command_probability, torch.zeros_like(command), command)

    def _reset_task(self, n: int, generator: torch.Generator) -> Tensor:
        task = torch.zeros(n, self.task_size, dtype=torch.float64, device=self.device)
        key = torch.randint(0, 2**31, (n,), device=self.device, generator=generator).double()
        task[:, self.KEY] = key
        task[:, self.CMD] = self._draw_commands(key, torch.zeros_like(key))
        return task

    def delay_steps(self, inner: MjInner) -> Tensor:
        """``[N]`` int64: how many steps late each row's motors apply its actions this episode."""
        low, high = self.params.action_delay
        u = hash_uniform(inner.task[:, self.KEY], torch.zeros_like(inner.task[:, self.KEY]), stream=_DELAY, size=1)
        return (low + (u[:, 0] * (high - low + 1)).long()).clamp(max=high)

    def _control(self, inner: MjInner, action: Tensor) -> Tensor:
        # Kept for _rewards (action rate) and _next_task (last action) of the same transition.
        clip = self.params.clip_actions
        self._clipped_action = applied = action.double().clamp(-clip, clip)
        if self.params.action_delay[1] > 0:
            queue = inner.task[:, self.QUEUE].view(-1, self.params.action_delay[1], 12)
            choices = torch.cat((applied.unsqueeze(1), queue), dim=1)         # [N, 1 + max delay, 12]: now, 1, 2...
            index = self.delay_steps(inner).view(-1, 1, 1).expand(-1, 1, 12)
            applied = choices.gather(1, index).squeeze(1)
        return self.home_qpos[7:] + self.params.action_scale * applied

    def _perturb(self, inner: MjInner) -> Tensor:
        p = self.params
        if p.push_interval_steps <= 0 or p.max_push_velocity == 0:
            return inner.physics
        step, key = inner.task[:, self.STEP], inner.task[:, self.KEY]
        push = (step > 0) & (torch.remainder(step, p.push_interval_steps) == 0)
        kick = p.max_push_velocity * (2.0 * hash_uniform(key, step, stream=_PUSHES, size=2) - 1.0)
        physics = inner.physics.clone()
        vxy = slice(self.layout.qvel.start, self.layout.qvel.start + 2)
        physics[:, vxy] += torch.where(push.unsqueeze(1), kick, torch.zeros_like(kick))
        return physics

    def _next_task(self, before: MjInner, after: MjInner) -> Tensor:
        task = before.task.clone()
        step = task[:, self.STEP] + 1
        task[:, self.STEP] = step
        resample = torch.remainder(step, self.params.command_resample_steps) == 0
        fresh = self._draw_commands(task[:, self.KEY], step)
        task[:, self.CMD] = torch.where(resample.unsqueeze(1), fresh, task[:, self.CMD])
        task[:, self.LAST_ACTION] = self._clipped_action
        if self.params.action_delay[1] > 0:  # the newest action first, the oldest dropped
            task[:, self.QUEUE] = torch.cat((self._clipped_action, before.task[:, self.QUEUE][:, :-12]), dim=1)
        task[:, self.AIR_TIME] = self._air_time
        task[:, self.LAST_CONTACT] = self.foot_contact(after).double()
        return task

    def _observe(self, inner: MjInner) -> Tensor:
        p = self.params
        lin, ang = self.base_velocity(inner)
        gravity = self.projected_gravity(inner)
        key = inner.task[:, self.KEY]
        if p.imu_bias > 0:  # drawn from the episode's key: constant over the episode
            bias = p.imu_bias * (2.0 * hash_uniform(key, torch.zeros_like(key), stream=_IMU_BIAS, size=6) - 1.0)
            ang, gravity = ang + bias[:, :3], gravity + bias[:, 3:]
        joints = self.qpos(inner)[:, 7:] - self.home_qpos[7:]
        obs = torch.cat((lin, ang, gravity, self.commands(inner), joints, self.qvel(inner)[:, 6:],
                         inner.task[:, self.LAST_ACTION]), dim=1)
        if p.obs_noise > 0:  # fresh each step, a pure function of (key, step): the same state, the same observation
            u = hash_uniform(key, inner.task[:, self.STEP], stream=_OBS_NOISE, size=obs.shape[1])
            scales = torch.tensor(OBS_NOISE_SCALES, dtype=obs.dtype, device=obs.device)
            obs = obs + p.obs_noise * scales * (2.0 * u - 1.0)
        return obs.float()

    def _rewards(self, before: MjInner, after: MjInner, action: Tensor) -> tuple[dict[str, Tensor], Tensor]:
        p, dt = self.params, self.dt
        lin, ang = self.base_velocity(after)
        gravity = self.projected_gravity(after)
        # after.task is still before.task here: the command the policy acted on.
        self._step_errors = error = self.tracking_error(after)
        action_rate = (self._clipped_action - before.task[:, self.LAST_ACTION]).square().sum(dim=1)
        # legged_gym's touchdown rule: a foot lands when it touches now or touched one step ago (the touch
        # sensor of a sphere foot flickers) after time in the air; its swing time is paid, then restarts.
        contact = self.foot_contact(after)
        touching = contact | (before.task[:, self.LAST_CONTACT] > 0)
        air_time = before.task[:, self.AIR_TIME] + dt
        touchdown = touching & (before.task[:, self.AIR_TIME] > 0)
        moving = self.commands(before)[:, :2].norm(dim=1) > 0.1
        feet_air_time = ((air_time - p.air_time_target) * touchdown).sum(dim=1) * moving
        self._air_time = torch.where(touching, torch.zeros_like(air_time), air_time)
        terminated = (gravity[:, 2] > -math.cos(p.max_tilt)) | (self.qpos(after)[:, 2] < p.min_base_height)
        terms = {
            "track_lin_vel_xy": p.track_lin_vel_xy * torch.exp(-error[:, :2].square().sum(dim=1)
                                                               / p.tracking_sigma),
            "track_ang_vel_z": p.track_ang_vel_z * torch.exp(-error[:, 2].square() / p.tracking_sigma),
            "lin_vel_z": p.lin_vel_z * lin[:, 2].square(),
            "ang_vel_xy": p.ang_vel_xy * ang[:, :2].square().sum(dim=1),
            "orientation": p.orientation * gravity[:, :2].square().sum(dim=1),
            "torques": p.torques * self.joint_torques(after).square().sum(dim=1),
            "action_rate": p.action_rate * action_rate,
            "feet_air_time": p.feet_air_time * feet_air_time,
            "termination": p.termination * terminated.double(),
        }
        return {name: dt * value for name, value in terms.items()}, terminated

    def _total_reward(self, terms: Tensor) -> Tensor:
        if not self.params.only_positive_rewards:
            return terms.sum(dim=1)
        fall = self.reward_terms.index("termination")
        return (terms.sum(dim=1) - terms[:, fall]).clamp(min=0.0) + terms[:, fall]

    # --- tracking statistics ----------------------------------------------------------------------------

    def step_rows(self, state, action, reset_inner, rows):
        new_state, result = super().step_rows(state, action, reset_inner, rows)
        live = torch.ones_like(state.done) if self.autoreset else ~state.done
        self._error_sums += torch.where(live.unsqueeze(1), self._step_errors, 0.0).sum(dim=0)
        self._error_count += live.sum()
        return new_state, result

    @property
    def step_errors(self) -> Tensor:
        """``[N, 3]`` float64 absolute (vx, vy, yaw rate) tracking errors of the last step's rows."""
        return self._step_errors

    def tracking_error_stats(self) -> dict[str, Tensor]:
        """``{"lin_vel_x", "lin_vel_y", "ang_vel_z": 0-dim tensor}``: mean absolute tracking error (command
        minus body-frame velocity after the step) over every row-step since the last call (NaN when none);
        the sums restart."""
        mean = self._error_sums / self._error_count
        self._error_sums.zero_()
        self._error_count.zero_()
        return {name: mean[i] for i, name in enumerate(("lin_vel_x", "lin_vel_y", "ang_vel_z"))}
