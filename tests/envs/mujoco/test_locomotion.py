"""Gymnasium's v5 locomotion tasks on the MuJoCo engine: parity with ``gymnasium.make`` (physics, observation,
reward terms, termination, reset observation), spec, reset distribution, determinism, exact resume, batch
independence and reward-term statistics."""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import pytest
import torch

pytest.importorskip("mujoco")
gymnasium = pytest.importorskip("gymnasium")

from rl_gpu.envs.mujoco.base import MujocoEnv
from rl_gpu.envs.mujoco.locomotion import HalfCheetahEnv, HopperEnv, Walker2dEnv
from rl_gpu.envs.mujoco.locomotion3d import AntEnv, HumanoidEnv
from rl_gpu.envs.registry import make
from rl_gpu.envs.testing.contract import check_batch_vs_single, check_determinism
from rl_gpu.envs.testing.mujoco_reference import check_mujoco_parity, make_gym_reference

FLOAT32_REL = 2.0**-24 * (1 + 1e-6)
"""Round-to-nearest float32 error relative to ``max(1, |value|)`` (a float64 value rounded once)."""


@dataclass(frozen=True)
class Case:
    gym_id: str
    cls: type[MujocoEnv]
    steps: int
    """Parity steps: enough for Hopper, Walker2d and Humanoid to fall (terminations) under random actions."""
    obs_rel: float
    """Zero warm-start observation bound (relative, as ``MujocoParity.obs_rel``)."""
    reward: float
    """Zero warm-start reward bound (float32 reward: rounding of values up to ~20 is ~1e-6)."""
    terms: float
    """Zero warm-start bound of the float64 reward terms against Gymnasium's ``info``."""
    warm_state: float
    """Warm-started Gymnasium: bound on qpos and qvel (and, relative, on obs and reward)."""
    qpos_noise: str
    qvel_noise: str
    """Reset noise of qpos and qvel: ``"uniform"`` U(±scale) or ``"normal"`` scale * N(0, 1)."""


# Measured at N=8, 60 steps, seeds 0..5, action_scale 1.5. With the warm-start zeroed, the physics is bitwise
# Gymnasium's. Fields read from MjData after the step (Ant's and Humanoid's contact forces, Humanoid's cvel
# and centre of mass) come from a replay of the last substep whose constraint solve starts cold where
# Gymnasium's was warm-started by the previous substep (see MujocoEngine): Ant's Newton solve agrees to ~1e-5
# in the clipped contact forces (measured 1.1e-5), Humanoid's PGS (50 iterations, stops short of convergence)
# to ~1e-3 relative in small contact-force components (measured 1.1e-3 obs, 1.0e-5 reward). Warm-started
# Gymnasium (warm_state) starts each solve elsewhere: Newton tasks differ in qvel by at most 7e-7 (measured),
# Humanoid's PGS by 1.2e-5.
CASES = [
    Case("HalfCheetah-v5", HalfCheetahEnv, 25, FLOAT32_REL, 2e-6, 1e-12, 1e-5, "uniform", "normal"),
    Case("Hopper-v5", HopperEnv, 40, FLOAT32_REL, 2e-6, 1e-12, 1e-5, "uniform", "uniform"),
    Case("Walker2d-v5", Walker2dEnv, 40, FLOAT32_REL, 2e-6, 1e-12, 1e-5, "uniform", "uniform"),
    Case("Ant-v5", AntEnv, 25, 1e-4, 2e-6, 1e-8, 1e-5, "uniform", "normal"),
    Case("Humanoid-v5", HumanoidEnv, 40, 5e-3, 1e-4, 1e-4, 1e-3, "uniform", "uniform"),
]
IDS = [c.gym_id for c in CASES]
FALLS = {"Hopper-v5", "Walker2d-v5", "Humanoid-v5"}


def factory(cls: type[MujocoEnv], limit: int | None = None):
    """An env factory for the contract checks (one engine thread; ``limit`` shortens episodes: resets)."""

    def build(num_envs: int, *, seed: int | None, autoreset: bool = True) -> MujocoEnv:
        env = cls(num_envs, seed=seed, autoreset=autoreset, num_threads=1)
        if limit is not None:
            env.max_episode_steps = limit
        return env

    return build


@pytest.fixture(scope="module")
def gym_envs():
    envs: dict[str, object] = {}
    yield lambda gym_id: envs.setdefault(gym_id, make_gym_reference(gym_id))
    for env in envs.values():
        env.close()


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_parity_with_gymnasium_zero_warmstart(case: Case) -> None:
    env = case.cls(6, seed=1, num_threads=1)
    p = check_mujoco_parity(env, case.gym_id, case.steps, action_scale=1.5)
    assert p.qpos == 0.0 and p.qvel == 0.0, p
    assert p.obs_rel <= case.obs_rel and p.reward <= case.reward and p.terms <= case.terms, p
    assert p.terminated_mismatches == 0, p
    if case.gym_id in FALLS:
        assert p.terminations > 0, p


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_parity_with_warm_started_gymnasium(case: Case) -> None:
    env = case.cls(6, seed=2, num_threads=1)
    p = check_mujoco_parity(env, case.gym_id, case.steps, zero_warmstart=False, seed=1)
    assert p.qpos <= case.warm_state and p.qvel <= case.warm_state, p
    assert p.obs_rel <= max(case.obs_rel, case.warm_state), p
    assert p.reward <= max(case.reward, case.warm_state), p
    assert p.terminated_mismatches == 0, p


