"""Host simulators in worker processes (``gym:ID?workers=K``, rl_gpu.runtime.host_workers): the same batch as
Gymnasium's own synchronous one step for step; a killed worker is restarted, its slice's episodes cut and counted,
and the environment goes on; refusals. (Training on them is PPO's host path, tested with in-process gym: ids.)"""

import os
import signal
import time

import pytest
import torch

pytest.importorskip("gymnasium")

from rl_gpu import make  # noqa: E402


def test_workers_step_the_batch_gymnasium_steps():
    a = make("gym:CartPole-v1?workers=2", num_envs=5, seed=3)
    b = make("gym:CartPole-v1", num_envs=5, seed=3)
    try:
        g, ended = torch.Generator().manual_seed(0), 0
        for _ in range(80):
            action = torch.randint(0, 2, (5,), generator=g)
            x, y = a.step(action), b.step(action)
            for name in ("obs", "final_obs", "reward", "terminated", "truncated", "episode_return"):
                assert torch.equal(getattr(x, name), getattr(y, name)), name
            ended += int((x.terminated | x.truncated).sum())
        assert ended > 5 and [hi - lo for lo, hi in a.vec.slices] == [2, 3]
    finally:
        a.close()
        b.close()


def test_a_killed_worker_is_restarted_and_its_slice_cut():
    env = make("gym:CartPole-v1?workers=2", num_envs=4, seed=0)
    try:
        before = env.step(torch.zeros(4, dtype=torch.long))
        os.kill(env.vec._procs[0].pid, signal.SIGKILL)
        time.sleep(0.1)
        with pytest.warns(RuntimeWarning, match="host worker 0 .* died; restarted"):
            step = env.step(torch.zeros(4, dtype=torch.long))
        assert step.truncated[:2].all() and not step.terminated[:2].any() and (step.reward[:2] == 0).all()
        assert torch.equal(step.final_obs[:2], before.obs[:2]) and env.vec.restarts == 1
        for _ in range(30):  # the run goes on, both slices stepping
            step = env.step(torch.ones(4, dtype=torch.long))
        assert (step.episode_length >= 0).all()
    finally:
        env.close()


@pytest.mark.parametrize("env_id, says", [
    ("gym:CartPole-v1?workers=0", "workers must be an integer from 1 to num_envs"),
    ("gym:CartPole-v1?workers=5", "workers must be an integer from 1 to num_envs"),
    ("gym:CartPole-v1?workers=two", "workers must be an integer"),
    ("gym:CartPole-v1?workers=2&vectorization_mode=async", "give one"),
])
def test_bad_worker_settings_are_refused(env_id, says):
    with pytest.raises(ValueError, match=says):
        make(env_id, num_envs=4)
