"""The MuJoCo Warp engine against MuJoCo's C engine: same starts and actions, agreement to float32 tolerances;
randomised rows as per-world model fields; derived fields; the PGS refusal.

Every test is slow (deselected by default; run with ``-m slow``): the first build on a machine compiles MuJoCo
Warp's kernels (about 1.5 min on a cold ``~/.cache/warp``). They run on Warp's CPU device (the GPU figures are
``benchmarks/gpu_check_mujoco.py``'s).

Tolerances are about 10x the largest differences measured over seeds 0-2 (N = 64, 20 steps, random actions in
[-1, 1]). Per control step (5 substeps) from the same float64 state, float32 MuJoCo Warp and the C engine differ
by ~1e-6 in qpos and ~1e-4 in qvel without contacts, and by up to ~1.5e-4 / ~1.2e-2 in contact (same
constraints; qacc agrees to ~5e-5 relative); run freely, HalfCheetah's contact dynamics amplify that to ~4e-2 in
qpos after 20 steps. Ant-v5 with Gymnasium's pyramidal friction cone differs by ~1 in qvel per control step
(MuJoCo Warp's plane-capsule contact frames, see :mod:`rl_gpu.envs.mujoco.warp_engine`); with an elliptic cone it
agrees to ~5e-5.
"""

import pytest
import torch

pytest.importorskip("mujoco")
pytest.importorskip("mujoco_warp")

import mujoco  # noqa: E402

from rl_gpu.envs.mujoco.engine import MujocoEngine  # noqa: E402
from rl_gpu.envs.mujoco.locomotion import HalfCheetahEnv, gymnasium_asset  # noqa: E402
from rl_gpu.envs.mujoco.randomization import Randomization  # noqa: E402
from rl_gpu.envs.mujoco.warp_engine import WarpEngine  # noqa: E402

pytestmark = pytest.mark.slow

WIDE = Randomization(friction=(0.3, 1.5), mass=(0.5, 1.5), motor_strength=(0.5, 1.5), damping=(0.5, 2.0),
                     num_variants=8)
N, STEPS = 32, 20


def _pair(randomization=None, seed=0):
    c = HalfCheetahEnv(N, seed=seed, num_threads=1, randomization=randomization)
    w = HalfCheetahEnv(N, seed=seed, backend="mujoco-warp", randomization=randomization)
    assert torch.equal(c.state.inner.physics, w.state.inner.physics)
    assert torch.equal(c.state.inner.variant, w.state.inner.variant)
    return c, w


def _errors(c, w, seed=0):
    """Largest qpos/qvel differences: one control step from the C engine's state at each of STEPS steps, and
    after the first and the last step of both run freely; the reward difference at the last step."""
    lay = c.layout
    g = torch.Generator().manual_seed(seed)
    one_step = torch.zeros(2, dtype=torch.float64)
    free = []
    for _ in range(STEPS):
        action = torch.rand(N, 6, generator=g) * 2 - 1
        inner = c.state.inner
        pc, _ = c.engine.step(inner.physics, action.double(), inner.variant)
        pw, _ = w.engine.step(inner.physics, action.double(), inner.variant)
        diff = (pc - pw).abs()
        one_step = torch.maximum(one_step, torch.stack((diff[:, lay.qpos].max(), diff[:, lay.qvel].max())))
        rc, rw = c.step(action), w.step(action)
        diff = (c.state.inner.physics - w.state.inner.physics).abs()
        free.append((diff[:, lay.qpos].max().item(), diff[:, lay.qvel].max().item(),
                     (rc.reward - rw.reward).abs().max().item(), (rc.obs - rw.obs).abs().max().item()))
    return one_step.tolist(), free


def test_warp_steps_halfcheetah_as_the_c_engine_to_float32_tolerance():
    c, w = _pair()
    assert w.engine.observed_size == c.engine.observed_size and w.dt == c.dt
    (one_q, one_v), free = _errors(c, w)
    assert free[0][0] < 3e-5 and free[0][1] < 1e-3, free[0]
    assert one_q < 2e-3 and one_v < 0.2, (one_q, one_v)
    q, v, reward, obs = free[-1]
    assert q < 0.5 and reward < 0.5 and obs < 10.0, free[-1]
    assert w.state.inner.physics.dtype == torch.float64
    assert not w.engine.overflowed().any()


