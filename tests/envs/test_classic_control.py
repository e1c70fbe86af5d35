"""The classic-control tensor environments against Gymnasium 1.x.

Parity: 64 Gymnasium environments and one batch of 64 rows start from the same states (Gymnasium's own
resets copied into our rows), half of them close to the time limit, and take the same actions for 500
steps: a mix of random actions (continuous ones up to 1.5x out of bounds, to exercise clipping) and a
heuristic that reaches the goal, so that terminations, truncations and same-step auto-resets all happen.
Every step compares observation, reward, terminated, truncated and the float64 state; when one of our rows
resets, its fresh state is copied into its Gymnasium twin, and every ``RESYNC_EVERY`` steps all of
Gymnasium's states are copied into ours (chaotic dynamics amplify ulp differences). The generic contract
checks of ``rl_gpu.envs.testing`` run on every environment too.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, fields

import gymnasium
import numpy as np
import pytest
import torch

from rl_gpu.envs import registry
from rl_gpu.envs.acrobot import AcrobotEnv, AcrobotState
from rl_gpu.envs.base import EnvState, TensorEnv
from rl_gpu.envs.cartpole import CartPoleEnv
from rl_gpu.envs.mountain_car import MountainCarContinuousEnv, MountainCarEnv
from rl_gpu.envs.pendulum import PendulumEnv
from rl_gpu.envs.registry import env_class, make, register, registered_ids
from rl_gpu.envs.roulette import RussianRouletteVectorized
from rl_gpu.envs.testing import check_env
from rl_gpu.envs.testing import gym_reference as ref

CLASSES = {
    "CartPole-v1": CartPoleEnv,
    "Acrobot-v1": AcrobotEnv,
    "MountainCar-v0": MountainCarEnv,
    "MountainCarContinuous-v0": MountainCarContinuousEnv,
    "Pendulum-v1": PendulumEnv,
}
CLASSIC_IDS = tuple(CLASSES)
DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")],
    ),
]

OBS_TOL = 1e-6
"""Absolute and relative tolerance on observations and rewards: a float32 ulp is 1.2e-7 relative."""
STATE_ATOL = 1e-8 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 1e-6
"""Tolerance on the float64 state: torch's sin/cos and libm's differ by an ulp now and then. NumPy 1.x
computes the float32 parts of MountainCarContinuous and Pendulum in float64 (no NEP 50), ~3e-8 apart."""

RESYNC_EVERY = 25
"""Steps between copies of Gymnasium's states into ours. The acrobot is chaotic and a balanced cart-pole
sits on an unstable equilibrium: ulp-level differences grow to ~1e-3 (acrobot) or past 1e-8 (cart-pole)
over a long episode, and the acrobot's by up to 1e8 in 50 steps. Within 25 steps they stayed below 1e-10
(4 seeds x 256 rows x 1000 steps), so ``STATE_ATOL`` still catches an arithmetic slip of ~1e-8."""


def _heuristic(env_id: str, obs: np.ndarray) -> np.ndarray:
    """Actions that reach the goal (or keep the pole up), from observations ``[N, *O]``."""
    if env_id == "CartPole-v1":
        return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)
    if env_id == "Acrobot-v1":
        return np.where(obs[:, 5] > 0, 2, 0)
    if env_id == "MountainCar-v0":
        return np.where(obs[:, 1] >= 0, 2, 0)
    if env_id == "MountainCarContinuous-v0":
        return np.where(obs[:, 1:2] >= 0, 1.2, -1.2).astype(np.float32)
    return np.clip(-3 * obs[:, 2:3], -3, 3).astype(np.float32)


@dataclass
class ParityStats:
    max_obs_error: float = 0.0
    max_state_error: float = 0.0
    terminations: int = 0
    truncations: int = 0


def _assert_close(name: str, got: np.ndarray, expected: np.ndarray, step: int) -> None:
    """Floats to within ``OBS_TOL``, flags exactly; the message names the first differing row."""
    if got.dtype == np.bool_:
        bad = got != expected
    else:
        bad = ~np.isclose(got, expected, atol=OBS_TOL, rtol=OBS_TOL)
    if bad.any():
        row = int(np.argwhere(bad)[0][0])
        theirs = expected[row]
        raise AssertionError(f"{name} differs at step {step}, row {row}: ours {got[row]}, Gymnasium {theirs}")


def run_parity(
    env_id: str, *, device: str = "cpu", num_envs: int = 64, num_steps: int = 500, seed: int = 0, **kwargs
) -> ParityStats:
    """Step ``num_envs`` rows of ours and as many Gymnasium environments in lockstep; assert at every step."""
    env = make(env_id, num_envs=num_envs, device=device, seed=seed, **kwargs)
    gyms = [ref.make_reference(env_id, **kwargs) for _ in range(num_envs)]
    reset_obs = np.stack([g.reset(seed=seed + i)[0] for i, g in enumerate(gyms)])
    # Half the rows start 1..16 steps before the time limit, so every environment truncates.
    limit = env.max_episode_steps
    for i, g in enumerate(gyms):
        ref.time_limit(g)._elapsed_steps = limit - 1 - i % 16 if i < num_envs // 2 else 0
    ref.copy_gym_to_rows(env, range(num_envs), gyms, env_id)
    obs = env.observe().obs.cpu().numpy()
    _assert_close("reset obs", obs, reset_obs, 0)

    stats = ParityStats()
    rng = np.random.default_rng(seed)
    for step in range(1, num_steps + 1):
        if env.is_continuous:
            low, high = env.action_low[0], env.action_high[0]
            action = rng.uniform(1.5 * low, 1.5 * high, size=(num_envs, 1)).astype(np.float32)
        else:
            action = rng.integers(0, env.num_actions, size=num_envs)
        use_heuristic = rng.random(num_envs) < 0.7
        action[use_heuristic] = _heuristic(env_id, obs)[use_heuristic]
        result = env.step(torch.from_numpy(action).to(device))

        outcomes = [g.step(action[i] if env.is_continuous else int(action[i])) for i, g in enumerate(gyms)]
        gym_obs = np.stack([o[0] for o in outcomes])
        gym_reward = np.array([o[1] for o in outcomes], dtype=np.float64)
        gym_terminated = np.array([o[2] for o in outcomes])
        # Gymnasium's TimeLimit also flags truncation on a terminating last step; our contract does not.
        gym_truncated = np.array([o[3] for o in outcomes]) & ~gym_terminated
        final_obs = result.final_obs.cpu().numpy()
        _assert_close("obs", final_obs, gym_obs, step)
        _assert_close("reward", result.reward.cpu().numpy(), gym_reward, step)
        _assert_close("terminated", result.terminated.cpu().numpy(), gym_terminated, step)
        _assert_close("truncated", result.truncated.cpu().numpy(), gym_truncated, step)
        stats.max_obs_error = max(stats.max_obs_error, float(np.abs(final_obs - gym_obs).max()))

        done = result.done.cpu().numpy()
        for i, g in enumerate(gyms):
            if done[i]:
                ref.copy_row_to_gym(env, i, g, env_id)
                continue
            theirs, elapsed = ref.get_gym_state(g, env_id)
            ours = ref.inner_row_scalars(env, i)
            error = max(abs(float(a) - float(b)) for a, b in zip(theirs, ours))
            assert error <= STATE_ATOL, f"state off by {error} at step {step}, row {i}: {ours} vs {theirs}"
            assert elapsed == int(env.state.episode_step[i])
            stats.max_state_error = max(stats.max_state_error, error)
        stats.terminations += int(result.terminated.sum())
        stats.truncations += int(result.truncated.sum())
        if step % RESYNC_EVERY == 0:
            ref.copy_gym_to_rows(env, range(num_envs), gyms, env_id)
        obs = result.obs.cpu().numpy()
    for g in gyms:
        g.close()
    return stats


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("env_id", CLASSIC_IDS)
def test_gymnasium_parity(env_id: str, device: str) -> None:
    stats = run_parity(env_id, device=device)
    assert stats.truncations > 0
    if env_id != "Pendulum-v1":
        assert stats.terminations > 0


@pytest.mark.parametrize(
    ("env_id", "kwargs"),
    [
        ("CartPole-v1", {"sutton_barto_reward": True}),
        ("Pendulum-v1", {"g": 9.81}),
        ("MountainCar-v0", {"goal_velocity": 0.01}),
        ("MountainCarContinuous-v0", {"goal_velocity": 0.01}),
    ],
)
def test_gymnasium_parity_with_make_kwargs(env_id: str, kwargs: dict) -> None:
    stats = run_parity(env_id, num_envs=16, num_steps=220, **kwargs)
    assert stats.truncations > 0


def test_acrobot_extreme_states_match_gymnasium() -> None:
    """States at the velocity bounds: the angle leaves [-pi, pi] by up to ~33 rad and must wrap like
    Gymnasium's ``while`` loop (several subtractions of 2 pi)."""
    angles = np.linspace(-math.pi, math.pi, 9)
    grid = list(itertools.product(angles, angles, (-1.0, 1.0), (-1.0, 1.0), range(3)))
    n = len(grid)
    env = AcrobotEnv(n, seed=0)
    t1, t2, s1, s2, a = (torch.tensor(column) for column in zip(*grid))
    start = AcrobotState(t1, t2, s1 * env.params.MAX_VEL_1, s2 * env.params.MAX_VEL_2)
    env.set_rows(torch.arange(n), start)
    action = a.long()
    result = env.step(action)
    nxt = env.state.inner
    assert bool(((nxt.theta1.abs() <= math.pi) & (nxt.theta2.abs() <= math.pi)).all())
    gym_env = ref.make_reference("Acrobot-v1")
    for i in range(0, n, 7):
        ref.set_gym_state(gym_env, "Acrobot-v1", [float(x[i]) for x in start])
        obs, reward, terminated, _, _ = gym_env.step(int(action[i]))
        np.testing.assert_allclose(result.final_obs[i].numpy(), obs, rtol=OBS_TOL, atol=OBS_TOL)
        assert bool(result.terminated[i]) == terminated and float(result.reward[i]) == reward
        if not terminated:
            theirs, _ = ref.get_gym_state(gym_env, "Acrobot-v1")
            np.testing.assert_allclose(ref.inner_row_scalars(env, i), theirs, rtol=0, atol=STATE_ATOL)


