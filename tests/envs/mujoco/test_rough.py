"""Rough terrain (rl_gpu/envs/mujoco/terrain.py) and Go1-Rough-v0: the generator is deterministic per seed and its
levels grow harder, the height samples equal MuJoCo's ray casting on the compiled field, the curriculum rule moves
robots as stated, and the environment places, measures and moves its robots by it."""

import math

import numpy as np
import pytest
import torch

mujoco = pytest.importorskip("mujoco")

from rl_gpu.envs import make  # noqa: E402
from rl_gpu.envs.mujoco.rough import STANDING_HEIGHT  # noqa: E402
from rl_gpu.envs.mujoco.terrain import (  # noqa: E402
    KINDS,
    TerrainGrid,
    generate_terrain,
    next_levels,
    sample_heights,
    tile_heights,
)

SMALL = TerrainGrid(levels=4, tile_size=4.0, platform=1.0)


def _env(n=6, seed=0, **kwargs):
    return make("Go1-Rough-v0", n, seed=seed, num_threads=1, randomization=None, push_interval_steps=0,
                terrain_levels=4, **kwargs)


def test_the_terrain_is_a_function_of_its_seed():
    a, b, c = (generate_terrain(SMALL, s) for s in (1, 1, 2))
    assert a.shape == (4 * SMALL.cells, len(KINDS) * SMALL.cells)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


