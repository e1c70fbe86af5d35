"""A Franka Panda arm picking up a cube and lifting it to a target (``PandaPickCube-v0``): MuJoCo Playground's
PandaPickCube task (its scene, control, resets, observation and reward terms) on the batched MuJoCo engine.

The model is MuJoCo Menagerie's MJX Panda with its meshes removed (``assets/panda``: they never collided and carried
no mass). Everything the task adds lives in ``inner.task``: the controls held by the servos, the target, whether the
gripper has reached the cube, and a step counter. A transition is a pure function of the state, so resume is exact.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

import torch
from torch import Tensor

from rl_gpu.envs.mujoco.base import MjInner, MujocoEnv, check_task_params
from rl_gpu.envs.mujoco.randomization import Randomization

ASSETS = os.path.join(os.path.dirname(__file__), "assets", "panda")
ARM = slice(0, 7)
"""qpos columns of the seven arm joints (the two finger joints follow, then the cube's free joint)."""
BOX_POS, BOX_QUAT = slice(9, 12), slice(12, 16)
FLOOR_CONTACTS = slice(0, 3)
"""Columns of ``inner.observed``: the scene's sensors (hand, left pad and right pad touching the floor)."""


def quat_to_matrix(quat: Tensor) -> Tensor:
    """``[N, 3, 3]`` rotation matrices (rows as MuJoCo's ``xmat``) of ``[N, 4]`` (w, x, y, z) quaternions."""
    q = quat / quat.norm(dim=1, keepdim=True)
    w, x, y, z = q.unbind(1)
    return torch.stack((
        1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
    ), dim=1).view(-1, 3, 3)


def skew(axis) -> Tensor:
    """``[3, 3]`` float64 cross-product matrix of a unit axis (three numbers)."""
    x, y, z = (float(v) for v in axis)
    return torch.tensor([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]], dtype=torch.float64)


def axis_rotation(k: Tensor, angle: Tensor) -> Tensor:
    """``[N, 3, 3]`` rotations by ``[N]`` angles about the unit axis whose cross-product matrix is ``k``
    (Rodrigues' formula: ``I + sin(a) K + (1 - cos(a)) K^2``)."""
    s, c = torch.sin(angle)[:, None, None], torch.cos(angle)[:, None, None]
    return torch.eye(3, dtype=angle.dtype, device=angle.device) + s * k + (1 - c) * (k @ k)


class SerialChain:
    """Forward kinematics in torch of a site at the end of a chain of hinge joints (the arm): each body's fixed
    offset from its parent, then its hinge about its axis through its origin, as MuJoCo composes them; exact for
    the state it is given (MuJoCo's position sensors are read at the start of the last physics step)."""

    def __init__(self, model, site: str) -> None:
        site_id = model.site(site).id
        bodies, body = [], int(model.site_bodyid[site_id])
        while body != 0:
            bodies.append(body)
            body = int(model.body_parentid[body])
        self.links = []
        for b in reversed(bodies):
            joint = int(model.body_jntadr[b]) if model.body_jntnum[b] else None
            if joint is not None and (model.body_jntnum[b] != 1 or model.jnt_type[joint] != 3
                                      or any(model.jnt_pos[joint])):
                raise ValueError(f"body {model.body(b).name}: one hinge through its origin expected")
            rotation = torch.tensor(model.body_quat[b], dtype=torch.float64)[None]
            self.links.append((torch.tensor(model.body_pos[b], dtype=torch.float64), quat_to_matrix(rotation)[0],
                               None if joint is None else int(model.jnt_qposadr[joint]),
                               None if joint is None else skew(model.jnt_axis[joint])))
        self.site = (torch.tensor(model.site_pos[site_id], dtype=torch.float64),
                     quat_to_matrix(torch.tensor(model.site_quat[site_id], dtype=torch.float64)[None])[0])
        self._on: dict[torch.device, tuple] = {}

    def _constants(self, device: torch.device) -> tuple:
        """The links and the site on ``device`` (moved once per device)."""
        if device not in self._on:
            def move(x):  # tensors to the device; the qpos columns (ints) and missing joints (None) as they are
                return x.to(device) if isinstance(x, Tensor) else x
            links = [tuple(move(x) for x in link) for link in self.links]
            self._on[device] = (links, tuple(move(x) for x in self.site))
        return self._on[device]

    def __call__(self, qpos: Tensor) -> tuple[Tensor, Tensor]:
        """``([N, 3] position, [N, 3, 3] rotation)`` of the site in the world for ``[N, nq]`` float64 qpos."""
        n = qpos.shape[0]
        links, (site_pos, site_rot) = self._constants(qpos.device)
        pos = torch.zeros(n, 3, dtype=qpos.dtype, device=qpos.device)
        rot = torch.eye(3, dtype=qpos.dtype, device=qpos.device).expand(n, 3, 3)
        for offset, fixed, column, k in links:
            pos = pos + rot @ offset
            rot = rot @ fixed
            if column is not None:
                rot = rot @ axis_rotation(k, qpos[:, column])
        return pos + rot @ site_pos, rot @ site_rot