@pytest.mark.parametrize("env_id", CLASSIC_IDS)
def test_spaces_and_constants_match_gymnasium(env_id: str) -> None:
    gym_env = gymnasium.make(env_id, disable_env_checker=True)
    env = CLASSES[env_id](2, seed=0)
    assert env_class(env_id) is CLASSES[env_id]
    assert env.obs_shape == gym_env.observation_space.shape
    assert env.max_episode_steps == gym_env.spec.max_episode_steps
    space = gym_env.action_space
    if isinstance(space, gymnasium.spaces.Discrete):
        assert not env.is_continuous and env.num_actions == space.n
        assert bool(env.observe().action_mask.all())
    else:
        assert env.is_continuous and env.num_actions == 0
        assert env.action_shape == space.shape
        np.testing.assert_array_equal(np.array(env.action_low, dtype=np.float32), space.low)
        np.testing.assert_array_equal(np.array(env.action_high, dtype=np.float32), space.high)
    # Every parameter that Gymnasium also has as an attribute has Gymnasium's value, derived ones included.
    unwrapped = gym_env.unwrapped
    names = [f.name for f in fields(env.params)] + [
        n for n, v in vars(type(env.params)).items() if isinstance(v, property)
    ]
    shared = [n for n in names if hasattr(unwrapped, n)]
    assert len(shared) >= 3
    for name in shared:
        theirs = getattr(unwrapped, name)
        ours = getattr(env.params, name)
        assert tuple(np.atleast_1d(ours)) == tuple(np.atleast_1d(theirs)), name
    obs = env.observe().obs.numpy()
    assert gym_env.observation_space.contains(obs[0])


