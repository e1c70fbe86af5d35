"""The on-device replay buffer: the ring wraps around keeping the newest rows, samples are uniform over the
transitions held (and never outside them), n-step returns walk an environment's own steps and stop at episode
ends and at the newest row, a checkpoint restores it exactly, and nothing reads back to the host."""

import io
import math

import pytest
import torch

from rl_gpu.data.replay import ReplayBuffer
from test_no_sync import forbid_host_sync


def _steps(start, count, num_envs, terminated=(), truncated=()):
    """``count`` steps whose every value encodes ``step * 10 + env`` (so slots are recognisable); flags are set at
    the ``(step, env)`` pairs given."""
    t = torch.arange(start, start + count, dtype=torch.float32)[:, None]
    e = torch.arange(num_envs, dtype=torch.float32)[None, :]
    value = t * 10 + e
    flags = []
    for marks in (terminated, truncated):
        flag = torch.zeros(count, num_envs, dtype=torch.bool)
        for step, env in marks:
            if start <= step < start + count:
                flag[step - start, env] = True
        flags.append(flag)
    return value[..., None], value[..., None] / 100, value, value[..., None] + 0.5, *flags


def _bits(n, seed=0):
    return torch.randint(0, 2**62, (n,), generator=torch.Generator().manual_seed(seed))


def test_the_ring_wraps_around_and_keeps_the_newest_rows():
    buf = ReplayBuffer(capacity=7, num_envs=2, obs_shape=(1,), action_shape=(1,), device="cpu")
    assert (buf.num_rows, buf.capacity) == (3, 6)  # rounded down to whole rows of 2
    buf.add(*_steps(0, 2, 2))
    assert len(buf) == 4 and int(buf.pos) == 2 and int(buf.rows) == 2
    buf.add(*_steps(2, 3, 2))  # steps 2, 3, 4: 3 and 4 overwrite rows 0 and 1
    assert len(buf) == 6 and buf.rows_written == 5 and int(buf.pos) == 2 and int(buf.rows) == 3
    # Ring rows 0, 1, 2 hold steps 3, 4, 2; slot row * N + env.
    assert buf.reward.tolist() == [30, 31, 40, 41, 20, 21]
    assert buf.obs[:, 0].tolist() == [30, 31, 40, 41, 20, 21]
    assert buf.next_obs[:, 0].tolist() == [30.5, 31.5, 40.5, 41.5, 20.5, 21.5]
    with pytest.raises(ValueError, match="do not fit"):
        buf.add(*_steps(5, 4, 2))
    with pytest.raises(ValueError, match="at least --num-envs"):
        ReplayBuffer(capacity=3, num_envs=4, obs_shape=(1,), action_shape=(1,), device="cpu")


@pytest.mark.parametrize("steps", [5, 11])
def test_samples_are_uniform_over_the_transitions_held(steps):
    buf = ReplayBuffer(capacity=24, num_envs=3, obs_shape=(1,), action_shape=(1,), device="cpu")
    for start in range(0, steps, 6):
        buf.add(*_steps(start, min(6, steps - start), 3))
    held = min(steps, 8) * 3
    draws = 240_000
    batch = buf.sample(_bits(draws))
    counts = torch.bincount(batch.index, minlength=buf.capacity).double()
    assert counts[held:].sum() == 0  # never a slot that holds nothing
    assert torch.equal(batch.reward, buf.reward[batch.index])
    # Pearson's chi-square against the uniform distribution over the held slots: with held - 1 degrees of
    # freedom its mean is held - 1 and its standard deviation sqrt(2 (held - 1)); 6 standard deviations is a
    # test that fails for a skew of a few percent and not by chance.
    expected = draws / held
    chi2 = float(((counts[:held] - expected) ** 2 / expected).sum())
    assert chi2 < (held - 1) + 6 * math.sqrt(2 * (held - 1)), chi2
    # Transitions sampled are the ones stored: the newest rows (and every environment) all appear.
    assert (counts[:held] > 0).all()


def test_n_step_returns_stop_at_episode_ends_and_at_the_newest_row():
    gamma = 0.9
    buf = ReplayBuffer(capacity=8, num_envs=1, obs_shape=(1,), action_shape=(1,), device="cpu", n_step=3,
                       gamma=gamma)
    # Rewards 0, 10, 20, ..., 50 (value step * 10); step 1 terminates, step 3 is truncated.
    buf.add(*_steps(0, 6, 1, terminated=[(1, 0)], truncated=[(3, 0)]))
    batch = buf.sample(torch.arange(6))
    expected = [
        # (n-step reward, discount, next_obs): from step 0: 0 + 0.9 * 10, then step 1 terminated: discount 0.
        (0 + gamma * 10, 0.0, 10.5),
        (10, 0.0, 10.5),  # step 1 itself terminates
        (20 + gamma * 30, gamma**2, 30.5),  # step 3 is truncated: bootstrap from its true next obs
        (30, gamma, 30.5),
        (40 + gamma * 50, gamma**2, 50.5),  # step 5 is the newest: nothing after it yet
        (50, gamma, 50.5),
    ]
    for i, (reward, discount, next_obs) in enumerate(expected):
        assert batch.reward[i].item() == pytest.approx(reward), i
        assert batch.discount[i].item() == pytest.approx(discount), i
        assert batch.next_obs[i, 0].item() == next_obs, i
        assert batch.obs[i, 0].item() == i * 10


