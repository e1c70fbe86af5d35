"""``to_gymnasium(env, autoreset_mode=AutoresetMode.NEXT_STEP)``: Gymnasium's next-step auto-reset, checked
against Gymnasium's own CartPole vector environment and through the wrappers that need it."""

import numpy as np
import pytest
import torch

gymnasium = pytest.importorskip("gymnasium")
pytest.importorskip("gymnasium.vector", reason="needs gymnasium >= 1.1").AutoresetMode  # noqa: B018

from gymnasium.vector import AutoresetMode, VectorWrapper  # noqa: E402
from gymnasium.wrappers.vector import NormalizeObservation, RecordEpisodeStatistics  # noqa: E402

from rl_gpu.envs.cartpole import CartPoleState  # noqa: E402
from rl_gpu.envs.registry import make  # noqa: E402
from rl_gpu.interop.gymnasium import to_gymnasium  # noqa: E402

NEXT_STEP = AutoresetMode.NEXT_STEP


@pytest.mark.parametrize("autoreset", [True, False])
def test_next_step_transitions_equal_gymnasium_cartpole(autoreset):
    """Step ours and Gymnasium's NEXT_STEP CartPole with the same actions. Our resets draw from another
    generator, so each reset row is given Gymnasium's new state; everything else must agree exactly:
    observations (a finished row's is the one it finished in), rewards, flags, and the reset step (reward 0,
    no flags, a fresh start), through terminations and time-limit truncations."""
    n, limit = 4, 15
    base = make("CartPole-v1", num_envs=n, seed=0, max_episode_steps=limit, autoreset=autoreset)
    ours = to_gymnasium(base, autoreset_mode=NEXT_STEP)
    theirs = gymnasium.make_vec("CartPole-v1", n, vectorization_mode="sync", max_episode_steps=limit,
                                vector_kwargs={"autoreset_mode": NEXT_STEP})
    assert ours.metadata["autoreset_mode"] == theirs.metadata["autoreset_mode"] == NEXT_STEP

    def take_their_states(rows):
        states = np.stack([theirs.envs[i].unwrapped.state for i in rows]).astype(np.float64)
        base.set_rows(torch.as_tensor(rows), CartPoleState(*torch.from_numpy(states.T.copy())))

    ours.reset(seed=0)
    theirs.reset(seed=0)
    take_their_states(list(range(n)))
    rng = np.random.default_rng(0)
    resetting = np.zeros(n, dtype=bool)
    counts = {"terminated": 0, "truncated": 0, "reset": 0}
    for _ in range(90):
        action = rng.integers(0, 2, size=n)
        obs, reward, terminated, truncated, _ = ours.step(action)
        g_obs, g_reward, g_terminated, g_truncated, _ = theirs.step(action)
        np.testing.assert_array_equal(reward, g_reward)
        np.testing.assert_array_equal(terminated, g_terminated)
        # Gymnasium's TimeLimit also truncates a step that terminates at the limit; rl_gpu never sets both.
        np.testing.assert_array_equal(truncated, g_truncated & ~g_terminated)
        np.testing.assert_array_equal(obs[~resetting], g_obs[~resetting])
        assert np.abs(obs[resetting]).max(initial=0.0) <= 0.05  # CartPole's reset range
        assert not (reward[resetting].any() or terminated[resetting].any() or truncated[resetting].any())
        counts["reset"] += int(resetting.sum())
        if resetting.any():
            take_their_states(list(np.flatnonzero(resetting)))
        resetting = terminated | truncated
        counts["terminated"] += int(terminated.sum())
        counts["truncated"] += int(truncated.sum())
    assert min(counts.values()) >= 3, counts
    theirs.close()


class Tap(VectorWrapper):
    """Keeps the last observations that pass through, unchanged."""

    def step(self, actions):
        out = self.env.step(actions)
        self.last = out[0].copy()
        return out


def test_wrappers_that_refuse_same_step_work_in_next_step():
    with pytest.raises(ValueError, match="NEXT_STEP"):
        NormalizeObservation(to_gymnasium(make("CartPole-v1", num_envs=2, seed=0)))

    n, limit = 6, 20
    tap = Tap(to_gymnasium(make("CartPole-v1", num_envs=n, seed=1, max_episode_steps=limit),
                           autoreset_mode=NEXT_STEP))
    normalize = NormalizeObservation(tap)
    env = RecordEpisodeStatistics(normalize)
    env.reset(seed=1)
    rng = np.random.default_rng(1)
    episode_return, episode_length = np.zeros(n), np.zeros(n, dtype=np.int64)
    resetting = np.zeros(n, dtype=bool)
    episodes = 0
    for _ in range(60):
        obs, reward, terminated, truncated, infos = env.step(rng.integers(0, 2, size=n))
        rms = normalize.obs_rms
        np.testing.assert_allclose(obs, (tap.last - rms.mean) / np.sqrt(rms.var + normalize.epsilon),
                                   rtol=1e-5, atol=1e-5)
        # A reset step starts the next episode and is not part of either.
        episode_return = np.where(resetting, 0.0, episode_return + reward)
        episode_length = np.where(resetting, 0, episode_length + 1)
        done = terminated | truncated
        if done.any():
            np.testing.assert_array_equal(infos["_episode"], done)
            np.testing.assert_allclose(infos["episode"]["r"][done], episode_return[done])
            np.testing.assert_array_equal(infos["episode"]["l"][done], episode_length[done])
            episodes += int(done.sum())
        else:
            assert "episode" not in infos
        resetting = done
    assert episodes >= n and episode_length.max() <= limit


def test_reset_mask_cancels_a_pending_reset_and_modes_are_checked():
    env = to_gymnasium(make("CartPole-v1", num_envs=2, seed=0, max_episode_steps=3), autoreset_mode=NEXT_STEP)
    env.reset(seed=0)
    for _ in range(3):
        _, _, _, truncated, _ = env.step(np.zeros(2, dtype=np.int64))
    assert truncated.all()
    # Row 0 is reset by hand: the next step is an ordinary step for it, the reset step for row 1.
    env.reset(options={"reset_mask": np.array([True, False])})
    _, reward, *_ = env.step(np.zeros(2, dtype=np.int64))
    np.testing.assert_array_equal(reward, [1.0, 0.0])
    assert "NEXT_STEP" in repr(env)

    for mode in (AutoresetMode.DISABLED, "next_step"):
        with pytest.raises(ValueError, match="SAME_STEP or AutoresetMode.NEXT_STEP"):
            to_gymnasium(make("CartPole-v1", num_envs=2), autoreset_mode=mode)
