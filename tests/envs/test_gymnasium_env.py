"""``gym:<id>``: Gymnasium environments behind the rl_gpu surface, checked against Gymnasium itself."""

import importlib.util

import numpy as np
import pytest
import torch

gymnasium = pytest.importorskip("gymnasium")
pytest.importorskip("gymnasium.vector", reason="needs gymnasium >= 1.1").AutoresetMode  # noqa: B018

from gymnasium import spaces  # noqa: E402
from gymnasium.vector import AutoresetMode, SyncVectorEnv  # noqa: E402

from rl_gpu.envs.gymnasium_env import GymnasiumEnv  # noqa: E402
from rl_gpu.envs.registry import env_class, is_known, make  # noqa: E402
from rl_gpu.training.evaluation import evaluate_policy  # noqa: E402
from rl_gpu.algos.ppo import PPO, PPOConfig  # noqa: E402
from rl_gpu.nn.actor_critic import policy_for_env  # noqa: E402
from rl_gpu.collect.reference import collect  # noqa: E402


class Countdown(gymnasium.Env):
    """Observation = steps taken (Discrete), reward = step number; terminates after ``end`` steps. With
    ``TimeLimit(end)`` its last step is both terminated and truncated."""

    def __init__(self, end: int = 3, size: int = 8):
        self.end = end
        self.observation_space = spaces.Discrete(size)
        self.action_space = spaces.Discrete(2, start=5)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = int(self.np_random.integers(0, 2))
        self.start = self.t
        return self.t, {}

    def step(self, action):
        assert action in (5, 6)
        self.t += 1
        return self.t, float(self.t), self.t - self.start >= self.end, False, {}


gymnasium.register("RlGpuTest/Countdown-v0", entry_point=Countdown, max_episode_steps=3)


def _reference(env_id, num_envs, seed, actions, **kwargs):
    """Single Gymnasium environments stepped by hand with same-step reset: the semantics, spelled out."""
    envs = [gymnasium.make(env_id, **kwargs) for _ in range(num_envs)]
    for i, env in enumerate(envs):
        env.reset(seed=seed + i)
    out = []
    for action in actions:
        step = {k: [] for k in ("obs", "reward", "terminated", "truncated", "final_obs")}
        for i, env in enumerate(envs):
            o, r, term, trunc, _ = env.step(action[i])
            step["final_obs"].append(o)
            step["reward"].append(r)
            step["terminated"].append(term)
            step["truncated"].append(trunc and not term)
            if term or trunc:
                o, _ = env.reset()
            step["obs"].append(o)
        out.append({k: np.array(v) for k, v in step.items()})
    return out


def _vec(mode, env_id, num_envs, **kwargs):
    if mode == "id":
        return GymnasiumEnv(env_id, num_envs, seed=5, **kwargs)
    if mode == "async":
        return GymnasiumEnv(env_id, num_envs, seed=5, vectorization_mode="async", **kwargs)
    autoreset = AutoresetMode.SAME_STEP if mode == "same-step" else AutoresetMode.NEXT_STEP
    vec = SyncVectorEnv([lambda: gymnasium.make(env_id, **kwargs)] * num_envs, autoreset_mode=autoreset)
    return GymnasiumEnv(vec, seed=5)


@pytest.mark.parametrize("mode", ["id", "same-step", "next-step", "async"])
def test_cartpole_transitions_equal_gymnasium(mode):
    n, steps = 3, 120
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 2, size=(steps, n))
    reference = _reference("CartPole-v1", n, 5, actions, max_episode_steps=15)
    env = _vec(mode, "CartPole-v1", n, max_episode_steps=15)
    try:
        for action, ref in zip(actions, reference):
            step = env.step(torch.as_tensor(action))
            np.testing.assert_array_equal(step.obs.numpy(), ref["obs"].astype(np.float32))
            np.testing.assert_array_equal(step.final_obs.numpy(), ref["final_obs"].astype(np.float32))
            np.testing.assert_array_equal(step.reward.numpy(), ref["reward"].astype(np.float32))
            np.testing.assert_array_equal(step.terminated.numpy(), ref["terminated"])
            np.testing.assert_array_equal(step.truncated.numpy(), ref["truncated"])
        assert sum(r["truncated"].sum() for r in reference) > 0
        assert sum(r["terminated"].sum() for r in reference) > 0
    finally:
        env.close()