def test_randomised_rows_get_their_variants_physics_as_on_the_c_engine():
    c, w = _pair(WIDE, seed=3)
    variant = w.state.inner.variant
    assert len(w.engine.models) == 8 and 1 < len(set(variant.tolist())) <= 8
    for k in range(8):  # the variants compiled on demand are the C pool's
        a, b = w.engine.models[k], c.engine.models[k]
        for name in ("geom_friction", "body_mass", "body_inertia", "actuator_gainprm", "dof_damping",
                     "body_invweight0", "dof_invweight0"):
            assert (getattr(a, name) == getattr(b, name)).all(), (k, name)
    w.step(torch.zeros(N, 6))
    for name, per_world in w.engine._params.items():  # each world holds its row's variant's fields
        expected = torch.stack([torch.as_tensor(getattr(c.engine.models[k], name)) for k in variant.tolist()])
        assert torch.allclose(per_world.double(), expected, rtol=1e-6, atol=1e-7), name

    # every row from row 0's state: rows of one variant agree, rows of two variants do not
    state = w.get_state()
    physics = state.inner.physics[:1].expand_as(state.inner.physics).clone()
    for env in (c, w):
        env.set_state(env.get_state()._replace(inner=env.get_state().inner._replace(physics=physics)))
    action = torch.full((N, 6), 0.7)
    for _ in range(10):
        w.step(action)
        c.step(action)
    obs = w.state.inner.physics
    for i in range(N):
        for j in range(i + 1, N):
            gap = (obs[i] - obs[j]).abs().max().item()
            if variant[i] == variant[j]:
                assert gap < 1e-4, (i, j, gap)
            else:
                assert gap > 1e-2, (i, j, gap)
    assert (c.state.inner.physics - obs).abs().max() < 0.05

    (one_q, one_v), free = _errors(c, w, seed=3)
    assert free[0][0] < 3e-5 and free[0][1] < 1e-3, free[0]
    assert one_q < 2e-3 and one_v < 0.2, (one_q, one_v)


def test_graph_replay_equals_plain_launches():
    model = mujoco.MjModel.from_xml_path(gymnasium_asset("half_cheetah.xml"))
    c = HalfCheetahEnv(8, seed=1, num_threads=1)
    replay = WarpEngine([model], 8, 5, device="cpu")
    plain = WarpEngine([model], 8, 5, device="cpu", graph=False)
    physics, variant = c.state.inner.physics, c.state.inner.variant
    a = b = physics
    for i in range(3):
        ctrl = torch.full((8, 6), 0.3 * i - 0.5, dtype=torch.float64)
        a, _ = replay.step(a, ctrl, variant)
        b, _ = plain.step(b, ctrl, variant)
        assert torch.equal(a, b)
    assert replay._graphs and not plain._graphs


def test_derived_fields_and_forward_fields_match_the_c_engine_on_ant():
    model = mujoco.MjModel.from_xml_path(gymnasium_asset("ant.xml"))
    derived = (("cfrc_ext", 1), ("xpos", 1), ("cinert", 1), ("cvel", 1), ("qfrc_actuator", 6), ("xipos", 1))
    n = 16
    ce = MujocoEngine([model], n, 5, 1, derived)
    we = WarpEngine([model], n, 5, derived=derived, device="cpu")
    assert we.observed_size == ce.observed_size
    g = torch.Generator().manual_seed(0)
    qpos = torch.tensor(model.qpos0) + 0.1 * (torch.rand(n, model.nq, generator=g, dtype=torch.float64) - 0.5)
    qpos[:, 2] = 0.2  # the torso low enough for contacts (cfrc_ext)
    physics = ce.layout.pack(qpos, 0.1 * torch.randn(n, model.nv, generator=g, dtype=torch.float64))
    variant = torch.zeros(n, dtype=torch.long)
    ctrl = torch.rand(n, model.nu, generator=g, dtype=torch.float64) * 2 - 1
    for step in range(3):
        pc, oc = ce.step(physics, ctrl, variant)
        pw, ow = we.step(physics, ctrl, variant)
        assert (pc - pw).abs().max() < 2e-4  # measured 1.4e-5
        scale = oc.abs().amax(dim=0).clamp(min=1.0)
        assert ((oc - ow).abs() / scale).max() < 1e-5  # measured 8.7e-7 (cvel), field layouts as MjData's
        if step == 0:
            assert oc[:, :6 * 13].abs().max() > 10.0  # contact forces present
        physics = pc
    # reset-style forward passes (no post-constraint: cfrc_ext zero, as the C engine), more rows than worlds
    rows = torch.cat((physics, physics[:5]))
    fc = torch.from_numpy(ce.forward_fields(ce.row_models(torch.zeros(n + 5, dtype=torch.long)), rows.numpy(),
                                            None, post_constraint=False))
    fw = torch.from_numpy(we.forward_fields(we.row_models(torch.zeros(n + 5, dtype=torch.long)), rows.numpy(),
                                            None, post_constraint=False))
    assert fw.shape == fc.shape and (fw[:, :6 * 13] == 0).all()
    scale = fc.abs().amax(dim=0).clamp(min=1.0)
    assert ((fc - fw).abs() / scale).max() < 1e-5  # measured 5.9e-7