@dataclass(frozen=True)
class PandaPickParams:
    """Control, resets, reward weights and success of ``PandaPickCube-v0`` (MuJoCo Playground's values, except the
    success thresholds, which the reference does not define)."""

    action_scale: float = 0.04
    """Each step the servo targets move by ``action_scale * action`` (rad; m for the gripper), clipped to range."""
    box_xy_range: float = 0.2
    """Episode starts: the cube's x and y are its home place (0.7, 0) + U(-r, r) (m)."""
    target_xy_range: float = 0.2
    """The target's x and y are the cube's home place + U(-r, r) (m)."""
    target_height: tuple[float, float] = (0.2, 0.4)
    """The target is this high above the cube's home place (uniform, m)."""
    gripper_box: float = 4.0
    """Weight of ``1 - tanh(5 |cube - gripper|)``."""
    box_target: float = 8.0
    """Weight of ``1 - tanh(5 (0.9 |target - cube| + 0.1 |rotation error|))``, paid once the gripper has reached
    the cube (within :attr:`reach_distance`; it stays reached for the episode)."""
    no_floor_collision: float = 0.25
    """Weight of 1 when neither the hand nor a fingertip pad touches the floor."""
    robot_target_qpos: float = 0.3
    """Weight of ``1 - tanh(|arm joints - home|)``."""
    reach_distance: float = 0.012
    """Gripper-to-cube distance (m) that counts as having reached the cube."""
    success_distance: float = 0.05
    """Success: at the episode's last step the cube is within this distance of the target (m) ..."""
    hold_distance: float = 0.03
    """... and the gripper within this distance of the cube (m): held there, not thrown."""
    cube_size: tuple[float, float] = (1.0, 1.0)
    """Scale range of the cube's size (all three sides together), one draw per model variant of the randomisation
    pool, so each episode start draws a size with the rest of its physics; (1, 1): the nominal 4 x 4 x 6 cm. The
    gripper opens to 8 cm."""

    def __post_init__(self) -> None:
        check_task_params(self)
        low, high = self.target_height
        if not 0 <= low <= high:
            raise ValueError(f"target_height must be a (low, high) range with 0 <= low <= high, got "
                             f"{self.target_height}")
        low, high = self.cube_size
        if not 0.5 <= low <= high <= 1.5:
            raise ValueError(f"cube_size must be a (low, high) range of scales with 0.5 <= low <= high <= 1.5, got "
                             f"{self.cube_size}")
        for name in ("action_scale", "reach_distance", "success_distance", "hold_distance"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        if not (self.box_xy_range >= 0 and self.target_xy_range >= 0):
            raise ValueError("box_xy_range and target_xy_range must be >= 0")


DEFAULT_RANDOMIZATION = Randomization(friction=(0.8, 1.2), mass=(0.7, 1.4), num_variants=32)
"""``PandaPickCube-v0``'s default physics ranges: every geom's friction together (cube, pads and floor), each
body's mass (the cube's among them) drawn on its own, over a pool of 32 model variants."""


class PandaPickCubeEnv(MujocoEnv):
    """``PandaPickCube-v0``: pick up a 4 x 4 x 6 cm cube and hold it at a target in the air.

    - Observation ``[N, 66]`` float32 (Playground's order): qpos (16: arm 7, fingers 2, cube 7), qvel (15), gripper
      position (3), the last two rows of the gripper's and of the cube's rotation matrices (6 each), cube minus
      gripper (3), target minus cube (3), the target's first two rotation rows minus the cube's (6; the target is
      upright), servo targets minus joint positions (arm and first finger, 8).
    - Action ``[N, 8]`` in [-1, 1]: changes of the servo targets (:attr:`PandaPickParams.action_scale` per unit),
      held for 4 physics steps of 5 ms (a 50 Hz policy); the eighth opens and closes the gripper.
    - Reward: the weighted sum of ``gripper_box``, ``box_target``, ``no_floor_collision`` and ``robot_target_qpos``
      (:class:`PandaPickParams`); ``success`` (1 at the last step of an episode that ends with the cube held at the
      target) is logged with them and adds nothing.
    - Terminated: the cube more than 1 m from the base along an axis, or below the floor. Truncated: 150 steps (3 s).
    - Randomised per episode: the cube's place, the target, and (default pool) frictions and masses; the cube's
      size too with ``cube_size=LOW,HIGH`` (``"PandaPickCube-v0?cube_size=0.8,1.2"``).
    """

    frame_skip = 4
    obs_shape = (66,)
    action_shape = (8,)
    max_episode_steps = 150
    params_type = PandaPickParams
    reward_terms = ("gripper_box", "box_target", "no_floor_collision", "robot_target_qpos", "success")
    task_size = 13
    CTRL, TARGET, REACHED, STEP = slice(0, 8), slice(8, 11), 11, 12
    """Columns of ``inner.task``: servo targets, target position, cube reached (0/1), steps since reset."""
    object_geoms = ("box",)

    @classmethod
    def model_path(cls) -> str:
        return os.path.join(ASSETS, "scene.xml")

    def __init__(self, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None, **kwargs):
        kwargs.setdefault("randomization", DEFAULT_RANDOMIZATION)
        size = kwargs.get("cube_size")
        if size is not None and tuple(size) != (1.0, 1.0) and 0.5 <= size[0] <= size[1] <= 1.5:  # else refused below
            pool = kwargs["randomization"]
            if isinstance(pool, dict):
                pool = Randomization(**pool)
            # The sizes live in the pool's model variants (a geom's size is part of the model).
            kwargs["randomization"] = dataclasses.replace(pool or Randomization(num_variants=32),
                                                          object_size=tuple(size))
        super().__init__(num_envs, device, seed, **kwargs)
        self.action_low, self.action_high = (-1.0,) * 8, (1.0,) * 8

    def load_model(self):
        model = super().load_model()
        home = model.key("home")
        self.home_qpos = torch.tensor(home.qpos, dtype=torch.float64)
        self.home_ctrl = torch.tensor(home.ctrl, dtype=torch.float64)
        self.ctrl_low, self.ctrl_high = (torch.tensor(model.actuator_ctrlrange[:, i], dtype=torch.float64)
                                         for i in (0, 1))
        self.gripper_chain = SerialChain(model, "gripper")
        self.box_half_height = float(model.geom_size[model.geom("box").id, 2])
        return model

    def _sample_initial_state(self, num_envs: int, generator: torch.Generator) -> MjInner:
        for name in ("home_qpos", "home_ctrl", "ctrl_low", "ctrl_high"):
            setattr(self, name, getattr(self, name).to(self.device))
        return super()._sample_initial_state(num_envs, generator)

    # --- views ------------------------------------------------------------------------------------------

    def box_position(self, inner: MjInner) -> Tensor:
        """``[N, 3]`` float64 the cube's centre."""
        return self.qpos(inner)[:, BOX_POS]

    def gripper_pose(self, inner: MjInner) -> tuple[Tensor, Tensor]:
        """``([N, 3], [N, 3, 3])`` float64 position and rotation of the gripper site between the fingertips."""
        return self.gripper_chain(self.qpos(inner))

    def gripper_position(self, inner: MjInner) -> Tensor:
        """``[N, 3]`` float64 the gripper site between the fingertips."""
        return self.gripper_pose(inner)[0]

    def target(self, inner: MjInner) -> Tensor:
        """``[N, 3]`` float64 where the cube is to be held."""
        return inner.task[:, self.TARGET]

    def floor_contact(self, inner: MjInner) -> Tensor:
        """``[N]`` bool: the hand or a fingertip pad touches the floor."""
        return (inner.observed[:, FLOOR_CONTACTS] > 0).any(dim=1)

    def succeeded(self, inner: MjInner) -> Tensor:
        """``[N]`` bool: the cube is within ``success_distance`` of the target and the gripper holds it."""
        p = self.params
        box = self.box_position(inner)
        return (((self.target(inner) - box).norm(dim=1) < p.success_distance)
                & ((box - self.gripper_position(inner)).norm(dim=1) < p.hold_distance))

    # --- the task ---------------------------------------------------------------------------------------

    def _reset_physics(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        r = self.params.box_xy_range
        qpos = self.home_qpos.expand(n, -1).clone()
        qpos[:, 9:11] += self.uniform(-r, r, (n, 2), generator)
        return qpos, torch.zeros(n, self.layout.nv, dtype=torch.float64, device=self.device)

    def _fit_to_variant(self, qpos: Tensor, variant: Tensor) -> Tensor:
        """A resized cube starts on the floor: its centre as high as its scaled half-height."""
        scale = self.object_scale(variant)
        if scale is None:
            return qpos
        z = BOX_POS.start + 2
        return torch.cat((qpos[:, :z], (qpos[:, z] + self.box_half_height * (scale - 1.0)).unsqueeze(1),
                          qpos[:, z + 1:]), dim=1)

    def _reset_task(self, n: int, generator: torch.Generator) -> Tensor:
        p = self.params
        task = torch.zeros(n, self.task_size, dtype=torch.float64, device=self.device)
        task[:, self.CTRL] = self.home_ctrl
        offset = torch.cat((self.uniform(-p.target_xy_range, p.target_xy_range, (n, 2), generator),
                            self.uniform(*p.target_height, (n, 1), generator)), dim=1)
        task[:, self.TARGET] = self.home_qpos[BOX_POS] + offset
        return task

    def _control(self, inner: MjInner, action: Tensor) -> Tensor:
        step = self.params.action_scale * action.double().clamp(-1.0, 1.0)
        self._ctrl = torch.clamp(inner.task[:, self.CTRL] + step, self.ctrl_low, self.ctrl_high)
        return self._ctrl

    def _next_task(self, before: MjInner, after: MjInner) -> Tensor:
        task = before.task.clone()
        task[:, self.CTRL] = self._ctrl
        task[:, self.REACHED] = self._reached
        task[:, self.STEP] += 1
        return task

    def _observe(self, inner: MjInner) -> Tensor:
        qpos, qvel = self.qpos(inner), self.qvel(inner)
        (gripper, gripper_mat), box = self.gripper_pose(inner), self.box_position(inner)
        gripper_mat = gripper_mat.flatten(1)
        box_mat = quat_to_matrix(qpos[:, BOX_QUAT]).flatten(1)
        upright = torch.eye(3, dtype=box_mat.dtype, device=box_mat.device).flatten()[:6]
        servo = inner.task[:, self.CTRL] - qpos[:, :8]
        return torch.cat((qpos, qvel, gripper, gripper_mat[:, 3:], box_mat[:, 3:], box - gripper,
                          self.target(inner) - box, upright - box_mat[:, :6], servo), dim=1).float()

    def _rewards(self, before: MjInner, after: MjInner, action: Tensor) -> tuple[dict[str, Tensor], Tensor]:
        p = self.params
        qpos = self.qpos(after)
        box, gripper = self.box_position(after), self.gripper_position(after)
        to_box = (box - gripper).norm(dim=1)
        self._reached = torch.maximum(before.task[:, self.REACHED], (to_box < p.reach_distance).double())
        upright = torch.eye(3, dtype=box.dtype, device=box.device).flatten()[:6]
        rot_err = (upright - quat_to_matrix(qpos[:, BOX_QUAT]).flatten(1)[:, :6]).norm(dim=1)
        pos_err = (self.target(after) - box).norm(dim=1)
        finite = torch.isfinite(after.physics).all(dim=1)
        terminated = (box.abs() > 1.0).any(dim=1) | (box[:, 2] < 0.0) | ~finite
        terms = {
            "gripper_box": p.gripper_box * (1 - torch.tanh(5 * to_box)),
            "box_target": p.box_target * self._reached * (1 - torch.tanh(5 * (0.9 * pos_err + 0.1 * rot_err))),
            **self._arm_terms(before, after, terminated),
        }
        return {k: torch.nan_to_num(v) for k, v in terms.items()}, terminated

    def _arm_terms(self, before: MjInner, after: MjInner, terminated: Tensor) -> dict[str, Tensor]:
        """The terms every arm task shares: no floor contact, the arm near its home pose, and ``success`` at an
        episode's last step."""
        p = self.params
        last = before.task[:, self.STEP] + 1 >= self.max_episode_steps
        posture = (self.qpos(after)[:, ARM] - self.home_qpos[ARM]).norm(dim=1)
        return {"no_floor_collision": p.no_floor_collision * (~self.floor_contact(after)).double(),
                "robot_target_qpos": p.robot_target_qpos * (1 - torch.tanh(posture)),
                "success": (last & ~terminated & self.succeeded(after)).double()}

    def _total_reward(self, terms: Tensor) -> Tensor:
        paid = [i for i, name in enumerate(self.reward_terms) if name != "success"]  # success is a measure
        return terms[:, paid].sum(dim=1)


@dataclass(frozen=True)
class PandaReachParams:
    """``PandaReach-v0``: the pick task's control, floor and posture terms, and a target for the gripper itself."""

    action_scale: float = 0.04
    """Each step the servo targets move by ``action_scale * action`` (rad; m for the gripper), clipped to range."""
    no_floor_collision: float = 0.25
    """Weight of 1 when neither the hand nor a fingertip pad touches the floor."""
    robot_target_qpos: float = 0.3
    """Weight of ``1 - tanh(|arm joints - home|)``."""
    reach: float = 4.0
    """Weight of ``1 - tanh(5 |target - gripper|)``."""
    target_low: tuple[float, float, float] = (0.35, -0.3, 0.1)
    """Lower corner of the box targets are drawn from (m, world frame; the arm's base is at the origin)."""
    target_high: tuple[float, float, float] = (0.7, 0.3, 0.5)
    """Upper corner of that box (m)."""
    reach_success: float = 0.02
    """Success: the gripper within this distance of the target at the episode's last step (m)."""

    def __post_init__(self) -> None:
        check_task_params(self)
        if not all(lo <= hi for lo, hi in zip(self.target_low, self.target_high)):
            raise ValueError(f"target_low must be <= target_high in every axis, got {self.target_low} and "
                             f"{self.target_high}")
        if not (self.reach_success > 0 and self.action_scale > 0):
            raise ValueError(f"reach_success and action_scale must be positive, got {self.reach_success!r} and "
                             f"{self.action_scale!r}")


class PandaReachEnv(PandaPickCubeEnv):
    """``PandaReach-v0``, the quick arm task: bring the gripper to a target drawn per episode in front of the arm.

    - Observation ``[N, 38]`` float32: arm and finger joint positions (9) and velocities (9), gripper position (3),
      the last two rows of its rotation matrix (6), target minus gripper (3), servo targets minus joint positions
      (8). The cube stays where it starts and is not observed.
    - Action, control and episode length as ``PandaPickCube-v0``.
    - Reward: ``reach`` (``1 - tanh(5 |target - gripper|)``), ``no_floor_collision`` and ``robot_target_qpos``;
      ``success`` (the gripper within 2 cm of the target at the last step) is logged with them and adds nothing.
    """

    obs_shape = (38,)
    params_type = PandaReachParams
    reward_terms = ("reach", "no_floor_collision", "robot_target_qpos", "success")

    def _reset_physics(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        qpos = self.home_qpos.expand(n, -1).clone()
        return qpos, torch.zeros(n, self.layout.nv, dtype=torch.float64, device=self.device)

    def _reset_task(self, n: int, generator: torch.Generator) -> Tensor:
        p = self.params
        task = torch.zeros(n, self.task_size, dtype=torch.float64, device=self.device)
        task[:, self.CTRL] = self.home_ctrl
        low, high = (torch.tensor(v, dtype=torch.float64, device=self.device) for v in (p.target_low, p.target_high))
        task[:, self.TARGET] = low + (high - low) * self.uniform(0.0, 1.0, (n, 3), generator)
        return task

    def succeeded(self, inner: MjInner) -> Tensor:
        """``[N]`` bool: the gripper is within ``reach_success`` of the target."""
        return (self.target(inner) - self.gripper_position(inner)).norm(dim=1) < self.params.reach_success

    def _observe(self, inner: MjInner) -> Tensor:
        qpos, qvel = self.qpos(inner), self.qvel(inner)
        gripper, rotation = self.gripper_pose(inner)
        servo = inner.task[:, self.CTRL] - qpos[:, :8]
        return torch.cat((qpos[:, :9], qvel[:, :9], gripper, rotation.flatten(1)[:, 3:],
                          self.target(inner) - gripper, servo), dim=1).float()

    def _rewards(self, before: MjInner, after: MjInner, action: Tensor) -> tuple[dict[str, Tensor], Tensor]:
        self._reached = before.task[:, self.REACHED]
        distance = (self.target(after) - self.gripper_position(after)).norm(dim=1)
        terminated = ~torch.isfinite(after.physics).all(dim=1)
        terms = {"reach": self.params.reach * (1 - torch.tanh(5 * distance)),
                 **self._arm_terms(before, after, terminated)}
        return {k: torch.nan_to_num(v) for k, v in terms.items()}, terminated
