"""Meta-World through ``metaworld:`` ids, against Meta-World's own environments stepped by hand: the same
observations (task one-hot included), rewards, ends and successes, step for step across the 500-step time limit
and its resets. Meta-World 3.1 pins MuJoCo 3.3 (this project's robots need 4.x), so it is not in the test extra:
these tests run where it is installed (benchmarks/README.md, "Meta-World") and skip elsewhere."""

import numpy as np
import pytest
import torch

metaworld = pytest.importorskip("metaworld")
gym = pytest.importorskip("gymnasium")

from rl_gpu import make  # noqa: E402


def test_mt10_rows_step_as_meta_worlds_own_environments():
    seed, n = 3, 10
    env = make("metaworld:MT10", num_envs=n, seed=seed)
    names = list(metaworld.MT10(seed=seed).train_classes)
    assert env.task_ids == tuple(names) and env.spec.obs_shape == (49,) and env.spec.num_tasks == 10
    own = [gym.make("Meta-World/MT1", env_name=t, seed=seed, use_one_hot=True, env_id=k, num_tasks=10)
           for k, t in enumerate(names)]
    for i, e in enumerate(own):  # each row its own stream (Meta-World seeds every copy alike)
        e.unwrapped.seed(seed + i)
    obs = np.stack([e.reset(seed=seed + i)[0] for i, e in enumerate(own)])
    torch.testing.assert_close(env.observe().obs, torch.as_tensor(obs, dtype=torch.float32))
    rng = np.random.default_rng(0)
    successes = np.zeros(n, dtype=bool)
    finished = 0
    for _ in range(505):
        action = rng.uniform(-1, 1, (n, 4)).astype(np.float32)
        step = env.step(torch.as_tensor(action))
        for i, e in enumerate(own):
            o, r, term, trunc, info = e.step(action[i])
            successes[i] |= bool(info["success"])
            assert float(step.reward[i]) == pytest.approx(r, rel=1e-6, abs=1e-6)
            assert bool(step.terminated[i]) == term and bool(step.truncated[i]) == (trunc and not term)
            torch.testing.assert_close(step.final_obs[i], torch.as_tensor(o, dtype=torch.float32))
            if term or trunc:
                finished += 1
                assert bool(env.row_success()[i]) == successes[i]
                successes[i] = False
                o, _ = e.reset()
            torch.testing.assert_close(step.obs[i], torch.as_tensor(o, dtype=torch.float32))
    assert finished == n  # every row ended once, at the time limit


def test_rows_of_one_task_play_different_variations():
    env = make("metaworld:reach-v3", num_envs=4, seed=0)
    obs = env.observe().obs
    assert all((obs[i] - obs[0]).abs().max() > 1e-3 for i in range(1, 4))


def test_one_task_and_refusals():
    env = make("metaworld:reach-v3", num_envs=2, seed=0)
    assert env.spec.obs_shape == (39,) and env.spec.num_tasks == 0 and env.max_episode_steps == 500
    with pytest.raises(ValueError, match="not a Meta-World benchmark or task"):
        make("metaworld:nope-v3", num_envs=2)
