"""Go1-Velocity-v0's randomisation events: observation noise, motor latency (action delay) and IMU bias, each per
row, a pure function of the state (so in checkpoints and exact resumes), and written in the id."""

import copy

import pytest
import torch

mujoco = pytest.importorskip("mujoco")

from rl_gpu.envs import make  # noqa: E402
from rl_gpu.envs.mujoco.quadruped import OBS_NOISE_SCALES, Go1VelocityEnv  # noqa: E402

QUIET = dict(push_interval_steps=0, randomization=None, num_threads=1)


def _pair(n=8, seed=3, **events):
    """The same worlds with and without the events (same seed: same starts)."""
    return Go1VelocityEnv(n, seed=seed, **QUIET, **events), Go1VelocityEnv(n, seed=seed, **QUIET)


def _actions(n, steps, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [0.5 * torch.randn(n, 12, generator=g) for _ in range(steps)]


def test_observation_noise_is_bounded_by_its_scales_fresh_each_step_and_pure():
    noisy, clean = _pair(obs_noise=2.0)
    scales = 2.0 * torch.tensor(OBS_NOISE_SCALES)
    previous = None
    for action in _actions(8, 5):
        a, b = noisy.step(action).obs, clean.step(action).obs
        diff = a - b
        assert bool((diff.abs() <= scales + 1e-5).all())
        assert torch.equal(diff[:, 9:12], torch.zeros(8, 3)) and torch.equal(diff[:, 36:], torch.zeros(8, 12))
        assert float(diff[:, 24:36].abs().max()) > 0.5  # joint velocities: scale 1.5 at level 2 (up to 3)
        assert previous is None or not torch.equal(diff, previous)
        previous = diff
        assert torch.equal(noisy.observe().obs, a)  # the same state, the same observation


def test_imu_bias_is_constant_over_an_episode_and_differs_between_rows():
    biased, clean = _pair(imu_bias=0.1)
    offsets = []
    for action in _actions(8, 4, seed=1):
        a, b = biased.step(action).obs, clean.step(action).obs
        offsets.append((a - b)[:, 3:9])
        assert torch.equal((a - b)[:, :3], torch.zeros(8, 3)) and torch.equal((a - b)[:, 9:], torch.zeros(8, 39))
    for o in offsets[1:]:
        torch.testing.assert_close(o, offsets[0], atol=1e-5, rtol=0)  # float32 rounding of the sums only
    assert bool((offsets[0].abs() <= 0.1 + 1e-6).all()) and len(set(offsets[0][:, 0].tolist())) == 8


def test_a_delayed_robot_moves_as_one_fed_the_actions_late():
    delayed, prompt = _pair(action_delay=(2, 2))
    actions = _actions(8, 8, seed=2)
    late = [torch.zeros(8, 12)] * 2 + actions[:-2]  # the queue starts at the home pose: action 0
    for action, was in zip(actions, late):
        delayed.step(action)
        prompt.step(was)
        assert torch.equal(delayed.state.inner.physics, prompt.state.inner.physics)


def test_a_delay_range_draws_per_row_and_episode_and_resumes_exactly():
    env = Go1VelocityEnv(64, seed=4, action_delay=(0, 3), **QUIET)
    delays = env.delay_steps(env.state.inner)
    assert set(delays.tolist()) == {0, 1, 2, 3}
    assert env.state.inner.task.shape[1] == Go1VelocityEnv.task_size + 3 * 12  # the queue is state
    actions = _actions(64, 12, seed=4)
    for action in actions[:6]:
        env.step(action)
    saved = copy.deepcopy(env.state_dict())
    first = [env.step(action).obs for action in actions[6:]]
    other = Go1VelocityEnv(64, seed=99, action_delay=(0, 3), **QUIET)
    other.load_state_dict(saved)
    for action, expected in zip(actions[6:], first):
        assert torch.equal(other.step(action).obs, expected)


def test_events_are_written_in_the_id_and_bad_values_are_refused():
    env = make("Go1-Velocity-v0?obs_noise=1&action_delay=0,2&imu_bias=0.05", 2, seed=0, num_threads=1,
               randomization=None)
    assert (env.params.obs_noise, env.params.action_delay, env.params.imu_bias) == (1.0, (0, 2), 0.05)
    for bad, needle in (("action_delay=2,1", "action_delay"), ("action_delay=0,99", "action_delay"),
                        ("obs_noise=-1", "obs_noise"), ("action_delay=1", "2 numbers"), ("no_such=1", "takes")):
        with pytest.raises(ValueError, match=needle):
            make(f"Go1-Velocity-v0?{bad}", 2, seed=0, num_threads=1, randomization=None)