def test_parity_with_parameters() -> None:
    kwargs = {"terminate_when_unhealthy": False, "healthy_reward": 0.5, "ctrl_cost_weight": 0.01}
    env = HopperEnv(4, seed=3, num_threads=1, **kwargs)
    p = check_mujoco_parity(env, "Hopper-v5", 40, action_scale=1.5, **kwargs)
    assert p.qvel == 0.0 and p.obs_rel <= FLOAT32_REL and p.reward <= 2e-6 and p.terms <= 1e-12, p
    assert p.terminations == 0 and p.terminated_mismatches == 0, p


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_spec_matches_gymnasium(case: Case, gym_envs) -> None:
    gym = gym_envs(case.gym_id)
    env = make(case.gym_id, num_envs=2, seed=0, num_threads=1)
    assert type(env) is case.cls
    assert env.obs_shape == gym.observation_space.shape == env.observe().obs.shape[1:]
    assert env.observe().obs.dtype == torch.float32
    assert env.action_shape == gym.action_space.shape
    assert env.action_low == tuple(map(float, gym.action_space.low))
    assert env.action_high == tuple(map(float, gym.action_space.high))
    assert env.max_episode_steps == gymnasium.spec(case.gym_id).max_episode_steps == 1000
    assert env.frame_skip == gym.frame_skip and env.dt == gym.dt
    # The same MJCF (Walker2d-v5 reads walker2d_v5.xml, whose feet have another friction than walker2d.xml's).
    m, g = env.model, gym.model
    for name in ("geom_friction", "body_mass", "qpos0", "actuator_gear", "actuator_ctrlrange"):
        assert np.array_equal(getattr(m, name), getattr(g, name)), name
    assert (m.opt.timestep, m.opt.integrator, m.opt.solver, m.opt.iterations) == (
        g.opt.timestep, g.opt.integrator, g.opt.solver, g.opt.iterations)


def _noise_summary(noise: np.ndarray, scale: float) -> tuple[bool, float, float, float]:
    """``(bounded by scale, std / scale, |mean| / scale, least per-coordinate std / scale)`` of ``[n, d]``."""
    return (bool(np.abs(noise).max() <= scale * (1 + 1e-9)), float(noise.std() / scale),
            float(abs(noise.mean()) / scale), float(noise.std(axis=0).min() / scale))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_reset_distribution_matches_gymnasium(case: Case, gym_envs) -> None:
    env = case.cls(1, seed=0, num_threads=1)
    scale = env.params.reset_noise_scale
    starts = env.draw_starts(500)
    ours = {"qpos": (env.qpos(starts) - env.init_qpos).numpy(),
            "qvel": (env.qvel(starts) - env.init_qvel).numpy()}
    gym = gym_envs(case.gym_id)
    samples = []
    for seed in range(200):
        gym.reset(seed=seed)
        samples.append((gym.data.qpos - gym.init_qpos, gym.data.qvel - gym.init_qvel))
    theirs = {"qpos": np.stack([s[0] for s in samples]), "qvel": np.stack([s[1] for s in samples])}
    expected_std = {"uniform": 3**-0.5, "normal": 1.0}
    for field, kind in (("qpos", case.qpos_noise), ("qvel", case.qvel_noise)):
        a, b = _noise_summary(ours[field], scale), _noise_summary(theirs[field], scale)
        assert a[0] == b[0] == (kind == "uniform"), (field, a, b)
        assert abs(a[1] - expected_std[kind]) < 0.05 and abs(b[1] - expected_std[kind]) < 0.08, (field, a, b)
        assert a[2] < 0.05 and b[2] < 0.1, (field, a, b)
        assert a[3] > 0.5 * expected_std[kind] and b[3] > 0.5 * expected_std[kind], (field, a, b)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_determinism_and_batch_independence(case: Case) -> None:
    build = factory(case.cls, limit=5)
    report = check_determinism(build, seed=4, num_envs=3, num_steps=12)
    assert report.episodes > 0
    report = check_batch_vs_single(build, num_envs=3, num_steps=12, seed=5)
    assert report.episodes > 0


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_state_dict_resumes_exactly(case: Case) -> None:
    build = factory(case.cls, limit=6)
    gen = torch.Generator().manual_seed(0)
    a = build(3, seed=6)
    low, high = torch.tensor(a.action_low), torch.tensor(a.action_high)
    actions = [low + (high - low) * torch.rand(3, len(low), generator=gen) for _ in range(10)]
    for action in actions[:4]:
        a.step(action)
    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)
    buffer.seek(0)
    b = build(3, seed=7)
    b.load_state_dict(torch.load(buffer, weights_only=True))
    for action in actions[4:]:
        ra, rb = a.step(action), b.step(action)
        for name, x, y in zip(ra._fields, ra, rb):
            assert (x is None and y is None) or torch.equal(x, y), name
        for x, y in zip(a.state.inner, b.state.inner):
            assert torch.equal(x, y)
    stats_a, stats_b = a.reward_term_stats(), b.reward_term_stats()
    assert all(torch.equal(stats_a[k], stats_b[k]) for k in a.reward_terms)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_reward_term_stats_sum_to_the_episode_return(case: Case) -> None:
    env = factory(case.cls, limit=5)(4, seed=8)
    gen = torch.Generator().manual_seed(1)
    low, high = torch.tensor(env.action_low), torch.tensor(env.action_high)
    returns = []
    for _ in range(12):
        result = env.step(low + (high - low) * torch.rand(4, len(low), generator=gen))
        done = result.terminated | result.truncated
        returns += result.episode_return[done].double().tolist()
    stats = env.reward_term_stats()
    assert tuple(stats) == env.reward_terms
    assert len(returns) >= 8
    total = sum(stats.values())
    assert abs(float(total) - np.mean(returns)) <= 1e-5 * (1 + abs(np.mean(returns))), (stats, returns)
    assert float(stats["ctrl"]) < 0
    assert torch.isnan(env.reward_term_stats()["ctrl"])  # the counts restart
