"""Symmetry (``--symmetry``): Go1's declared mirror is an involution, maps a mirrored state's observation to the
mirrored observation (the critic group's too), and PPO learns from each rollout and its mirror image, rated by
the collecting policy; a task without a declared symmetry is refused in one line."""

import pytest
import torch

mujoco = pytest.importorskip("mujoco")

from rl_gpu.algos.base import Setup  # noqa: E402
from rl_gpu.algos.ppo import PPO, PPOConfig  # noqa: E402
from rl_gpu.algos.ppo.symmetry import check_mirror, mirrored, with_mirror_image  # noqa: E402
from rl_gpu.envs.mujoco.base import MjInner  # noqa: E402
from rl_gpu.envs.mujoco.quadruped import Go1VelocityEnv  # noqa: E402

QUIET = dict(push_interval_steps=0, randomization=None, num_threads=1)


JOINTS = [3, 4, 5, 0, 1, 2, 9, 10, 11, 6, 7, 8]
"""Legs FR, FL, RR, RL swap sides; each leg's (abduction, thigh, calf)."""
FLIP = torch.tensor([-1.0, 1.0, 1.0] * 4, dtype=torch.float64)
"""Abduction turns about the forward axis: its angle changes sign in the mirror; thigh and calf turn about y."""


def _mirror_state(env: Go1VelocityEnv, inner: MjInner) -> MjInner:
    """The world reflected in the trunk's sagittal plane (y -> -y), built by hand from MuJoCo's coordinates."""
    qpos, qvel = env.qpos(inner).clone(), env.qvel(inner).clone()
    joints, flip = JOINTS, FLIP
    qpos[:, 1] *= -1
    qpos[:, 4] *= -1  # quaternion (w, x, y, z) -> (w, -x, y, -z)
    qpos[:, 6] *= -1
    qpos[:, 7:] = env.qpos(inner)[:, 7:][:, list(joints)] * flip
    qvel[:, 1] *= -1  # world linear velocity (vx, -vy, vz)
    qvel[:, 3] *= -1  # body angular velocity (-wx, wy, -wz)
    qvel[:, 5] *= -1
    qvel[:, 6:] = env.qvel(inner)[:, 6:][:, list(joints)] * flip
    task = inner.task.clone()
    task[:, env.CMD] = inner.task[:, env.CMD] * torch.tensor([1.0, -1.0, -1.0], dtype=torch.float64)
    task[:, env.LAST_ACTION] = inner.task[:, env.LAST_ACTION][:, list(joints)] * flip
    feet = [1, 0, 3, 2]
    task[:, env.AIR_TIME] = inner.task[:, env.AIR_TIME][:, feet]
    task[:, env.LAST_CONTACT] = inner.task[:, env.LAST_CONTACT][:, feet]
    observed = inner.observed.clone()
    observed[:, :12] = inner.observed[:, :12][:, list(joints)] * flip  # actuator forces
    observed[:, 12:16] = inner.observed[:, 12:16][:, feet]  # touch sensors
    return MjInner(env.layout.pack(qpos, qvel), inner.variant, observed, task)


def _random_inner(env: Go1VelocityEnv, n: int) -> MjInner:
    g = torch.Generator().manual_seed(0)
    quat = torch.randn(n, 4, generator=g, dtype=torch.float64)
    qpos = env.home_qpos.expand(n, -1).clone()
    qpos[:, :3] += torch.randn(n, 3, generator=g, dtype=torch.float64)
    qpos[:, 3:7] = quat / quat.norm(dim=1, keepdim=True)
    qpos[:, 7:] += 0.3 * torch.randn(n, 12, generator=g, dtype=torch.float64)
    qvel = torch.randn(n, env.layout.nv, generator=g, dtype=torch.float64)
    inner = env.state.inner
    task = inner.task.clone()
    task[:, env.CMD] = torch.randn(n, 3, generator=g, dtype=torch.float64)
    task[:, env.LAST_ACTION] = torch.randn(n, 12, generator=g, dtype=torch.float64)
    observed = torch.randn(inner.observed.shape, generator=g, dtype=torch.float64)
    observed[:, 12:16] = (observed[:, 12:16] > 0).double()
    return MjInner(env.layout.pack(qpos, qvel), inner.variant, observed, task)


def test_the_hand_made_reflection_is_the_models_own():
    # MuJoCo's kinematics: every site of the reflected state sits where its mirror twin did, y negated.
    env = Go1VelocityEnv(3, seed=0, **QUIET)
    inner = _random_inner(env, 3)
    reflected = _mirror_state(env, inner)
    model, data = env.model, mujoco.MjData(env.model)
    twin = {"FR": "FL", "FL": "FR", "RR": "RL", "RL": "RR"}

    def sites(qpos):
        data.qpos[:] = qpos.numpy()
        mujoco.mj_kinematics(model, data)
        return {name: data.site(name).xpos.copy() for name in twin}

    for row in range(3):
        before, after = sites(env.qpos(inner)[row]), sites(env.qpos(reflected)[row])
        for name, other in twin.items():
            expected = before[other] * [1.0, -1.0, 1.0]
            assert abs(after[name] - expected).max() < 1e-9, (row, name)


