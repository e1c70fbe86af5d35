"""Go1-Velocity-v0: spec and observation layout, commands, body-frame velocities against MuJoCo, pushes,
falls, reward terms, exact resume, seeding and domain randomisation."""

import copy
import math

import numpy as np
import pytest
import torch

mujoco = pytest.importorskip("mujoco")

from rl_gpu.envs import make  # noqa: E402
from rl_gpu.envs.mujoco.quadruped import Go1VelocityEnv, hash_uniform  # noqa: E402
from rl_gpu.envs.mujoco.randomization import Randomization  # noqa: E402

WIDE = Randomization(friction=(0.3, 1.5), mass=(0.7, 1.3), motor_strength=(0.5, 1.5), damping=(0.5, 2.0),
                     num_variants=6)


def _env(n=4, seed=0, **kwargs):
    return Go1VelocityEnv(n, seed=seed, num_threads=1, **kwargs)


def _actions(n, steps, seed=0, scale=0.5):
    g = torch.Generator().manual_seed(seed)
    return [scale * torch.randn(n, 12, generator=g) for _ in range(steps)]


def _random_physics(env, n, seed=0):
    """Physics with a random orientation, height, joint angles and velocities in every row."""
    g = torch.Generator().manual_seed(seed)
    quat = torch.randn(n, 4, generator=g, dtype=torch.float64)
    qpos = env.home_qpos.expand(n, -1).clone()
    qpos[:, 3:7] = quat / quat.norm(dim=1, keepdim=True)
    qpos[:, 7:] += 0.2 * torch.randn(n, 12, generator=g, dtype=torch.float64)
    qvel = torch.randn(n, env.layout.nv, generator=g, dtype=torch.float64)
    return env.layout.pack(qpos, qvel)


def test_spec_and_observation_layout():
    env = make("Go1-Velocity-v0", 6, seed=1, num_threads=1)
    spec = env.spec
    assert spec.obs_shape == (48,) and spec.action_shape == (12,) and spec.max_episode_steps == 1000
    assert spec.action_low == (-10.0,) * 12 and spec.action_high == (10.0,) * 12
    assert spec.reward_terms == Go1VelocityEnv.reward_terms and spec.exact_resume
    assert env.dt == pytest.approx(0.02) and env.model.nu == 12 and env.model.nmesh == 0
    obs = env.reset().obs
    assert obs.shape == (6, 48) and obs.dtype == torch.float32
    torch.testing.assert_close(obs[:, 6:9], torch.tensor([0.0, 0.0, -1.0]).expand(6, 3))  # level start
    p = env.params
    assert bool((obs[:, 18:30].abs() <= p.reset_joint_noise + 1e-6).all())  # joints near the home pose
    assert bool((obs[:, 36:48] == 0).all())  # no last action yet
    inner = env.state.inner
    assert torch.equal(obs[:, 9:12], env.commands(inner).float())
    qpos = env.qpos(inner)
    yaw = 2 * torch.atan2(qpos[:, 6], qpos[:, 3])
    assert len(set(yaw.tolist())) == 6  # random heading per row


def test_commands_stay_in_their_ranges_and_are_redrawn_on_schedule():
    env = _env(32, seed=2, command_resample_steps=3, zero_command_probability=0.0, push_interval_steps=0)
    p = env.params
    low = torch.tensor([p.lin_vel_x[0], p.lin_vel_y[0], p.ang_vel_z[0]], dtype=torch.float64)
    high = torch.tensor([p.lin_vel_x[1], p.lin_vel_y[1], p.ang_vel_z[1]], dtype=torch.float64)
    history = [env.commands(env.state.inner).clone()]
    for _ in range(7):
        result = env.step(torch.zeros(32, 12))
        assert not bool(result.done.any())
        history.append(env.commands(env.state.inner).clone())
    for t, command in enumerate(history):
        assert bool(((command >= low) & (command <= high)).all())
        assert len(set(command[:, 0].tolist())) == 32  # per-row draws
        if t:
            assert torch.equal(command, history[t - 1]) == (t % 3 != 0), t
    standing = _env(8, seed=2, zero_command_probability=1.0)
    assert not bool(standing.commands(standing.state.inner).any())
    ranges = _env(64, seed=3, lin_vel_x=(0.5, 0.5), lin_vel_y=(0.0, 0.0), ang_vel_z=(-0.2, 0.2),
                  zero_command_probability=0.0)
    command = ranges.commands(ranges.state.inner)
    assert bool((command[:, 0] == 0.5).all()) and bool((command[:, 1] == 0).all())
    assert bool((command[:, 2].abs() <= 0.2).all()) and float(command[:, 2].std()) > 0.05
    with pytest.raises(ValueError, match="command_resample_steps"):
        _env(1, command_resample_steps=0)