def test_make_gym_prefix_surface_and_dtypes():
    env = make("gym:CartPole-v1", num_envs=8, device="cpu", seed=1)
    assert env_class("gym:CartPole-v1") is GymnasiumEnv and is_known("gym:CartPole-v1")
    assert not is_known("gym:") and not is_known("CartPole-v9")
    assert (env.num_envs, env.num_players, env.obs_shape, env.num_actions) == (8, 1, (4,), 2)
    assert env.max_episode_steps == 500 and not env.is_continuous
    first = env.observe()
    again = make("gym:CartPole-v1", num_envs=8, seed=1).observe()
    assert torch.equal(first.obs, again.obs)
    step = env.step(torch.zeros(8, dtype=torch.long))
    dtypes = {"obs": torch.float32, "reward": torch.float32, "terminated": torch.bool,
              "truncated": torch.bool, "final_obs": torch.float32, "action_mask": torch.bool,
              "current_player": torch.int64, "episode_return": torch.float32, "episode_length": torch.int64}
    for name, dtype in dtypes.items():
        assert getattr(step, name).dtype == dtype, name
        assert getattr(step, name).shape[0] == 8
    assert step.action_mask.shape == (8, 2) and bool(step.action_mask.all())
    with pytest.raises(ValueError, match="out of range"):
        env.step(torch.full((8,), 2))
    with pytest.raises(ValueError, match="shape"):
        env.step(torch.zeros(7, dtype=torch.long))
    with pytest.raises(ValueError, match="integer"):
        env.step(torch.zeros(8))
    with pytest.raises(ValueError, match="Did you mean"):
        make("gym:CartPol-v1")
    with pytest.raises(ValueError, match="gym:<any Gymnasium id>"):
        make("NoSuchEnv-v0")


def test_final_obs_truncation_and_episode_statistics_with_a_time_limit():
    # Countdown terminates on its 3rd step and TimeLimit(3) also truncates it there: terminated wins. With
    # TimeLimit(2) the same episodes are cut first: truncated, bootstrapped from final_obs.
    for limit, terminated in ((3, True), (2, False)):
        env = make("gym:RlGpuTest/Countdown-v0", num_envs=4, seed=0, max_episode_steps=limit)
        assert env.obs_shape == (8,) and env.num_actions == 2 and env.max_episode_steps == limit
        start = env.observe().obs.argmax(1)
        for t in range(1, limit + 1):
            step = env.step(torch.zeros(4, dtype=torch.long))
            done = t == limit
            assert bool((step.terminated == (done and terminated)).all())
            assert bool((step.truncated == (done and not terminated)).all())
            assert torch.equal(step.final_obs.argmax(1), start + t)
            assert torch.equal(step.episode_length, torch.full((4,), t))
            expected_return = (start[:, None] + torch.arange(1, t + 1)).sum(1).float()
            assert torch.allclose(step.episode_return, expected_return)
        assert set(step.obs.argmax(1).tolist()) <= {0, 1}
        step = env.step(torch.ones(4, dtype=torch.long))
        assert torch.equal(step.episode_length, torch.ones(4, dtype=torch.long))


def test_collect_bootstraps_truncated_rows_from_final_obs():
    env = make("gym:CartPole-v1", num_envs=4, seed=2, max_episode_steps=6)
    policy = policy_for_env(env.spec)
    rollout = collect(policy, env, 20, torch.Generator().manual_seed(0))
    assert bool(rollout.truncated.any())
    assert not bool((rollout.truncated & rollout.terminated).any())
    # Where a row was cut, final_value is V(final_obs), the state the row reached, not the reset one.
    t, i = rollout.truncated.nonzero()[0].tolist()
    assert float(rollout.final_value[t, i]) != 0.0
    assert bool((rollout.final_value[~rollout.truncated] == 0).all())
    assert bool((rollout.episode_length[rollout.truncated] == 6).all())


@pytest.mark.skipif(importlib.util.find_spec("mujoco") is None, reason="needs gymnasium[mujoco]")
def test_half_cheetah_runs_a_few_hundred_steps():
    env = make("gym:HalfCheetah-v5", num_envs=2, seed=0, max_episode_steps=120)
    assert env.is_continuous and env.action_shape == (6,) and env.obs_shape == (17,)
    assert env.action_low == (-1.0,) * 6 and env.action_high == (1.0,) * 6
    generator = torch.Generator().manual_seed(0)
    truncations = 0
    for _ in range(300):
        # Out-of-bounds actions are clipped to the Box, as Gymnasium's ClipAction does.
        step = env.step(3 * torch.randn(2, 6, generator=generator))
        assert bool(torch.isfinite(step.obs).all()) and bool(torch.isfinite(step.reward).all())
        assert not bool(step.terminated.any())
        truncations += int(step.truncated.sum())
        if bool(step.truncated.any()):
            assert not torch.equal(step.final_obs, step.obs)
            assert bool((step.episode_length[step.truncated] == 120).all())
    assert truncations == 4
    env.close()