RESET_BOUNDS = {
    # field: (low, high) of Gymnasium's uniform draw (high exclusive); None = always zero.
    "CartPole-v1": {name: (-0.05, 0.05) for name in ("x", "x_dot", "theta", "theta_dot")},
    "Acrobot-v1": {name: (-0.1, 0.1) for name in AcrobotState._fields},
    "MountainCar-v0": {"position": (-0.6, -0.4), "velocity": None},
    "MountainCarContinuous-v0": {"position": (-0.6, -0.4), "velocity": None},
    "Pendulum-v1": {"theta": (-math.pi, math.pi), "theta_dot": (-1.0, 1.0)},
}


@pytest.mark.parametrize("env_id", CLASSIC_IDS)
def test_reset_distribution_within_gymnasium_bounds(env_id: str) -> None:
    n = 20_000
    inner = CLASSES[env_id](n, seed=1).state.inner
    gym_env = ref.make_reference(env_id)
    gym_states = []
    for seed in range(200):
        gym_env.reset(seed=seed)
        gym_states.append(ref.get_gym_state(gym_env, env_id)[0])
    for name, bounds in RESET_BOUNDS[env_id].items():
        ours = getattr(inner, name).double()
        theirs = torch.tensor([s[inner._fields.index(name)] for s in gym_states], dtype=torch.float64)
        if bounds is None:
            assert bool((ours == 0).all()) and bool((theirs == 0).all()), name
            continue
        low, high = bounds
        # Acrobot rounds its draw to float32, which may land on the rounded bound itself.
        if env_id == "Acrobot-v1":
            low, high = float(np.float32(low)), float(np.float32(high))
        for sample in (ours, theirs):
            assert bool((sample >= low).all()) and bool((sample <= high).all()), name
        # Uniform: mean within 5 standard errors, extremes close to the bounds.
        width = high - low
        assert abs(ours.mean().item() - (low + high) / 2) < 5 * width / math.sqrt(12 * n), name
        assert ours.min().item() - low < width * 1e-3 and high - ours.max().item() < width * 1e-3, name
    if env_id == "Acrobot-v1":
        assert all(bool((t.float().double() == t).all()) for t in inner)
    if env_id == "MountainCarContinuous-v0":
        assert not bool(inner.stepped.any())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("env_id", CLASSIC_IDS)