@pytest.mark.parametrize("kind", KINDS)
def test_levels_grow_harder_and_every_platform_is_flat(kind):
    def spread(level):  # the largest height difference between neighbouring field points
        h = tile_heights(SMALL, kind, level, np.random.default_rng(0))
        return max(np.abs(np.diff(h, axis=0)).max(), np.abs(np.diff(h, axis=1)).max())

    spreads = [spread(level) for level in range(SMALL.levels)]
    assert all(x <= y + 1e-12 for x, y in zip(spreads, spreads[1:])) and spreads[-1] > spreads[0], spreads
    h = tile_heights(SMALL, kind, 3, np.random.default_rng(0))
    c = SMALL.cells
    centre = h[c // 2 - 3:c // 2 + 4, c // 2 - 3:c // 2 + 4]
    assert np.ptp(centre) == 0.0  # robots start on level ground


def test_height_samples_are_mujocos_ray_casts_on_the_field():
    env = _env(1)
    data = mujoco.MjData(env.model)
    mujoco.mj_forward(env.model, data)
    terrain = env.model.geom("terrain").id
    rows, cols = env.field.shape
    points = np.random.default_rng(0).uniform([0.5, 0.5], [rows * 0.1 - 0.5, cols * 0.1 - 0.5], size=(200, 2))
    group = np.zeros(6, np.uint8)
    group[0] = 1  # the terrain's group: the robot (group 3 collision geoms) is not hit
    ours = sample_heights(env.field.cpu(), env.grid.resolution, torch.tensor(points)[None])[0]
    for (x, y), h in zip(points, ours):
        hit = np.zeros(1, np.int32)
        distance = mujoco.mj_ray(env.model, data, np.array([x, y, 10.0]), np.array([0, 0, -1.0]), group, 1, -1, hit)
        assert hit[0] == terrain and abs((10.0 - distance) - float(h)) < 1e-6


def test_the_curriculum_rule():
    grid = TerrainGrid(levels=5)
    level = torch.tensor([0, 2, 2, 2, 4, 0])
    walked = torch.tensor([5.0, 5.0, 1.0, 3.0, 6.0, 0.0])  # half a tile is 4 m
    commanded = torch.tensor([4.0, 4.0, 4.0, 4.0, 4.0, 4.0])
    random_level = torch.tensor([1, 1, 1, 1, 3, 1])
    assert next_levels(level, walked, commanded, grid, random_level).tolist() == [1, 3, 1, 2, 3, 0]


def test_robots_start_on_their_tiles_platform_and_see_the_ground():
    env = _env(8, seed=1)
    env.reset()
    inner, p = env.state.inner, env.params
    level, kind = inner.task[:, env.LEVEL], inner.task[:, env.KIND]
    assert bool((level <= p.max_init_level).all()) and bool((level >= 0).all())
    xy = env.qpos(inner)[:, :2]
    assert bool(((xy - env.tile_centre(level, kind)).abs() <= p.start_spread).all())
    torch.testing.assert_close(env.height_above_ground(inner), env.home_qpos[2].expand(8))
    scan = env._observe_critic(inner)[:, 7:]
    assert scan.shape == (8, 63)
    # Every robot stands on its flat platform: the samples under the trunk read its standing height.
    under = env.height_scan(inner).view(8, 9, 7)[:, 4, 3]
    expected = torch.full((8,), float(env.home_qpos[2]) - STANDING_HEIGHT, dtype=torch.float64)
    torch.testing.assert_close(under.double(), expected, atol=1e-6, rtol=0)
    assert env.spec.obs_shape == (48,) and _env(2, policy_heights=True).spec.obs_shape == (48 + 63,)


def test_a_finished_episode_moves_its_robot_by_the_rule():
    env = _env(3, seed=2)
    state = env.get_state()
    task, physics = state.inner.task.clone(), state.inner.physics.clone()
    task[:, env.LEVEL] = torch.tensor([1.0, 1.0, 3.0])
    task[:, env.KIND] = torch.tensor([0.0, 2.0, 4.0])
    task[:, env.CMD] = torch.tensor([0.5, 0.0, 0.0], dtype=torch.float64)
    task[:, env.STEP] = 999.0  # the episode's last step: a straight 20 s at 0.5 m/s asks for 10 m
    task[:, env.ASKED] = torch.tensor([0.5 * 999 * env.dt, 0.0], dtype=torch.float64)
    q = env.layout.qpos.start
    start = env.tile_centre(task[:, env.LEVEL], task[:, env.KIND])
    task[:, env.ORIGIN] = start
    physics[:, q:q + 2] = start + torch.tensor([[0.0, 4.5], [0.5, 0.0], [0.0, 4.5]], dtype=torch.float64)
    physics[:, q + 2] = env.home_qpos[2] + env.ground_height(physics[:, q:q + 2])
    env.set_state(state._replace(inner=state.inner._replace(physics=physics, task=task),
                                 episode_step=torch.full((3,), 999)))
    result = env.step(torch.zeros(3, 12))
    assert result.truncated.all()
    after = env.state.inner.task
    assert after[:2, env.LEVEL].tolist() == [2.0, 0.0]  # far enough: up; less than half the asked: down
    assert after[:, env.KIND].tolist() == [0.0, 2.0, 4.0]  # each keeps its kind of ground
    assert 0 <= after[2, env.LEVEL] < 4  # past the top: a level drawn at random
    xy = env.qpos(env.state.inner)[:, :2]
    assert bool(((xy - env.tile_centre(after[:, env.LEVEL], after[:, env.KIND])).abs() <= 0.5).all())
    stats = env.task_stats()
    assert (float(stats["level_ups"]), float(stats["level_downs"])) >= (1.0, 1.0)


def test_state_dict_resumes_exactly_through_curriculum_moves():
    env = _env(4, seed=3)
    g = torch.Generator().manual_seed(3)
    actions = [0.5 * torch.randn(4, 12, generator=g) for _ in range(16)]
    for action in actions[:6]:
        env.step(action)
    saved = env.state_dict()
    first = [env.step(action) for action in actions[6:]]
    other = _env(4, seed=99)
    other.load_state_dict(saved)
    for action, expected in zip(actions[6:], first):
        got = other.step(action)
        for name in ("obs", "reward", "terminated", "critic_obs"):
            assert torch.equal(getattr(got, name), getattr(expected, name)), name


def test_the_commanded_path_turns_with_its_yaw_rate_commands():
    env = _env(2, seed=4)
    state = env.get_state()
    task = state.inner.task.clone()
    task[:, env.CMD] = torch.tensor([[0.8, 0.3, 0.0], [1.0, 0.0, 1.0]], dtype=torch.float64)
    task[:, env.ASKED] = torch.tensor([[1.0, 2.0], [0.0, 0.0]], dtype=torch.float64)
    task[:, env.ASKED_HEADING] = torch.tensor([math.pi / 2, 0.0], dtype=torch.float64)
    task[:, env.STEP] = 3.0
    env.set_state(state._replace(inner=state.inner._replace(task=task)))
    env.step(torch.zeros(2, 12))
    after = env.state.inner.task
    dt = env.dt
    # Row 0 faces +y on its path: forward 0.8 goes to +y, left 0.3 to -x.
    torch.testing.assert_close(after[0, env.ASKED], torch.tensor([1.0 - 0.3 * dt, 2.0 + 0.8 * dt],
                                                                 dtype=torch.float64))
    torch.testing.assert_close(after[:, env.ASKED_HEADING], torch.tensor([math.pi / 2, dt], dtype=torch.float64))
    # 24 more steps of (1 m/s, 1 rad/s) from heading 0 follow the arc of a circle of radius 1 m.
    for _ in range(24):
        env.step(torch.zeros(2, 12))
    heading = torch.arange(25, dtype=torch.float64) * dt
    arc = dt * torch.stack((heading.cos(), heading.sin()), dim=1).sum(0)
    torch.testing.assert_close(env.state.inner.task[1, env.ASKED], arc)
    assert abs(float(arc.norm()) - 2 * math.sin(0.5 * 25 * dt)) < 1e-3  # the chord of the 0.5 rad arc


def test_a_robot_that_follows_turning_commands_is_not_moved_down():
    """The commands asked for a circle: the robot that ended where the circle ends walked what was asked, though
    |command| x 20 s (10 m) is far more than its 1.1 m from the start."""
    env = _env(2, seed=5)
    state = env.get_state()
    task, physics = state.inner.task.clone(), state.inner.physics.clone()
    task[:, env.LEVEL], task[:, env.KIND] = 2.0, torch.tensor([0.0, 1.0])
    task[:, env.CMD] = torch.tensor([0.5, 0.0, 0.5], dtype=torch.float64)
    task[:, env.STEP] = 999.0
    heading = torch.arange(999, dtype=torch.float64) * 0.5 * env.dt
    asked = 0.5 * env.dt * torch.stack((heading.cos(), heading.sin()), dim=1).sum(0)
    task[:, env.ASKED], task[:, env.ASKED_HEADING] = asked, 0.5 * 999 * env.dt
    start = env.tile_centre(task[:, env.LEVEL], task[:, env.KIND])
    task[:, env.ORIGIN] = start
    q = env.layout.qpos.start
    walked = torch.stack((asked, 0.2 * asked))  # row 0 ends where the path does; row 1 a fifth of the way
    physics[:, q:q + 2] = start + walked
    physics[:, q + 2] = env.home_qpos[2] + env.ground_height(physics[:, q:q + 2])
    env.set_state(state._replace(inner=state.inner._replace(physics=physics, task=task),
                                 episode_step=torch.full((2,), 999)))
    assert env.step(torch.zeros(2, 12)).truncated.all()
    assert env.state.inner.task[:, env.LEVEL].tolist() == [2.0, 1.0]
    assert env.state.inner.task[:, env.ASKED].abs().max() == 0.0  # a fresh episode's path starts at zero


def test_the_share_that_reached_the_top_third_is_remembered():
    env = _env(4, seed=6)  # 4 levels: the top third is level 3
    state = env.get_state()
    task = state.inner.task.clone()
    task[:, env.LEVEL] = torch.tensor([3.0, 2.0, 3.0, 0.0])
    env.set_state(state._replace(inner=state.inner._replace(task=task)))
    env.step(torch.zeros(4, 12))
    task = env.state.inner.task.clone()
    task[:, env.LEVEL] = 0.0
    env.set_state(env.state._replace(inner=env.state.inner._replace(task=task)))
    env.step(torch.zeros(4, 12))
    stats = env.task_stats()
    assert float(stats["terrain_top_third"]) == 0.0 and float(stats["terrain_reached_top_third"]) == 0.5


def _terrain_rule():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "terrain_rule.py"
    spec = importlib.util.spec_from_file_location("terrain_rule", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_perfect_tracker_climbs_by_the_commanded_path_and_sinks_by_the_last_command():
    """benchmarks/terrain_rule.py's claim, at a small size: with Go1-Rough-v0's yaw-rate commands, |last command| x
    duration demotes a robot that follows every command in about half its episodes; the commanded path never does.
    A climber that never fails fills the levels in proportion to ``level + 1``: 27/55 in the top third of 10."""
    rule = _terrain_rule()
    from rl_gpu.envs.mujoco.rough import Go1RoughParams

    walked, last, path = rule.perfect_episodes(Go1RoughParams(), 4000, 1000, 0.02, np.random.default_rng(0))
    up = walked > 4.0
    assert 0.3 < up.mean() < 0.45
    assert ((walked < 0.5 * last) & ~up).mean() > 0.4 and ((walked < 0.5 * path - 1e-9) & ~up).mean() == 0.0
    mean, top = rule.stationary_top_share(10, float(up.mean()), 0.0)
    assert abs(top - 27 / 55) < 1e-9 and abs(mean - 6.0) < 1e-9
    assert rule.stationary_top_share(10, 0.38, 0.5)[1] < 0.1


def _top_stairs(env):
    c, b, top, k = env.grid.cells, env.grid.border_cells, env.grid.levels - 1, KINDS.index("stairs_up")
    return env.field.numpy()[b + top * c:b + (top + 1) * c, b + k * c:b + (k + 1) * c]


def test_the_terrain_scales_are_the_tasks_and_are_checked():
    env = _env(1)
    steps = np.diff(np.unique(np.round(_top_stairs(env), 9)))[:3]
    assert np.isclose(steps, env.params.max_step).all()  # Go1-sized steps
    assert np.isclose(np.diff(np.unique(np.round(_top_stairs(_env(1, max_step=0.23)), 9)))[:3], 0.23).all()
    for bad in ({"max_step": 0.01}, {"max_block": -1.0}, {"max_slope": float("nan")}, {"max_bump": 2.0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            _env(1, **bad)


def test_a_flat_border_surrounds_the_tiles():
    """A robot that walks off an edge tile stands on flat ground, not off the terrain (which would end its episode)."""
    env = _env(2, seed=7)
    b, c = env.grid.border_cells, env.grid.cells
    assert b * env.grid.resolution == 8.0
    field = env.field.numpy()
    assert field.shape == (env.grid.levels * c + 2 * b, len(KINDS) * c + 2 * b)
    inner = np.ones_like(field, dtype=bool)
    inner[b:-b, b:-b] = False
    assert (field[inner] == 0.0).all() and np.abs(field[~inner]).max() > 0
    # The tiles' centres lie the border's width further from the field's corner.
    centres = env.tile_centre(torch.tensor([0, 1]), torch.tensor([0, 2]))
    torch.testing.assert_close(centres, torch.tensor([[12.0, 12.0], [20.0, 28.0]], dtype=torch.float64))
    # A robot 6 m from tile (0, 0)'s centre towards the grid's edge (2 m past the tile) is on the border: on the
    # ground at height 0, and its episode goes on.
    state = env.get_state()
    physics = state.inner.physics.clone()
    q = env.layout.qpos.start
    physics[0, q:q + 2] = centres[0] - torch.tensor([6.0, 0.0], dtype=torch.float64)
    physics[0, q + 2] = env.home_qpos[2]
    env.set_state(state._replace(inner=state.inner._replace(physics=physics)))
    assert float(env.ground_height(physics[:1, q:q + 2])) == 0.0
    assert not bool(env.step(torch.zeros(2, 12)).terminated[0])