@pytest.mark.slow  # long: keeps the default suite under 8 minutes on 2 cores (make test-slow runs it)
def test_ppo_learns_gym_cartpole():
    torch.manual_seed(0)
    env = make("gym:CartPole-v1", num_envs=8, seed=0)
    policy = policy_for_env(env.spec)
    algo = PPO(policy, PPOConfig(num_minibatches=4, update_epochs=4, ent_coef=0.0), 2.5e-3, seed=0)
    def make_env(n, seed):
        return make("gym:CartPole-v1", num_envs=n, seed=seed)

    returns, result = [], None
    for _ in range(200):
        rollout = collect(policy, env, 128, algo.policy_rng)
        algo.update(rollout)
        stats = rollout.episode_stats()
        if int(stats["episodes"]) > 0:
            returns.append(float(stats["episode_return"]))
        if len(returns) >= 3 and np.mean(returns[-3:]) >= 450:
            # Training returns are sampled; the deterministic policy is checked on separate environments.
            result = evaluate_policy(policy, make_env, 16, seed=1, deterministic=True)
            if result.mean_return >= 400:
                break
    assert result is not None and result.mean_return >= 400, (returns[-5:], result)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_results_live_on_the_cuda_device_and_match_the_cpu():
    cpu = make("gym:CartPole-v1", num_envs=4, device="cpu", seed=3, max_episode_steps=10)
    gpu = make("gym:CartPole-v1", num_envs=4, device="cuda", seed=3, max_episode_steps=10)
    for t in range(25):
        action = torch.full((4,), t % 2)
        a, b = cpu.step(action), gpu.step(action.cuda())
        for name, x, y in zip(a._fields, a, b):
            if x is None and y is None:
                continue  # no critic observation group
            assert y.device.type == "cuda", name
            assert torch.equal(x, y.cpu()), name


# Taxi reports info["action_mask"]; Gymnasium 1.x moved it from v3 to v4 at some release.
TAXI = "Taxi-v4" if "Taxi-v4" in gymnasium.registry else "Taxi-v3"


@pytest.mark.parametrize("mode", ["same-step", "next-step"])
def test_action_masks_reported_in_infos_are_the_legal_actions(mode):
    """Taxi reports ``info["action_mask"]``: ours must equal each sub-environment's own mask at every step,
    through drop-offs and the 200-step time limit, with same-step and next-step auto-reset."""
    env = _vec(mode, TAXI, 6)
    subs = [e.unwrapped for e in env.vec.unwrapped.envs]
    rng = np.random.default_rng(0)
    step = env.observe()
    resets = 0
    for _ in range(450):
        expected = np.stack([sub.action_mask(sub.s) for sub in subs]).astype(bool)
        assert np.array_equal(step.action_mask.numpy(), expected)
        legal = [np.flatnonzero(row) for row in expected]
        action = torch.tensor([int(rng.choice(row)) for row in legal])
        step = env.step(action)
        resets += int((step.terminated | step.truncated).sum())
    assert resets >= 6
    illegal = int(np.flatnonzero(~step.action_mask[0].numpy())[0])
    with pytest.raises(ValueError, match="illegal action in env 0"):
        env.step(torch.tensor([illegal] + [int(np.flatnonzero(m)[0]) for m in step.action_mask[1:].numpy()]))


def test_masked_policy_only_takes_reported_legal_actions():
    env = GymnasiumEnv(TAXI, 8, seed=1)
    torch.manual_seed(0)
    policy = policy_for_env(env.spec)
    rollout = collect(policy, env, 64, torch.Generator().manual_seed(0))
    assert not bool(rollout.action_mask.all())
    assert rollout.action_mask.gather(-1, rollout.action[..., None]).all()


def test_gym_ids_without_a_preset_get_small_single_player_defaults():
    from rl_gpu.cli.presets import PRESETS, preset_config
    from rl_gpu.training.config import TrainConfig

    taxi = preset_config(f"gym:{TAXI}")
    assert (taxi.num_envs, taxi.final_eval_episodes, taxi.min_updates) == (16, 1000, 1)
    assert TrainConfig().num_envs == 4096  # the roulette-sized global defaults stay for non-gym ids
    cartpole = preset_config("gym:CartPole-v1")
    assert cartpole.num_envs == PRESETS["CartPole-v1"]["num_envs"] and cartpole.solve_threshold == 475.0


class Odd(gymnasium.Env):
    """An environment whose spaces rl_gpu does not take; counts closes so a refused batch is seen closed."""

    closed = 0

    def __init__(self, observation_space=None, action_space=None):
        self.observation_space = observation_space or spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = action_space or spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}

    def close(self):
        Odd.closed += 1