def test_go1s_mirror_is_an_involution_and_mirrors_what_it_observes():
    env = Go1VelocityEnv(6, seed=0, **QUIET)
    mirror = env.spec.mirror
    check_mirror(mirror, 48, 12, 7)
    x = torch.randn(5, 48)
    assert torch.equal(mirrored(mirrored(x, mirror.obs_index, mirror.obs_sign), mirror.obs_index, mirror.obs_sign), x)
    inner = _random_inner(env, 6)
    reflected = _mirror_state(env, inner)
    torch.testing.assert_close(env._observe(reflected), mirrored(env._observe(inner), mirror.obs_index,
                                                                   mirror.obs_sign), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(env._observe_critic(reflected), mirrored(env._observe_critic(inner),
                                                                        mirror.critic_index, mirror.critic_sign))
    # an observation wrapper changes the layout the symmetry was declared on: no mirror
    from rl_gpu.envs.registry import make
    assert make("Go1-Velocity-v0?obs_mask=0,1,2", 1, num_threads=1, **{k: v for k, v in QUIET.items()
                                                                        if k != "num_threads"}).spec.mirror is None


def test_go1_rough_mirrors_its_height_samples_on_a_symmetric_tile():
    """A pyramid slope is symmetric about its tile's centre line: a robot reflected across it sees the mirrored
    height samples (critic group, and the observation with policy_heights)."""
    from rl_gpu.envs.mujoco.rough import Go1RoughEnv

    env = Go1RoughEnv(6, seed=0, policy_heights=True, terrain_levels=4, **QUIET)
    mirror = env.spec.mirror
    check_mirror(mirror, 48 + 63, 12, 7 + 63)
    inner = _random_inner(env, 6)
    g = torch.Generator().manual_seed(5)
    column = float(env.grid.kinds.index("slope_up"))
    centre = env.tile_centre(torch.full((6,), 3.0), torch.full((6,), column))
    qpos = env.qpos(inner).clone()
    # On one face of the pyramid (|dy| > |dx| under every sample, inside the tile): the surface there is one plane,
    # which the height field's triangles reproduce on both sides of the line alike.
    u = torch.rand(6, 2, generator=g, dtype=torch.float64)
    side = torch.where(torch.rand(6, generator=g) < 0.5, -1.0, 1.0).double()
    qpos[:, :2] = centre + torch.stack((0.6 * u[:, 0] - 0.3, side * (2.4 + 0.4 * u[:, 1])), dim=1)
    qpos[:, 2] = env.ground_height(qpos[:, :2]) + 0.3
    inner = inner._replace(physics=env.layout.pack(qpos, env.qvel(inner)))
    reflected = _mirror_state(env, inner)
    physics = reflected.physics.clone()
    physics[:, env.layout.qpos.start + 1] += 2 * centre[:, 1]  # reflected across the tile's centre line, y = c
    reflected = reflected._replace(physics=physics)
    for observe, index, sign in ((env._observe, mirror.obs_index, mirror.obs_sign),
                                 (env._observe_critic, mirror.critic_index, mirror.critic_sign)):
        torch.testing.assert_close(observe(reflected), mirrored(observe(inner), index, sign), atol=1e-5, rtol=1e-5)
    assert float(env.height_scan(inner).std()) > 0.05  # the samples see the slope, not flat ground


def _ppo(device="cpu", compile="off", **config):
    env = Go1VelocityEnv(4, seed=1, device=device, **QUIET)
    torch.manual_seed(0)
    setup = Setup(env=env, seed=2, num_steps=8, hidden_sizes=(16,), compile=compile)
    return PPO.from_setup(setup, PPOConfig(num_minibatches=2, update_epochs=2, **config))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_captured_update_mirrors_as_the_eager_one_does():
    runs = [_ppo("cuda", mode, symmetry=True) for mode in ("off", "cudagraphs")]
    for algo in runs:
        for _ in range(3):
            algo.iterate()
    for x, y in zip(runs[0].policy.parameters(), runs[1].policy.parameters()):
        assert torch.allclose(x, y, atol=1e-4)


def test_ppo_learns_from_the_rollout_and_its_mirror_image_rated_by_the_collecting_policy():
    algo = _ppo(symmetry=True)
    with torch.no_grad():  # a symmetric policy: mean 0 everywhere, one std for all
        last = [m for m in algo.policy.actor if isinstance(m, torch.nn.Linear)][-1]
        last.weight.zero_()
        last.bias.zero_()
    rollout = algo.collect()
    advantage, returns = torch.randn(8, 4), torch.randn(8, 4)
    doubled, adv, ret = with_mirror_image(algo.policy, algo.units.mirror, rollout, advantage, returns)
    mirror = algo.env.spec.mirror
    assert doubled.obs.shape == (8, 8, 48) and torch.equal(adv[:, 4:], advantage) and torch.equal(ret[:, 4:], returns)
    assert torch.equal(doubled.obs[:, 4:], mirrored(rollout.obs, mirror.obs_index, mirror.obs_sign))
    torch.testing.assert_close(doubled.log_prob[:, 4:], doubled.log_prob[:, :4])  # the same to a symmetric policy
    result = algo.iterate()  # a whole update on 2 x 32 slots
    assert bool(torch.isfinite(result["loss"]))


# (a wrapped Go1's mirror is None: the first test; the refusal is the same line)
@pytest.mark.parametrize("env_id, needle", [("CartPole-v1", "declares no left-right symmetry")])
def test_a_task_without_a_declared_symmetry_is_refused_in_one_line(tmp_path, call_main, env_id, needle):
    from rl_gpu.cli.train import main

    code, _, err = call_main(main, "--env", env_id, "--symmetry", "--max-updates", "1", "--device", "cpu",
                             "--output", tmp_path / "never")
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err
    assert not (tmp_path / "never").exists()