def test_body_frame_velocity_and_gravity_match_mujoco():
    env = _env(16, seed=4)
    physics = _random_physics(env, 16, seed=4)
    inner = env.state.inner._replace(physics=physics)
    lin, ang = env.base_velocity(inner)
    gravity = env.projected_gravity(inner)
    m = env.model
    d = mujoco.MjData(m)
    trunk = m.body("trunk").id
    vel = np.zeros(6)
    for i in range(16):
        mujoco.mj_setState(m, d, physics[i].numpy(), mujoco.mjtState.mjSTATE_FULLPHYSICS)
        mujoco.mj_forward(m, d)
        # [angular, linear] at the body frame (XBODY: mjOBJ_BODY would use the inertial frame), local axes
        mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_XBODY, trunk, vel, 1)
        np.testing.assert_allclose(ang[i].numpy(), vel[:3], atol=1e-10)
        np.testing.assert_allclose(lin[i].numpy(), vel[3:], atol=1e-10)
        xmat = d.xmat[trunk].reshape(3, 3)  # body to world
        np.testing.assert_allclose(gravity[i].numpy(), xmat.T @ np.array([0.0, 0.0, -1.0]), atol=1e-12)
    error = env.tracking_error(inner)
    expected = (env.commands(inner) - torch.stack((lin[:, 0], lin[:, 1], ang[:, 2]), dim=1)).abs()
    torch.testing.assert_close(error, expected)


def test_a_push_kicks_the_base_planar_velocity_on_schedule():
    env = _env(8, seed=5, push_interval_steps=4, max_push_velocity=1.0)
    inner = env.state.inner
    qv = env.layout.qvel.start
    for step in (0, 3):  # no push at the start of an episode nor off schedule
        task = inner.task.clone()
        task[:, env.STEP] = step
        assert torch.equal(env._perturb(inner._replace(task=task)), inner.physics)
    task = inner.task.clone()
    task[:, env.STEP] = 8
    pushed = env._perturb(inner._replace(task=task))
    kick = pushed[:, qv:qv + 2] - inner.physics[:, qv:qv + 2]
    assert bool((kick.abs() <= 1.0).all()) and bool((kick.norm(dim=1) > 0).all())
    assert len(set(kick[:, 0].tolist())) == 8
    untouched = torch.ones(pushed.shape[1], dtype=torch.bool)
    untouched[qv:qv + 2] = False
    assert torch.equal(pushed[:, untouched], inner.physics[:, untouched])
    # In an episode: the same start with and without pushes agrees until the first push, then not.
    calm = _env(8, seed=5, push_interval_steps=0)
    zero = torch.zeros(8, 12)
    for t in range(1, 6):
        a, b = env.step(zero), calm.step(zero)
        assert torch.equal(a.obs, b.obs) == (t <= 4), t
    vx_pushed = env.base_velocity(env.state.inner)[0][:, :2]
    vx_calm = calm.base_velocity(calm.state.inner)[0][:, :2]
    assert float((vx_pushed - vx_calm).norm(dim=1).min()) > 0.05


def test_a_fall_terminates_and_pays_the_termination_term():
    env = _env(3, seed=6, push_interval_steps=0)
    state = env.get_state()
    physics = state.inner.physics.clone()
    q = env.layout.qpos.start
    physics[1, q + 3:q + 7] = torch.tensor([0.0, 1.0, 0.0, 0.0], dtype=torch.float64)  # upside down
    physics[1, q + 2] = 0.4
    physics[2, q + 2] = 0.08  # trunk on the ground
    env.set_state(state._replace(inner=state.inner._replace(physics=physics)))
    result = env.step(torch.zeros(3, 12))
    assert result.terminated.tolist() == [False, True, True]
    term = env._step_terms[:, env.reward_terms.index("termination")]
    fall = env.params.termination * env.dt
    assert term.tolist() == pytest.approx([0.0, fall, fall])
    assert bool((result.obs[1:] != result.final_obs[1:]).any())  # auto-reset