def test_generic_contract_checks(env_id: str, device: str) -> None:
    """check_env (masks, determinism, batch of N vs batch of 1, auto-reset, frozen rows) with a short time
    limit, so that every check sees episodes end (random actions rarely terminate most of these)."""
    factory = functools.partial(make, env_id, device=device, max_episode_steps=23)
    reports = check_env(factory, num_envs=16, num_steps=60, seed=3)
    assert all(report.episodes > 0 for name, report in reports.items() if name != "action_masks")


@pytest.mark.parametrize("env_id", CLASSIC_IDS)
def test_state_is_float64_and_obs_float32(env_id: str) -> None:
    env = make(env_id, num_envs=3, seed=0)
    assert all(t.dtype in (torch.float64, torch.bool) for t in env.state.inner)
    action = torch.zeros(3, 1) if env.is_continuous else torch.zeros(3, dtype=torch.long)
    result = env.step(action)
    assert result.obs.dtype == torch.float32 and result.reward.dtype == torch.float32


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("env_id", CLASSIC_IDS)
def test_step_does_not_synchronise_on_cuda(env_id: str) -> None:
    """With action validation off, a step (auto-resets included) never waits for the GPU."""
    env = make(env_id, num_envs=256, device="cuda", seed=0, validate_actions=False, max_episode_steps=5)
    dtype = torch.float32 if env.is_continuous else torch.long
    action = torch.ones((256, *env.action_shape), dtype=dtype, device="cuda")
    env.step(action)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(10):
            env.step(action)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_registry_ids_and_unknown_id() -> None:
    assert set(CLASSIC_IDS) | {"RussianRoulette-v0"} <= set(registered_ids())
    assert env_class("RussianRoulette-v0") is RussianRouletteVectorized
    with pytest.raises(ValueError, match="CartPole-v1") as info:
        make("CartPole-v0")
    assert "Did you mean 'CartPole-v1'" in str(info.value)
    for env_id in registered_ids():
        assert env_id in str(info.value)


