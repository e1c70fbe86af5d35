"""Go1 on rough terrain with a curriculum (``Go1-Rough-v0``): ``Go1-Velocity-v0``'s task on a grid of terrain tiles
(:mod:`rl_gpu.envs.mujoco.terrain`: bumps, slopes, stairs and blocks, one row of tiles per difficulty level) in
place of the flat floor.

Each row keeps its tile in ``inner.task``: the level, the kind (column) and where its episode started. A row whose
episode ends takes its next level by the curriculum rule (:func:`~rl_gpu.envs.mujoco.terrain.next_levels`, through
the :meth:`~rl_gpu.envs.base.TensorEnv._carry` hook), keeps its kind, and starts on that tile's platform, so the
batch spreads over the levels as it learns. The heights around the trunk (a 9 x 7 grid over 1.6 x 1.0 m, turning
with the trunk's heading) join the critic group, and the policy's observation too with ``policy_heights``; they are
read from the terrain's own height field in torch, equal to MuJoCo's ray casting on it
(``tests/envs/mujoco/test_rough.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
from torch import Tensor

from rl_gpu.core.types import Mirror
from rl_gpu.envs.mujoco.base import MjInner
from rl_gpu.envs.mujoco.quadruped import Go1VelocityEnv, Go1VelocityParams, go1_mirror
from rl_gpu.envs.mujoco.terrain import KINDS, TerrainGrid, generate_terrain, next_levels, sample_heights, tile_centres
from rl_gpu.envs.params import build_params
from rl_gpu.envs.random_draws import hash_uniform

SCAN_X = tuple(-0.8 + 0.2 * i for i in range(9))
SCAN_Y = tuple(-0.5 + 1.0 / 6 * j for j in range(7))
"""The height samples' offsets in the trunk's heading frame (m): x forward, y to the left."""
NUM_SCAN = len(SCAN_X) * len(SCAN_Y)
STANDING_HEIGHT = 0.3
"""Subtracted from the trunk's height above each sample, so level ground reads about 0."""
_LEVELS = 11  # hash stream of the levels drawn for robots that leave the top
BORDER = 8.0
"""Flat ground around the tiles (m): a robot on an edge tile that walks past its tile's edge (20 s at up to 1.1 m/s)
stays on the ground instead of leaving the terrain, which ends its episode as a fall would."""
MAX_LEVELS = 50
"""Most terrain levels (rows of tiles): 50 x 6 tiles of 80 x 80 points and the border is 2.6M heights per model
variant."""


def rough_mirror(policy_heights: bool) -> Mirror:
    """Go1's left-right symmetry (:func:`~rl_gpu.envs.mujoco.quadruped.go1_mirror`) with the height samples'
    grid reflected (y -> -y: column j of the 9 x 7 grid swaps with column 6 - j; heights keep their sign), in the
    critic group and, with ``policy_heights``, in the observation."""
    base = go1_mirror()
    columns = len(SCAN_Y)
    scan = tuple(i * columns + (columns - 1 - j) for i in range(len(SCAN_X)) for j in range(columns))
    heights_obs = (tuple(48 + k for k in scan), (1.0,) * NUM_SCAN) if policy_heights else ((), ())
    return Mirror(obs_index=base.obs_index + heights_obs[0], obs_sign=base.obs_sign + heights_obs[1],
                  action_index=base.action_index, action_sign=base.action_sign,
                  critic_index=base.critic_index + tuple(7 + k for k in scan),
                  critic_sign=base.critic_sign + (1.0,) * NUM_SCAN)