gymnasium.register("RlGpuTest/Odd-v0", entry_point=Odd)


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"observation_space": spaces.Dict({"a": spaces.Discrete(3)})},
     "observation space Dict('a': Discrete(3)) is not supported: allowed are Box (cast to float32) or Discrete"),
    ({"observation_space": spaces.Tuple([spaces.Discrete(3), spaces.Discrete(2)])}, "FlattenObservation"),
    ({"action_space": spaces.MultiDiscrete([2, 3])},
     "action space MultiDiscrete([2 3]) is not supported: allowed are Discrete or 1-D Box"),
    ({"action_space": spaces.Box(-1.0, 1.0, (2, 2), np.float32)}, "allowed are Discrete or 1-D Box"),
])
def test_unsupported_spaces_are_one_line_and_the_batch_is_closed(kwargs, expected):
    closed = Odd.closed
    with pytest.raises(ValueError) as info:
        make("gym:RlGpuTest/Odd-v0", num_envs=3, **kwargs)
    message = str(info.value)
    assert message.startswith("gym:RlGpuTest/Odd-v0: ") and expected in message and "\n" not in message
    assert Odd.closed == closed + 3


@pytest.mark.parametrize(("env_id", "expected"), [
    ("gym:NoSuchEnv-v0", "Environment `NoSuchEnv` doesn't exist"),
    ("gym:CartPole-v99", "CartPole"),
    ("gym:NoSuchSpace/Thing-v0", "Namespace NoSuchSpace not found"),
    ("gym:not an id", "Malformed environment ID"),
    pytest.param("gym:LunarLander-v3", "Box2D is not installed", marks=pytest.mark.skipif(
        importlib.util.find_spec("Box2D") is not None, reason="Box2D is installed")),
])
def test_ids_gymnasium_cannot_make_are_one_line(env_id, expected):
    with pytest.raises(ValueError) as info:
        make(env_id)
    message = str(info.value)
    assert expected in message and "\n" not in message
    assert f"{env_id}: Gymnasium cannot make it" in message and "gymnasium.pprint_registry()" in message


class Noisy(gymnasium.Env):
    """Warns once per construction, as a library's deprecation warning does."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self):
        import warnings

        warnings.warn("noisy-env: this constructor argument is deprecated", UserWarning, stacklevel=1)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, True, False, {}


gymnasium.register("RlGpuTest/Noisy-v0", entry_point=Noisy)


def test_dependency_warnings_are_shown_once_per_process(monkeypatch, recwarn):
    from rl_gpu.envs import dependency_warnings

    monkeypatch.setattr(dependency_warnings, "_shown", set())
    for seed in range(3):  # as a run builds environments for every evaluation
        env = make("gym:RlGpuTest/Noisy-v0", num_envs=4, seed=seed)
        for _ in range(3):
            env.step(torch.zeros(4, dtype=torch.long))
        env.close()
    noisy = [w for w in recwarn if "noisy-env" in str(w.message)]
    assert len(noisy) == 1 and noisy[0].category is UserWarning


@pytest.mark.skipif(importlib.util.find_spec("mujoco") is None, reason="needs gymnasium[mujoco]")
def test_mujoco_prints_nothing_and_warns_once(monkeypatch, recwarn, capfd):
    """MuJoCo prints its compiler's warnings from C, once per sub-environment; they come once, as warnings."""
    from rl_gpu.envs import dependency_warnings

    monkeypatch.setattr(dependency_warnings, "_shown", set())
    for seed in range(2):
        make("gym:HalfCheetah-v5", num_envs=2, seed=seed).close()
    printed = capfd.readouterr()
    assert "WARNING" not in printed.err and "WARNING" not in printed.out
    messages = [str(w.message) for w in recwarn if str(w.message).startswith("MuJoCo: ")]
    # Recent MuJoCo versions deprecate an attribute that half_cheetah.xml uses; older ones say nothing.
    assert len(messages) == len(set(messages)) and len(messages) <= 1
    import mujoco

    assert mujoco.get_mju_user_warning() is None  # the hook is gone after each call


def test_an_id_carries_the_vectorisation_and_the_constructor_arguments():
    import torch

    from rl_gpu import make

    workers = make("gym:Pendulum-v1?vectorization_mode=async&g=9.0", num_envs=2, seed=3)
    inline = make("gym:Pendulum-v1", num_envs=2, seed=3, g=9.0)
    other = make("gym:Pendulum-v1", num_envs=2, seed=3, g=2.0)
    try:
        assert type(workers.vec).__name__ == "AsyncVectorEnv" and "vectorization_mode" in workers.env_id
        action = torch.ones(2, 1)
        for _ in range(3):
            a, b, c = workers.step(action), inline.step(action), other.step(action)
        assert torch.allclose(a.obs, b.obs) and not torch.allclose(a.obs, c.obs)
    finally:
        for env in (workers, inline, other):
            env.close()
    with pytest.raises(ValueError, match="vectorization_mode must be one of"):
        make("gym:Pendulum-v1?vectorization_mode=threads", num_envs=1)
