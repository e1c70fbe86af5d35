"""``to_gymnasium`` / ``to_sb3``: rl_gpu environments as Gymnasium and Stable-Baselines3 vector envs."""

import importlib.util

import numpy as np
import pytest
import torch

gymnasium = pytest.importorskip("gymnasium")
pytest.importorskip("gymnasium.vector", reason="needs gymnasium >= 1.1").AutoresetMode  # noqa: B018

from gymnasium import spaces  # noqa: E402
from gymnasium.utils.passive_env_checker import check_action_space, check_observation_space  # noqa: E402
from gymnasium.vector import AutoresetMode  # noqa: E402
from gymnasium.wrappers.vector import DictInfoToList, RecordEpisodeStatistics  # noqa: E402

from rl_gpu.envs.registry import make  # noqa: E402
from rl_gpu.interop.gymnasium import to_gymnasium  # noqa: E402


def test_spaces_follow_the_environment():
    cartpole = to_gymnasium(make("CartPole-v1", num_envs=5, seed=0))
    assert cartpole.num_envs == 5
    assert cartpole.single_action_space == spaces.Discrete(2)
    assert cartpole.single_observation_space.shape == (4,)
    assert cartpole.observation_space.shape == (5, 4) and cartpole.action_space.shape == (5,)
    assert cartpole.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP

    pendulum = to_gymnasium(make("Pendulum-v1", num_envs=3, seed=0))
    assert pendulum.single_action_space == spaces.Box(-2.0, 2.0, (1,), np.float32)
    assert pendulum.action_space.shape == (3, 1)

    # A Gymnasium environment brought in and sent back out keeps its observation bounds.
    back = to_gymnasium(make("gym:CartPole-v1", num_envs=2, seed=0))
    assert back.single_observation_space == gymnasium.make("CartPole-v1").observation_space

    for env in (cartpole, pendulum, back):
        check_observation_space(env.single_observation_space)
        check_action_space(env.single_action_space)

    with pytest.raises(ValueError, match="2 players"):
        to_gymnasium(make("RussianRoulette-v0", num_envs=2, seed=0))


CLASSIC_IDS = ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1"]


@pytest.mark.parametrize("env_id", CLASSIC_IDS)
def test_classic_control_spaces_carry_gymnasium_bounds(env_id):
    """The class declares Gymnasium's observation box (float32, bit for bit), and so does its Gymnasium view;
    an instance built with other limits declares its own."""
    theirs = gymnasium.make(env_id)
    ours = to_gymnasium(make(env_id, num_envs=2, seed=0))
    cls = type(ours.env)
    np.testing.assert_array_equal(np.asarray(cls.obs_low, dtype=np.float32), theirs.observation_space.low)
    np.testing.assert_array_equal(np.asarray(cls.obs_high, dtype=np.float32), theirs.observation_space.high)
    assert ours.single_observation_space == theirs.observation_space
    assert ours.single_action_space == theirs.action_space
    theirs.close()
    if env_id.startswith("MountainCar"):
        assert make(env_id, max_speed=0.5).spec.obs_high == (0.6, 0.5)


def test_observations_stay_inside_the_declared_bounds():
    for env_id in CLASSIC_IDS:
        env = to_gymnasium(make(env_id, num_envs=8, seed=0, max_episode_steps=40))
        env.action_space.seed(0)
        obs, _ = env.reset(seed=0)
        for _ in range(60):
            assert env.observation_space.contains(obs), env_id
            obs, _, _, _, infos = env.step(env.action_space.sample())
            for final in (infos.get("final_obs") if "final_obs" in infos else []):
                assert final is None or env.single_observation_space.contains(final), env_id


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_steps_return_numpy_in_the_spaces_with_same_step_final_obs(env_id):
    env = to_gymnasium(make(env_id, num_envs=4, seed=1, max_episode_steps=7))
    env.action_space.seed(0)
    obs, infos = env.reset(seed=3)
    assert isinstance(obs, np.ndarray) and obs.dtype == np.float32 and env.observation_space.contains(obs)
    finished = 0
    for _ in range(15):
        obs, reward, terminated, truncated, infos = env.step(env.action_space.sample())
        assert env.observation_space.contains(obs)
        assert reward.dtype == np.float64 and reward.shape == (4,)
        assert terminated.dtype == np.bool_ and truncated.dtype == np.bool_
        done = terminated | truncated
        if done.any():
            finished += int(done.sum())
            np.testing.assert_array_equal(infos["_final_obs"], done)
            for i in range(4):
                if done[i]:
                    assert env.single_observation_space.contains(infos["final_obs"][i])
                    assert not np.array_equal(infos["final_obs"][i], obs[i])
                else:
                    assert infos["final_obs"][i] is None
        else:
            assert "final_obs" not in infos
    assert finished >= 4
    env.close()