@pytest.mark.parametrize("only_positive", [True, False])
def test_reward_terms_make_the_reward(only_positive):
    env = _env(8, seed=7, push_interval_steps=3, only_positive_rewards=only_positive)
    p, dt = env.params, env.dt
    clipped = 0
    for action in _actions(8, 12, seed=7):
        result = env.step(action)
        terms = env._step_terms
        assert terms.shape == (8, len(env.reward_terms))
        fall = terms[:, env.reward_terms.index("termination")]
        others = terms.sum(dim=1) - fall
        expected = others.clamp(min=0) + fall if only_positive else terms.sum(dim=1)
        torch.testing.assert_close(result.reward, expected.float())
        clipped += int((others < 0).sum())
        named = dict(zip(env.reward_terms, terms.T))
        assert bool((named["track_lin_vel_xy"] > 0).all()) and bool((named["track_lin_vel_xy"] <= dt).all())
        assert bool((named["track_ang_vel_z"] <= p.track_ang_vel_z * dt).all())
        for name in ("lin_vel_z", "ang_vel_xy", "orientation", "torques", "action_rate"):
            assert bool((named[name] <= 0).all()), name
    assert clipped > 0  # noisy actions cost more than they track: the clip was exercised
    assert bool((env.joint_torques(env.state.inner).abs() <= 35.55 + 1e-9).all())
    stats = env.tracking_error_stats()
    assert set(stats) == {"lin_vel_x", "lin_vel_y", "ang_vel_z"}
    assert all(math.isfinite(float(v)) and float(v) >= 0 for v in stats.values())
    assert math.isnan(float(env.tracking_error_stats()["lin_vel_x"]))  # the sums restart


def test_huge_actions_are_clipped_and_stay_finite():
    env = _env(2, seed=8)
    result = env.step(torch.full((2, 12), 3e38))
    assert bool(torch.isfinite(result.reward).all()) and bool(torch.isfinite(result.obs).all())
    assert bool((result.obs[:, 36:48] == env.params.clip_actions).all())


def test_state_dict_resumes_exactly():
    kwargs = dict(command_resample_steps=4, push_interval_steps=3)
    env = _env(6, seed=9, **kwargs)
    actions = _actions(6, 30, seed=9)
    for action in actions[:12]:
        env.step(action)
    saved = copy.deepcopy(env.state_dict())
    first = [env.step(action) for action in actions[12:]]
    other = _env(6, seed=123, **kwargs)
    other.load_state_dict(saved)
    for action, expected in zip(actions[12:], first):
        got = other.step(action)
        for name in ("obs", "reward", "terminated", "truncated", "final_obs"):
            assert torch.equal(getattr(got, name), getattr(expected, name)), name


def test_same_seed_same_trajectory_other_seed_another():
    def run(seed):
        env = _env(4, seed=seed, push_interval_steps=5, command_resample_steps=7)
        out = [env.reset().obs]
        for action in _actions(4, 20, seed=0):
            r = env.step(action)
            out += [r.obs, r.reward[:, None]]
        return torch.cat(out, dim=1)

    a, b, c = run(10), run(10), run(11)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert bool(torch.isfinite(a).all())


def test_randomized_rows_get_different_physics_and_the_seed_fixes_the_pool():
    env = _env(24, seed=11, randomization=WIDE)
    variant = env.state.inner.variant
    assert len(env.engine.models) == 6 and len(set(variant.tolist())) > 1
    base = env.model
    for k, m in enumerate(env.engine.models):  # position servos: kp and the bias terms scale together
        s = env.variant_scales["motor_strength"][k]
        np.testing.assert_allclose(m.actuator_gainprm[:, 0], base.actuator_gainprm[:, 0] * s)
        np.testing.assert_allclose(m.actuator_biasprm[:, 1], base.actuator_biasprm[:, 1] * s)
    state = env.get_state()
    physics = state.inner.physics[:1].expand_as(state.inner.physics).clone()
    task = state.inner.task[:1].expand_as(state.inner.task).clone()
    env.set_state(state._replace(inner=state.inner._replace(physics=physics, task=task)))
    for action in _actions(1, 10, seed=11):
        obs = env.step(action.expand(24, 12)).obs
    for i in range(24):
        for j in range(i + 1, 24):
            assert torch.equal(obs[i], obs[j]) == bool(variant[i] == variant[j]), (i, j)
    twin = _env(3, seed=11, randomization=WIDE)
    for name, scales in env.variant_scales.items():
        assert np.array_equal(scales, twin.variant_scales[name]), name
    other = _env(3, seed=12, randomization=WIDE)
    assert not np.array_equal(env.variant_scales["friction"], other.variant_scales["friction"])
    privileged = env.privileged_obs(env.state.inner)
    assert privileged.shape == (24, 7)
    expected = torch.tensor(env.variant_scales["friction"][:, 0], dtype=torch.float32)[variant]
    torch.testing.assert_close(privileged[:, 1], expected)


