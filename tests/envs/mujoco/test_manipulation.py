"""PandaPickCube-v0: spec and observation against MuJoCo's own kinematics, resets, control, reward terms and
success on hand-made states, termination, the generic contract checks and exact resume."""

import copy
import functools

import numpy as np
import pytest
import torch

mujoco = pytest.importorskip("mujoco")

from rl_gpu.envs import make  # noqa: E402
from rl_gpu.envs.mujoco.manipulation import PandaPickCubeEnv, quat_to_matrix  # noqa: E402
from rl_gpu.envs.mujoco.randomization import Randomization  # noqa: E402
from rl_gpu.envs.testing import check_env  # noqa: E402

SMALL_POOL = Randomization(friction=(0.8, 1.2), mass=(0.7, 1.4), num_variants=3)

# Menagerie's "pickup" keyframe of the same scene (mjx_single_cube.xml): the fingers closed on the cube.
PICKUP_QPOS = (0.2897, 0.50732, -0.140016, -2.176, -0.0310497, 2.51592, -0.49251, 0.04, 0.0399982, 0.511684,
               0.0645413, 0.0298665, 0.665781, 0.0, 0.0, -0.746147)
PICKUP_CTRL = (0.2897, 0.423, -0.144392, -2.13105, -0.0291743, 2.52586, -0.492492, 0.04)


def _env(n=4, seed=0, **kwargs):
    kwargs.setdefault("randomization", None)
    return PandaPickCubeEnv(n, seed=seed, num_threads=1, **kwargs)


def _site_position(env, qpos):
    """The gripper site by MuJoCo's forward kinematics of ``qpos`` (the reference for the sensor)."""
    data = mujoco.MjData(env.model)
    data.qpos[:] = qpos
    mujoco.mj_kinematics(env.model, data)
    return torch.tensor(data.site("gripper").xpos.copy())


def test_spec_observation_and_resets():
    env = make("PandaPickCube-v0", 16, seed=1, num_threads=1)
    spec = env.spec
    assert spec.obs_shape == (66,) and spec.action_shape == (8,) and spec.max_episode_steps == 150
    assert spec.action_low == (-1.0,) * 8 and spec.action_high == (1.0,) * 8
    assert spec.reward_terms == PandaPickCubeEnv.reward_terms and spec.exact_resume
    assert env.dt == pytest.approx(0.02) and env.model.nmesh == 0 and env.model.nu == 8
    obs = env.reset().obs.double()
    inner = env.state.inner
    qpos, p = env.qpos(inner), env.params
    torch.testing.assert_close(obs[:, :16], qpos, atol=1e-6, rtol=0)
    torch.testing.assert_close(qpos[:, :9], env.home_qpos[:9].expand(16, 9))  # the arm starts at home
    box, target = env.box_position(inner), env.target(inner)
    home_box = env.home_qpos[9:12]
    assert bool(((box[:, :2] - home_box[:2]).abs() <= p.box_xy_range).all()) and bool((box[:, 2] == 0.03).all())
    assert bool(((target[:, :2] - home_box[:2]).abs() <= p.target_xy_range).all())
    assert bool(((target[:, 2] - home_box[2] >= 0.2) & (target[:, 2] - home_box[2] <= 0.4)).all())
    assert len(set(box[:, 0].tolist())) == 16 and len(set(target[:, 2].tolist())) == 16
    for row in (0, 7):
        torch.testing.assert_close(obs[row, 31:34], _site_position(env, qpos[row].numpy()), atol=1e-6, rtol=0)
    torch.testing.assert_close(obs[:, 46:49], box - obs[:, 31:34], atol=1e-6, rtol=0)
    torch.testing.assert_close(obs[:, 49:52], target - box, atol=1e-6, rtol=0)
    torch.testing.assert_close(obs[:, 58:66], env.home_ctrl - qpos[:, :8], atol=1e-6, rtol=0)


def test_rotation_matrices_are_mujocos():
    g = torch.Generator().manual_seed(0)
    quat = torch.randn(5, 4, generator=g, dtype=torch.float64)
    ours = quat_to_matrix(quat)
    for q, m in zip(quat, ours):
        expected = np.zeros(9)
        mujoco.mju_quat2Mat(expected, (q / q.norm()).numpy())
        np.testing.assert_allclose(m.flatten().numpy(), expected, atol=1e-12)


def test_gripper_kinematics_are_mujocos():
    env = _env(1)
    g = torch.Generator().manual_seed(1)
    qpos = env.home_qpos.expand(6, -1).clone()
    qpos[:, :7] += torch.randn(6, 7, generator=g, dtype=torch.float64)
    pos, rot = env.gripper_chain(qpos)
    for q, p, r in zip(qpos, pos, rot):
        data = mujoco.MjData(env.model)
        data.qpos[:] = q.numpy()
        mujoco.mj_kinematics(env.model, data)
        np.testing.assert_allclose(p.numpy(), data.site("gripper").xpos, atol=1e-12)
        np.testing.assert_allclose(r.flatten().numpy(), data.site("gripper").xmat, atol=1e-12)