@dataclass(frozen=True)
class Go1RoughParams(Go1VelocityParams):
    """``Go1VelocityParams`` and the terrain and curriculum of ``Go1-Rough-v0``."""

    terrain_levels: int = 10
    """Rows of tiles, from the easiest level (0) to the hardest."""
    terrain_seed: int = 0
    """The terrain is generated from this seed (part of the task: a checkpoint's id rebuilds the same ground)."""
    max_init_level: int = 4
    """Episode starts of a fresh batch: levels drawn uniformly from 0 to this."""
    start_spread: float = 0.5
    """A robot starts U(-s, s) m from its tile's centre along x and y (on the flat platform)."""
    policy_heights: bool = False
    """True: the policy observes the height samples too (its observation grows by 63); else only the critic."""
    max_bump: float = 0.06
    """Rough tiles: bumps up to this high at the top level (m; 0.02 at level 0)."""
    max_slope: float = 0.4
    """Slope tiles: rise over run at the top level."""
    max_step: float = 0.1
    """Stairs: the step height at the top level (m; 0.05 at level 0)."""
    max_block: float = 0.1
    """Obstacle tiles: blocks up to this high or deep at the top level (m; 0.05 at level 0). The four scales are
    sized for a Go1 (a trunk about 0.3 m up), as Isaac Lab's Go1 rough task scales its boxes and bumps and mjlab's
    its stairs; legged_gym's ANYmal ranges are 0.1, 0.4, 0.23 and 0.25."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name, least in (("terrain_levels", 1), ("terrain_seed", 0), ("max_init_level", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
        if self.terrain_levels > MAX_LEVELS:
            raise ValueError(f"terrain_levels must be at most {MAX_LEVELS} (each level is a row of 8 m tiles in the "
                             f"one height field every model variant holds), got {self.terrain_levels}")
        if not 0 <= self.start_spread <= 0.9:
            raise ValueError(f"start_spread must be in [0, 0.9] (m, inside the 2 m platform), got {self.start_spread}")
        if not isinstance(self.policy_heights, bool):
            raise TypeError(f"policy_heights must be True or False, got {self.policy_heights!r}")
        TerrainGrid(max_bump=self.max_bump, max_slope=self.max_slope, max_step=self.max_step,
                    max_block=self.max_block)  # (raises ValueError naming a scale out of range)


class Go1RoughEnv(Go1VelocityEnv):
    """``Go1-Rough-v0``: Go1 follows velocity commands over rough terrain whose difficulty a curriculum raises.

    As ``Go1-Velocity-v0`` (observation, action, reward terms, pushes, randomised physics), except: the ground is
    the terrain grid (:class:`~rl_gpu.envs.mujoco.terrain.TerrainGrid` with ``terrain_levels`` rows and one column per
    kind); the trunk's height for termination and the critic is measured above the ground under it; leaving the
    terrain terminates; the critic group adds 63 height samples (the policy too with ``policy_heights``).
    """

    params_type = Go1RoughParams
    critic_obs_shape = (7 + NUM_SCAN,)
    task_size = 32
    LEVEL, KIND, ORIGIN, ASKED, ASKED_HEADING = 25, 26, slice(27, 29), slice(29, 31), 31
    """Columns of ``inner.task`` after Go1's: the tile's level and kind, where the episode started (x, y), and the
    path its commands asked for so far: the displacement (x, y) and heading change of a robot that followed every
    command exactly, integrated step by step (the curriculum's "what the commands asked for")."""

    def __init__(self, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None, **kwargs):
        if kwargs.get("backend") == "mujoco-warp":
            # Measured by benchmarks/warp_hfield_check.py (mujoco_warp 4.0.0): foot contacts up to 0.7-1.26 m deep
            # on flat ground where the C engine's are at most 4 cm; a third of the robots' first steps differ.
            raise ValueError(f"{type(self).__name__} does not run on MuJoCo Warp: its height-field contacts under "
                             "the robot's feet disagree with MuJoCo's (up to 0.7 m deep on flat ground; "
                             "benchmarks/warp_hfield_check.py measures it); use backend='mujoco'")
        # The terrain is part of the model, and the policy's observation size of the spec: known before either.
        names = {f.name for f in fields(Go1RoughParams)}
        own = build_params(Go1RoughParams, {k: v for k, v in kwargs.items() if k in names}, type(self).__name__)
        self.grid = TerrainGrid(levels=own.terrain_levels, kinds=KINDS, max_bump=own.max_bump, max_slope=own.max_slope,
                                max_step=own.max_step, max_block=own.max_block, border=BORDER)
        self.terrain_seed = own.terrain_seed
        self.obs_shape = (48 + NUM_SCAN,) if own.policy_heights else (48,)
        if type(self).mirror is not None:  # (an observation wrapper's class drops it: another layout)
            self.mirror = rough_mirror(own.policy_heights)
        super().__init__(num_envs, device, seed, **kwargs)
        xs, ys = torch.meshgrid(torch.tensor(SCAN_X, dtype=torch.float64), torch.tensor(SCAN_Y, dtype=torch.float64),
                                indexing="ij")
        self.scan_points = torch.stack((xs.flatten(), ys.flatten()), dim=1).to(self.device)  # [S, 2]
        self._level_moves = torch.zeros(2, dtype=torch.float64, device=self.device)
        self._carried = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self._reached_top = torch.zeros(num_envs, dtype=torch.bool, device=self.device)

    def _compile_model(self):
        import mujoco  # (the optional extra; MujocoEnv checked it is installed)

        field = generate_terrain(self.grid, self.terrain_seed)
        self.field = torch.from_numpy(field)
        spec = mujoco.MjSpec.from_file(self.model_path())
        spec.delete(spec.geom("floor"))
        rows, cols = field.shape
        res = self.grid.resolution
        low, high = float(field.min()), float(field.max())
        span = max(high - low, 1e-3)
        # MuJoCo's height field: rows along y, columns along x, heights in [0, 1] times the elevation size.
        data = ((field.T - low) / span).ravel()
        spec.add_hfield(name="terrain", nrow=cols, ncol=rows, size=[(rows - 1) * res / 2, (cols - 1) * res / 2, span,
                                                                     1.0], userdata=data.tolist())
        spec.worldbody.add_geom(name="terrain", type=mujoco.mjtGeom.mjGEOM_HFIELD, hfieldname="terrain",
                                pos=[(rows - 1) * res / 2, (cols - 1) * res / 2, low], material="grid")
        return spec.compile()

    # --- the terrain ------------------------------------------------------------------------------------

    def ground_height(self, xy: Tensor) -> Tensor:
        """``[...]`` float64 height of the terrain under world points ``[..., 2]``."""
        return sample_heights(self.field, self.grid.resolution, xy)

    def height_scan(self, inner: MjInner) -> Tensor:
        """``[N, 63]`` float32: the trunk's height above the ground at each sample point around it, minus 0.3 m,
        clipped to [-1, 1] (legged_gym's measurement)."""
        qpos = self.qpos(inner)
        yaw = 2 * torch.atan2(qpos[:, 6], qpos[:, 3])  # heading of (w, 0, 0, z); tilt ignored, as legged_gym does
        c, s = torch.cos(yaw)[:, None], torch.sin(yaw)[:, None]
        px, py = self.scan_points[:, 0], self.scan_points[:, 1]
        world = torch.stack((qpos[:, :1] + c * px - s * py, qpos[:, 1:2] + s * px + c * py), dim=2)  # [N, S, 2]
        return (qpos[:, 2:3] - self.ground_height(world) - STANDING_HEIGHT).clamp(-1.0, 1.0).float()

    def height_above_ground(self, inner: MjInner) -> Tensor:
        """``[N]`` float64 the trunk's height above the terrain right under it."""
        qpos = self.qpos(inner)
        return qpos[:, 2] - self.ground_height(qpos[:, :2])

    def tile_centre(self, level: Tensor, kind: Tensor) -> Tensor:
        """``[N, 2]`` float64 world (x, y) of the centres of tiles ``(level [N], kind [N])``."""
        return tile_centres(self.grid, level, kind)

    def _place(self, inner: MjInner, level: Tensor, kind: Tensor, offset: Tensor) -> MjInner:
        """``inner`` with each row's robot moved to ``offset`` (``[N, 2]``) from the centre of tile ``(level, kind)``,
        standing at the home height above the ground there, and the task's tile columns set."""
        xy = self.tile_centre(level, kind) + offset
        physics, task = inner.physics.clone(), inner.task.clone()
        q = self.layout.qpos.start
        physics[:, q:q + 2] = xy
        physics[:, q + 2] = self.home_qpos[2] + self.ground_height(xy)
        task[:, self.LEVEL], task[:, self.KIND], task[:, self.ORIGIN] = level.double(), kind.double(), xy
        return inner._replace(physics=physics, task=task)

    def _sample_initial_state(self, num_envs: int, generator: torch.Generator) -> MjInner:
        self.field = self.field.to(self.device)  # (built on the CPU with the model, before the device was known)
        inner = super()._sample_initial_state(num_envs, generator)
        p = self.params
        level = torch.randint(0, min(p.max_init_level, self.grid.levels - 1) + 1, (num_envs,), device=self.device,
                              generator=generator)
        kind = torch.randint(0, len(self.grid.kinds), (num_envs,), device=self.device, generator=generator)
        offset = self.uniform(-p.start_spread, p.start_spread, (num_envs, 2), generator)
        return self._place(inner, level, kind, offset)

    def _carry(self, finished: MjInner, fresh: MjInner) -> MjInner:
        task = finished.task
        walked = (self.qpos(finished)[:, :2] - task[:, self.ORIGIN]).norm(dim=1)
        # The distance the episode's commands asked for: the straight line from start to end of the path they
        # trace, turns included. (|last planar command| x duration, legged_gym's measure, assumes a straight path;
        # with yaw-rate commands a perfect tracker would then move down more often than up.)
        commanded = task[:, self.ASKED].norm(dim=1)
        level = task[:, self.LEVEL].long()
        u = hash_uniform(task[:, self.KEY], task[:, self.STEP], stream=_LEVELS, size=1)[:, 0]
        random_level = (u * self.grid.levels).long().clamp(max=self.grid.levels - 1)
        new_level = next_levels(level, walked, commanded, self.grid, random_level)
        self._carried = (new_level - level).sign()
        offset = fresh.task[:, self.ORIGIN] - self.tile_centre(fresh.task[:, self.LEVEL], fresh.task[:, self.KIND])
        return self._place(fresh, new_level, task[:, self.KIND].long(), offset)

    def _next_task(self, before: MjInner, after: MjInner) -> Tensor:
        task = super()._next_task(before, after)
        # One step of the commanded path: the planar command (body frame) turned by the path's own heading.
        command, heading = before.task[:, self.CMD], before.task[:, self.ASKED_HEADING]
        c, s = torch.cos(heading), torch.sin(heading)
        step = torch.stack((c * command[:, 0] - s * command[:, 1], s * command[:, 0] + c * command[:, 1]), dim=1)
        task[:, self.ASKED] = before.task[:, self.ASKED] + self.dt * step
        task[:, self.ASKED_HEADING] = heading + self.dt * command[:, 2]
        return task

    # --- observation, termination -----------------------------------------------------------------------

    def privileged_obs(self, inner: MjInner) -> Tensor:
        base = super().privileged_obs(inner)
        base = torch.cat((self.height_above_ground(inner).float()[:, None], base[:, 1:]), dim=1)
        return torch.cat((base, self.height_scan(inner)), dim=1)

    def _observe(self, inner: MjInner) -> Tensor:
        obs = super()._observe(inner)
        return torch.cat((obs, self.height_scan(inner)), dim=1) if self.params.policy_heights else obs

    def _rewards(self, before: MjInner, after: MjInner, action: Tensor) -> tuple[dict[str, Tensor], Tensor]:
        terms, _ = super()._rewards(before, after, action)
        p = self.params
        gravity = self.projected_gravity(after)
        xy = self.qpos(after)[:, :2]
        extent = torch.tensor(self.field.shape, dtype=xy.dtype, device=xy.device) * self.grid.resolution
        off_terrain = ((xy < 0) | (xy > extent)).any(dim=1)
        terminated = ((gravity[:, 2] > -math.cos(p.max_tilt)) | (self.height_above_ground(after) < p.min_base_height)
                      | off_terrain)
        terms["termination"] = self.dt * p.termination * terminated.double()
        return terms, terminated

    # --- statistics -------------------------------------------------------------------------------------

    def step_rows(self, state, action, reset_inner, rows):
        new_state, result = super().step_rows(state, action, reset_inner, rows)
        done = result.terminated | result.truncated
        self._level_moves += torch.stack(((done & (self._carried > 0)).sum(), (done & (self._carried < 0)).sum()))
        self._reached_top[rows] |= new_state.inner.task[:, self.LEVEL] >= self._top_level
        return new_state, result

    @property
    def _top_level(self) -> int:
        """The lowest level of the top third."""
        return math.ceil(2 * self.grid.levels / 3)

    def task_stats(self) -> dict[str, Tensor]:
        """``{"terrain_level", "terrain_top_third", "terrain_reached_top_third", "level_ups", "level_downs"}``
        (0-dim tensors): the rows' mean level and share in the top third of the levels now, the share of rows that
        have been in the top third at least once since this environment was built, and the moves up and down since
        the last call. (The share now stays under about a half even for robots that never fail: those that leave
        the top level restart at a random level, so with every robot climbing at the same rate the levels fill in
        proportion to ``level + 1``, and the top third of 10 holds 27/55.)"""
        level = self.state.inner.task[:, self.LEVEL]
        top = level >= self._top_level
        ups, downs = self._level_moves.clone()
        self._level_moves.zero_()
        return {"terrain_level": level.mean(), "terrain_top_third": top.double().mean(),
                "terrain_reached_top_third": self._reached_top.double().mean(), "level_ups": ups,
                "level_downs": downs}

    def levels(self) -> Tensor:
        """``[N]`` int64: each row's terrain level now."""
        return self.state.inner.task[:, self.LEVEL].long()