def test_the_pgs_solver_is_refused_in_one_line_naming_the_model():
    model = mujoco.MjModel.from_xml_path(gymnasium_asset("humanoid.xml"))
    assert model.opt.solver == mujoco.mjtSolver.mjSOL_PGS
    with pytest.raises(ValueError, match=r"PGS solver of model 'humanoid'.*mjSOL_NEWTON") as info:
        WarpEngine([model], 2, 5, device="cpu")
    assert "\n" not in str(info.value)
    model.opt.solver = mujoco.mjtSolver.mjSOL_NEWTON
    engine = WarpEngine([model], 2, 5, device="cpu")
    assert engine.layout.nq == model.nq


def test_ant_with_an_elliptic_cone_matches_the_c_engine_step_after_step():
    """RK4, a free joint and foot contacts: one control step from each of 20 states of a C trajectory (with an
    elliptic cone, where contact frames do not matter; Gymnasium's pyramidal cone is the documented exception)."""
    model = mujoco.MjModel.from_xml_path(gymnasium_asset("ant.xml"))
    model.opt.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    n = 32
    ce = MujocoEngine([model], n, 5, 1)
    we = WarpEngine([model], n, 5, device="cpu")
    g = torch.Generator().manual_seed(0)
    qpos = torch.tensor(model.qpos0).repeat(n, 1) + 0.1 * (torch.rand(n, model.nq, generator=g,
                                                                      dtype=torch.float64) - 0.5)
    physics = ce.layout.pack(qpos, 0.1 * torch.randn(n, model.nv, generator=g, dtype=torch.float64))
    variant = torch.zeros(n, dtype=torch.long)
    worst = 0.0
    contacts = 0
    for _ in range(20):
        ctrl = torch.rand(n, model.nu, generator=g, dtype=torch.float64) * 2 - 1
        pc, _ = ce.step(physics, ctrl, variant)
        pw, _ = we.step(physics, ctrl, variant)
        worst = max(worst, (pc - pw)[:, ce.layout.qvel].abs().max().item())
        contacts += int(we._wp.to_torch(we.data_w.nacon)[0])
        physics = pc
    assert contacts > 0
    assert worst < 1e-3, worst  # measured 4.7e-5


@pytest.mark.parametrize("env_id", ["Go1-Velocity-v0", "PandaPickCube-v0"])
def test_the_new_tasks_step_on_mujoco_warp_as_on_the_c_engine(env_id):
    """Go1 (whose MJCF's pyramidal cone with impratio 100 gave NaN on Warp: it runs with an elliptic cone there)
    and the Panda: one control step from each of 20 states of a C trajectory, with the friction cone Warp gets."""
    from rl_gpu.envs.registry import env_class

    cls = env_class(env_id)
    n = 16
    w = cls(n, seed=1, backend="mujoco-warp", device="cpu", randomization=None)
    c = cls(n, seed=1, num_threads=1, randomization=None)
    c.model.opt.cone = w.model.opt.cone  # the C engine's pool holds this model: the same physics
    assert torch.equal(c.state.inner.physics, w.state.inner.physics)
    g = torch.Generator().manual_seed(0)
    worst = 0.0
    for _ in range(20):
        action = torch.rand(n, *c.action_shape, generator=g) * 2 - 1
        inner = c.state.inner
        ctrl = c._control(inner, action)
        pc, _ = c.engine.step(inner.physics, ctrl, inner.variant)
        pw, _ = w.engine.step(inner.physics, ctrl, inner.variant)
        assert not torch.isnan(pw).any()
        worst = max(worst, (pc - pw)[:, c.layout.qvel].abs().max().item())
        c.step(action)
    assert worst < 1e-2, worst  # measured 3.3e-4 (Go1), 1.2e-5 (Panda)