def test_n_step_returns_follow_each_environment_across_the_wrap():
    gamma = 0.5
    buf = ReplayBuffer(capacity=6, num_envs=2, obs_shape=(1,), action_shape=(1,), device="cpu", n_step=2,
                       gamma=gamma)
    buf.add(*_steps(0, 2, 2))
    buf.add(*_steps(2, 2, 2))  # rows hold steps 3, 1, 2 (step 0 overwritten)
    # Slot 2 * 2 + 1 is step 2 of environment 1; its successor (step 3) sits in row 0 after the wrap.
    batch = buf.sample(torch.tensor([5, 0]))
    assert batch.reward[0].item() == pytest.approx(21 + gamma * 31)
    assert batch.next_obs[0, 0].item() == 31.5 and batch.discount[0].item() == pytest.approx(gamma**2)
    # Slot 0 is step 3 of environment 0, the newest: a one-step return.
    assert batch.reward[1].item() == 30 and batch.discount[1].item() == pytest.approx(gamma)


def test_one_step_discount_is_zero_only_after_termination():
    buf = ReplayBuffer(capacity=4, num_envs=2, obs_shape=(1,), action_shape=(1,), device="cpu", gamma=0.99)
    buf.add(*_steps(0, 1, 2, terminated=[(0, 0)], truncated=[(0, 1)]))
    batch = buf.sample(torch.tensor([0, 1]))
    assert batch.discount.tolist() == pytest.approx([0.0, 0.99])
    assert batch.next_obs[:, 0].tolist() == [0.5, 1.5]


def test_state_dict_restores_the_buffer_exactly():
    buf = ReplayBuffer(capacity=10, num_envs=2, obs_shape=(2,), action_shape=(1,), device="cpu", n_step=2)
    obs, action, reward, next_obs, term, trunc = _steps(0, 7, 2, terminated=[(2, 1)])
    for part in (slice(0, 4), slice(4, 7)):
        buf.add(obs[part].expand(-1, 2, 2), action[part], reward[part], next_obs[part].expand(-1, 2, 2),
                term[part], trunc[part])
    state = buf.state_dict()
    other = ReplayBuffer(capacity=10, num_envs=2, obs_shape=(2,), action_shape=(1,), device="cpu", n_step=2)
    other.load_state_dict(state)
    bits = _bits(64, seed=3)
    a, b = buf.sample(bits), other.sample(bits)
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    assert other.rows_written == 7 and int(other.pos) == 2 and len(other) == 10
    # Only rows that hold transitions are saved.
    half = ReplayBuffer(capacity=10, num_envs=2, obs_shape=(2,), action_shape=(1,), device="cpu")
    half.add(obs[:2].expand(2, 2, 2), action[:2], reward[:2], next_obs[:2].expand(2, 2, 2), term[:2], trunc[:2])
    assert half.state_dict()["obs"].shape == (4, 2)
    # ... and only they are written: a slice would save its tensor's whole storage.
    big = ReplayBuffer(capacity=100_000, num_envs=2, obs_shape=(2,), action_shape=(1,), device="cpu")
    big.add(obs[:2].expand(2, 2, 2), action[:2], reward[:2], next_obs[:2].expand(2, 2, 2), term[:2], trunc[:2])
    saved = io.BytesIO()
    torch.save(big.state_dict(), saved)
    assert len(saved.getvalue()) < 20_000
    with pytest.raises(ValueError, match="holds 10 transitions"):
        ReplayBuffer(capacity=12, num_envs=2, obs_shape=(2,), action_shape=(1,), device="cpu").load_state_dict(state)


def test_writing_and_sampling_do_not_synchronise():
    buf = ReplayBuffer(capacity=64, num_envs=4, obs_shape=(3,), action_shape=(2,), device="cpu", n_step=3)
    obs = torch.randn(5, 4, 3)
    with forbid_host_sync():
        buf.write(obs, torch.randn(5, 4, 2), torch.randn(5, 4), obs, torch.zeros(5, 4, dtype=torch.bool),
                  torch.ones(5, 4, dtype=torch.bool))
        buf.sample(torch.randint(0, 2**62, (32,)))