def test_standing_still_keeps_four_feet_on_the_ground():
    env = _env(4, seed=13, push_interval_steps=0, randomization=None)
    for _ in range(25):
        result = env.step(torch.zeros(4, 12))
    assert not bool(result.done.any())
    privileged = env.privileged_obs(env.state.inner)
    assert bool((privileged[:, 3:] == 1).all())  # foot contacts
    assert bool((privileged[:, 0] > 0.22).all()) and bool((privileged[:, 1:3] == 1).all())


def test_hash_uniform_is_a_pure_uniform_draw():
    key = torch.arange(4000, dtype=torch.float64) * 7919
    counter = torch.full((4000,), 5.0, dtype=torch.float64)
    u = hash_uniform(key, counter, stream=1, size=3)
    assert u.shape == (4000, 3) and bool(((u >= 0) & (u < 1)).all())
    assert torch.equal(u, hash_uniform(key, counter, stream=1, size=3))
    assert abs(float(u.mean()) - 0.5) < 0.02 and abs(float(u.var()) - 1 / 12) < 0.005
    assert not bool(torch.isclose(u, hash_uniform(key, counter + 1, stream=1, size=3)).any())
    assert not bool(torch.isclose(u[:, :2], hash_uniform(key, counter, stream=2, size=2)).all())


def test_servo_gains_are_the_task_parameters_in_every_variant():
    env = _env(4, seed=14, randomization=WIDE, stiffness=20.0, joint_damping=0.7)
    for k, m in enumerate(env.engine.models):
        s = env.variant_scales["motor_strength"][k]
        np.testing.assert_allclose(m.actuator_gainprm[:, 0], 20.0 * s)
        np.testing.assert_allclose(m.actuator_biasprm[:, 1], -20.0 * s)
        np.testing.assert_allclose(m.dof_damping[6:], 0.7 * env.variant_scales["damping"][k][6:])
    assert env.model.dof_damping[:6].tolist() == [0.0] * 6  # the free joint keeps none
    with pytest.raises(ValueError, match="stiffness"):
        _env(1, stiffness=0.0)
    with pytest.raises(ValueError, match="stiffness must be a number"):
        _env(1, stiffness="stiff")
    with pytest.raises(ValueError, match="only_positive_rewards must be True or False"):
        _env(1, only_positive_rewards="yes")


def test_feet_air_time_pays_each_touchdown_by_its_swing_time():
    """Four rows standing on the ground (every foot touches after the step), with hand-set air times and last
    contacts: a foot that was in the air lands (legged_gym's rule) and is paid ``dt * (air + dt - 0.5)``; the
    term is zero for a standing command."""
    env = _env(4, seed=15, push_interval_steps=0, randomization=None, command_resample_steps=1000)
    for _ in range(10):
        env.step(torch.zeros(4, 12))  # settle: every foot touches
    state = env.get_state()
    task = state.inner.task.clone()
    air = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.6, 0.0, 0.0, 0.0], [0.7, 0.3, 0.0, 0.0], [0.6, 0.0, 0.0, 0.0]],
                       dtype=torch.float64)
    task[:, env.AIR_TIME] = air
    task[:, env.LAST_CONTACT] = (air == 0).double()
    task[:, env.CMD] = torch.tensor([[1.0, 0.0, 0.0]] * 3 + [[0.0, 0.05, 0.5]], dtype=torch.float64)
    env.set_state(state._replace(inner=state.inner._replace(task=task)))
    env.step(torch.zeros(4, 12))
    assert bool(env.foot_contact(env.state.inner).all())
    dt = env.dt
    paid = env._step_terms[:, env.reward_terms.index("feet_air_time")]
    expected = [0.0, dt * (0.6 + dt - 0.5), dt * ((0.7 + dt - 0.5) + (0.3 + dt - 0.5)), 0.0]
    assert paid.tolist() == pytest.approx(expected)
    assert bool((env.state.inner.task[:, env.AIR_TIME] == 0).all())  # landed feet restart their clocks