def test_actions_move_the_servo_targets_within_range():
    env = _env(3, seed=2)
    before = env.state.inner.task[:, env.CTRL].clone()
    action = torch.tensor([[0.5] * 8, [-1.0] * 8, [3e38] * 8])
    result = env.step(action)
    ctrl = env.state.inner.task[:, env.CTRL]
    expected = torch.clamp(before + 0.04 * action.double().clamp(-1, 1), env.ctrl_low, env.ctrl_high)
    torch.testing.assert_close(ctrl, expected)
    assert float(ctrl[2, 7]) == pytest.approx(0.04)  # the gripper's range ends at 4 cm
    assert bool(torch.isfinite(result.obs).all()) and bool(torch.isfinite(result.reward).all())


def test_reward_terms_at_rest_are_the_hand_computed_ones():
    env = _env(4, seed=3)
    result = env.step(torch.zeros(4, 8))
    inner, p = env.state.inner, env.params
    qpos = env.qpos(inner)
    gripper = torch.stack([_site_position(env, q.numpy()) for q in qpos])
    to_box = (env.box_position(inner) - gripper).norm(dim=1)
    expected = {
        "gripper_box": p.gripper_box * (1 - torch.tanh(5 * to_box)),
        "box_target": torch.zeros(4, dtype=torch.float64),  # the cube is not reached yet
        "no_floor_collision": torch.full((4,), p.no_floor_collision, dtype=torch.float64),
        "robot_target_qpos": p.robot_target_qpos * (1 - torch.tanh((qpos[:, :7] - env.home_qpos[:7]).norm(dim=1))),
        "success": torch.zeros(4, dtype=torch.float64),
    }
    terms = env._step_terms
    for i, name in enumerate(env.reward_terms):
        torch.testing.assert_close(terms[:, i], expected[name], atol=1e-12, rtol=0, msg=name)
    torch.testing.assert_close(result.reward.double(), terms[:, :4].sum(dim=1), atol=1e-5, rtol=0)


def _holding(env, target_offset, step):
    """Rows in Menagerie's pickup pose (the cube between closed fingers), reached, with the given target offset
    from the cube and step counter."""
    n = len(target_offset)
    state = env.get_state()
    qpos = torch.tensor(PICKUP_QPOS, dtype=torch.float64).expand(n, -1)
    physics = env.layout.pack(qpos, torch.zeros(n, env.layout.nv, dtype=torch.float64))
    task = state.inner.task.clone()
    task[:, env.CTRL] = torch.tensor(PICKUP_CTRL, dtype=torch.float64)
    task[:, env.TARGET] = qpos[:, 9:12] + torch.tensor(target_offset, dtype=torch.float64)
    task[:, env.REACHED] = 1.0
    task[:, env.STEP] = torch.tensor(step, dtype=torch.float64)
    env.set_state(state._replace(inner=state.inner._replace(physics=physics, task=task),
                                 episode_step=torch.tensor(step)))


def test_success_is_the_cube_held_at_the_target_at_the_last_step():
    env = _env(4, seed=4)
    _holding(env, [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.2], [0.01, 0.0, 0.0]], [149, 100, 149, 149])
    result = env.step(torch.zeros(4, 8))
    success = env._step_terms[:, env.reward_terms.index("success")]
    assert success.tolist() == [1.0, 0.0, 0.0, 1.0]  # at the last step, held there; not before; not far away
    assert result.truncated.tolist() == [True, False, True, True]
    box_target = env._step_terms[:, env.reward_terms.index("box_target")]
    final = result.final_obs.double()  # truncated rows were reset: the cube and target as the step left them
    pos_err, rot_err = final[:, 49:52].norm(dim=1), final[:, 52:58].norm(dim=1)
    expected = env.params.box_target * (1 - torch.tanh(5 * (0.9 * pos_err + 0.1 * rot_err)))
    torch.testing.assert_close(box_target, expected, atol=1e-5, rtol=0)
    assert float(box_target[0]) > float(box_target[2])


def test_a_cube_out_of_bounds_terminates():
    env = _env(3, seed=5)
    state = env.get_state()
    physics = state.inner.physics.clone()
    q = env.layout.qpos.start
    physics[1, q + 9] = 1.3  # beyond 1 m
    physics[2, q + 11] = -0.5  # under the floor
    env.set_state(state._replace(inner=state.inner._replace(physics=physics)))
    assert env.step(torch.zeros(3, 8)).terminated.tolist() == [False, True, True]


def test_generic_contract_checks():
    # The model pool is drawn when a batch is built (tests/envs/mujoco/test_mujoco_env.py): the generic checks,
    # which rebuild with other seeds, run on the nominal model.
    factory = functools.partial(PandaPickCubeEnv, num_threads=1, randomization=None)
    reports = check_env(factory, num_envs=4, num_steps=30, seed=1)
    assert {"determinism", "batch_vs_single", "autoreset"} <= set(reports)