def test_gymnasium_wrappers_see_the_same_episodes():
    base = make("CartPole-v1", num_envs=4, seed=2, max_episode_steps=9)
    env = DictInfoToList(RecordEpisodeStatistics(to_gymnasium(base)))
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    seen = []
    for _ in range(40):
        _, _, terminated, truncated, infos = env.step(rng.integers(0, 2, size=4))
        assert isinstance(infos, list) and len(infos) == 4
        for i in np.flatnonzero(terminated | truncated):
            seen.append(infos[i]["episode"]["l"])
            assert "final_obs" in infos[i]
    assert seen and all(1 <= length <= 9 for length in seen)
    assert 9 in seen


def test_round_trip_equals_gymnasium_same_step_vector_env():
    """gym -> rl_gpu -> gym gives what Gymnasium's own SAME_STEP vector environment gives."""
    ours = to_gymnasium(make("gym:CartPole-v1", num_envs=3, seed=4, max_episode_steps=12))
    theirs = gymnasium.make_vec("CartPole-v1", 3, vectorization_mode="sync", max_episode_steps=12,
                                vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP})
    obs_a, _ = ours.reset(seed=4)
    obs_b, _ = theirs.reset(seed=4)
    np.testing.assert_array_equal(obs_a, obs_b)
    rng = np.random.default_rng(1)
    for _ in range(60):
        action = rng.integers(0, 2, size=3)
        a, b = ours.step(action), theirs.step(action)
        for x, y in zip(a[:3], b[:3]):
            np.testing.assert_array_equal(x, y)
        # Gymnasium's TimeLimit also truncates a step that terminates at the limit; rl_gpu never sets both.
        np.testing.assert_array_equal(a[3], b[3] & ~b[2])
        assert ("final_obs" in a[4]) == ("final_obs" in b[4])
        if "final_obs" in b[4]:
            np.testing.assert_array_equal(a[4]["_final_obs"], b[4]["_final_obs"])
            for i in np.flatnonzero(b[4]["_final_obs"]):
                np.testing.assert_array_equal(a[4]["final_obs"][i], b[4]["final_obs"][i])
    theirs.close()


def test_reset_mask_resets_only_those_rows():
    env = to_gymnasium(make("CartPole-v1", num_envs=4, seed=5))
    env.reset(seed=1)
    for _ in range(3):
        before, *_ = env.step(np.ones(4, dtype=np.int64))
    after, _ = env.reset(options={"reset_mask": np.array([True, False, True, False])})
    np.testing.assert_array_equal(after[[1, 3]], before[[1, 3]])
    assert not np.array_equal(after[[0, 2]], before[[0, 2]])
    assert np.abs(after[[0, 2]]).max() <= 0.05


def test_discrete_infos_carry_the_action_mask():
    env = to_gymnasium(make("CartPole-v1", num_envs=2, seed=0))
    _, infos = env.reset(seed=0)
    assert infos["action_mask"].shape == (2, 2) and infos["action_mask"].all()
    assert torch.is_tensor(env.env.observe().obs)


@pytest.mark.skipif(importlib.util.find_spec("stable_baselines3") is None, reason="needs stable-baselines3")
def test_stable_baselines3_ppo_trains_on_it():
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecNormalize

    from rl_gpu.interop.sb3 import to_sb3

    vec = to_sb3(make("CartPole-v1", num_envs=4, seed=0, max_episode_steps=20))
    vec.seed(3)
    obs = vec.reset()
    assert obs.shape == (4, 4) and obs.dtype == np.float32
    obs, rewards, dones, infos = vec.step(np.zeros(4, dtype=np.int64))
    assert rewards.shape == (4,) and dones.dtype == np.bool_ and len(infos) == 4
    model = PPO("MlpPolicy", VecNormalize(vec), n_steps=32, batch_size=64, n_epochs=2, seed=0, device="cpu")
    model.learn(total_timesteps=256)
    assert model.num_timesteps >= 256
    assert len(model.ep_info_buffer) > 0
    assert all(1 <= info["l"] <= 20 for info in model.ep_info_buffer)
    finished = 0
    for _ in range(25):
        _, _, dones, infos = vec.step(np.ones(4, dtype=np.int64))
        for i in np.flatnonzero(dones):
            finished += 1
            assert infos[i]["terminal_observation"].shape == (4,)
            truncated = infos[i]["TimeLimit.truncated"]
            assert isinstance(truncated, bool) and (not truncated or infos[i]["episode"]["l"] == 20)
    assert finished >= 4
    vec.close()