def test_make_forwards_arguments() -> None:
    env = make("Pendulum-v1", num_envs=5, seed=3, g=9.81, autoreset=False, max_episode_steps=7)
    assert isinstance(env, PendulumEnv) and env.num_envs == 5 and env.params.g == 9.81
    assert not env.autoreset and env.max_episode_steps == 7 and PendulumEnv.max_episode_steps == 200
    same = make("Pendulum-v1", num_envs=5, seed=3)
    assert torch.equal(env.state.inner.theta, same.state.inner.theta)
    with pytest.raises(ValueError, match="CartPoleEnv: .*gravity_typo"):  # one line naming the environment
        make("CartPole-v1", gravity_typo=1.0)
    with pytest.raises(ValueError):
        make("CartPole-v1", max_episode_steps=0)


def test_register_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_registry", dict(registry._registry))
    monkeypatch.setattr(registry, "_imported", dict(registry._imported))

    class Tiny(CartPoleEnv):
        pass

    register("Tiny-v0", Tiny)
    register("Tiny-v0", Tiny)  # same target again: fine
    assert isinstance(make("Tiny-v0", num_envs=2), Tiny)
    with pytest.raises(ValueError, match="already registered"):
        register("Tiny-v0", CartPoleEnv)
    register("Tiny-v0", "rl_gpu.envs.cartpole:CartPoleEnv", override=True)
    assert env_class("Tiny-v0") is CartPoleEnv
    with pytest.raises(TypeError):
        register("Bad-v0", int)
    with pytest.raises(ValueError):
        register("Bad-v0", "rl_gpu.envs.cartpole.CartPoleEnv")


def test_reference_adapter_round_trip() -> None:
    """Our state → Gymnasium → ours is the identity, episode step included (MountainCarContinuous keeps
    Gymnasium's float64-after-reset / float32-after-step distinction)."""
    for env_id in CLASSIC_IDS:
        env = make(env_id, num_envs=4, seed=0)
        action = torch.zeros(4, 1) if env.is_continuous else torch.zeros(4, dtype=torch.long)
        env.step(action)
        env.reset_rows(torch.tensor([True, False, False, False]))
        state = env.get_state()
        state = EnvState(state.inner, torch.tensor([0, 1, 2, 3]), state.episode_return, state.done)
        env.set_state(state)
        gyms = [ref.make_reference(env_id) for _ in range(4)]
        for i, g in enumerate(gyms):
            ref.copy_row_to_gym(env, i, g, env_id)
        other = make(env_id, num_envs=4, seed=1)
        ref.copy_gym_to_rows(other, range(4), gyms, env_id)
        for ours, theirs in zip(env.state.inner, other.state.inner):
            assert torch.equal(ours, theirs)
        assert torch.equal(other.state.episode_step, state.episode_step)


def test_all_classic_envs_are_tensor_envs_with_docstrings() -> None:
    for cls in CLASSES.values():
        assert issubclass(cls, TensorEnv) and "Truncated" in cls.__doc__ and "Reward" in cls.__doc__


def test_acrobot_bounds_follow_its_parameters() -> None:
    # Gymnasium's observation space reads the instance's velocity limits; so do the spec's bounds.
    default, faster = make("Acrobot-v1", num_envs=2), make("Acrobot-v1", num_envs=2, max_vel_1_pi=8.0)
    assert faster.spec.obs_high[4] == 2 * default.spec.obs_high[4]
    assert faster.spec.obs_low == tuple(-v for v in faster.spec.obs_high)