def _resumes_exactly(pool: Randomization, steps: int) -> None:
    """A batch restored into another (another seed) from a state saved after 8 steps steps exactly as the first."""
    env = _env(4, seed=9, randomization=pool)
    g = torch.Generator().manual_seed(9)
    actions = [torch.rand(4, 8, generator=g) * 2 - 1 for _ in range(steps)]
    for action in actions[:8]:
        env.step(action)
    saved = copy.deepcopy(env.state_dict())
    first = [env.step(action) for action in actions[8:]]
    other = _env(4, seed=123, randomization=pool)
    other.load_state_dict(saved)
    for action, expected in zip(actions[8:], first):
        got = other.step(action)
        for name in ("obs", "reward", "terminated", "truncated", "final_obs"):
            assert torch.equal(getattr(got, name), getattr(expected, name)), name


def test_state_dict_resumes_exactly():
    _resumes_exactly(SMALL_POOL, 20)


def test_reach_observes_the_gripper_and_pays_for_closing_in():
    env = make("PandaReach-v0", 6, seed=2, num_threads=1, randomization=None)
    assert env.spec.obs_shape == (38,) and env.spec.reward_terms == ("reach", "no_floor_collision",
                                                                     "robot_target_qpos", "success")
    obs = env.reset().obs.double()
    inner, p = env.state.inner, env.params
    target = env.target(inner)
    assert bool(((target >= torch.tensor(p.target_low)) & (target <= torch.tensor(p.target_high))).all())
    gripper = torch.stack([_site_position(env, q.numpy()) for q in env.qpos(inner)])
    torch.testing.assert_close(obs[:, 18:21], gripper, atol=1e-6, rtol=0)
    torch.testing.assert_close(obs[:, 27:30], target - gripper, atol=1e-6, rtol=0)
    env.step(torch.zeros(6, 8))
    inner = env.state.inner
    distance = (env.target(inner) - env.gripper_position(inner)).norm(dim=1)
    torch.testing.assert_close(env._step_terms[:, 0], p.reach * (1 - torch.tanh(5 * distance)), atol=1e-12, rtol=0)
    # A target placed on the gripper at the last step is a success; one 5 cm away is not.
    state = env.get_state()
    task = state.inner.task.clone()
    task[:, env.TARGET] = env.gripper_position(inner)
    task[1:, env.TARGET] += torch.tensor([0.05, 0.0, 0.0], dtype=torch.float64)
    task[:, env.STEP] = 149.0
    env.set_state(state._replace(inner=state.inner._replace(task=task), episode_step=torch.full((6,), 149)))
    env.step(torch.zeros(6, 8))
    assert env._step_terms[:, 3].tolist() == [1.0] + [0.0] * 5


def test_cube_sizes_are_drawn_with_the_pool_and_the_cube_starts_on_the_floor():
    from rl_gpu.core.errors import UsageError
    from rl_gpu.envs.mujoco.randomization import draw_scales

    env = make("PandaPickCube-v0?cube_size=0.7,1.3", 32, seed=3, num_threads=1)
    box = env.model.geom("box").id
    scales = env.variant_scales["object_size"][:, 0]
    assert 0.7 <= scales.min() < scales.max() <= 1.3 and len(env.engine.models) == 32
    for k, model in enumerate(env.engine.models):  # every variant's cube, collision bounds included
        np.testing.assert_allclose(model.geom_size[box], env.model.geom_size[box] * scales[k])
        np.testing.assert_allclose(model.geom_rbound[box], env.model.geom_rbound[box] * scales[k])
    inner = env.state.inner
    scale = env.object_scale(inner.variant)
    torch.testing.assert_close(scale, torch.from_numpy(scales)[inner.variant])
    torch.testing.assert_close(env.box_position(inner)[:, 2], 0.03 * scale)  # resting on the floor
    for _ in range(20):
        env.step(torch.zeros(32, 8))
    assert float((env.box_position(env.state.inner)[:, 2] - 0.03 * scale).abs().max()) < 1e-3  # and stays
    # Asking for sizes leaves the other draws of the pool as they were.
    plain = draw_scales(env.model, SMALL_POOL, 5)
    sized = draw_scales(env.model, Randomization(**{**SMALL_POOL.__dict__, "object_size": (0.8, 1.2)}), 5)
    assert set(sized) == set(plain) | {"object_size"}
    assert all(np.array_equal(plain[k], sized[k]) for k in plain)
    assert make("PandaPickCube-v0", 2, seed=3, num_threads=1).object_scale(torch.zeros(2, dtype=torch.long)) is None
    with pytest.raises(UsageError, match="cube_size must be a"):
        make("PandaPickCube-v0?cube_size=1.2,1.0", 2, num_threads=1)
    with pytest.raises(ValueError, match="the mujoco-warp backend does not take it"):
        make("PandaPickCube-v0?cube_size=0.8,1.2", 2, num_threads=1, backend="mujoco-warp")
    with pytest.raises(ValueError, match="names no objects"):
        make("HalfCheetah-v5", 2, num_threads=1, randomization=Randomization(object_size=(0.9, 1.1)))


def test_resized_cubes_resume_exactly():
    # Past the 150-step limit: resets draw variants (and so cube sizes) again.
    _resumes_exactly(Randomization(friction=(0.8, 1.2), object_size=(0.8, 1.2), num_variants=3), 200)
