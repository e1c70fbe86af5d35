"""The partially observed classics (CartPoleNoVel-v1, PendulumNoVel-v1): step for step the full task's
transitions (which are checked against Gymnasium's elsewhere), with the velocities left out of every observation,
final observations included."""

import pytest
import torch

from rl_gpu import make


@pytest.mark.parametrize("hidden, full, keep", [("CartPoleNoVel-v1", "CartPole-v1", [0, 2]),
                                                ("PendulumNoVel-v1", "Pendulum-v1", [0, 1])])
def test_the_same_task_with_the_velocities_hidden(hidden, full, keep):
    a = make(hidden, num_envs=16, device="cpu", seed=4, max_episode_steps=30)
    b = make(full, num_envs=16, device="cpu", seed=4, max_episode_steps=30)
    assert a.spec.obs_shape == (2,) and a.spec.obs_high == tuple(b.spec.obs_high[i] for i in keep)
    g = torch.Generator().manual_seed(0)
    assert torch.equal(a.observe().obs, b.observe().obs[:, keep])
    ended = 0
    for _ in range(80):
        if a.is_continuous:
            action = torch.rand(16, 1, generator=g) * 4 - 2
        else:
            action = torch.randint(0, 2, (16,), generator=g)
        x, y = a.step(action), b.step(action)
        assert torch.equal(x.obs, y.obs[:, keep]) and torch.equal(x.final_obs, y.final_obs[:, keep])
        for name in ("reward", "terminated", "truncated", "episode_return", "episode_length"):
            assert torch.equal(getattr(x, name), getattr(y, name)), name
        ended += int((x.terminated | x.truncated).sum())
    assert ended > 16  # resets happened, and their observations matched too
