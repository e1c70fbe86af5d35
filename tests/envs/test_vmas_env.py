"""VMAS scenarios through the adapter (``vmas:<scenario>``), checked against VMAS's own stepping: the same seed
and actions give identical observations, rewards and flags, and a world the adapter resets equals what VMAS's
own ``reset_at`` gives it."""

import pytest
import torch

vmas = pytest.importorskip("vmas")

from vmas.simulator.environment import Environment  # noqa: E402

from rl_gpu.core.errors import UsageError  # noqa: E402
from rl_gpu.envs.registry import make  # noqa: E402
from rl_gpu.envs.testing.preflight import check_run_env  # noqa: E402
from rl_gpu.envs.vmas_env import VmasEnv, _seeded_streams  # noqa: E402

N, STEPS = 6, 23


def _actions(env, generator):
    if env.is_continuous:
        # Beyond the range on purpose: both sides clamp.
        return torch.rand(env.num_envs, env.num_agents, *env.action_shape, generator=generator) * 2.4 - 1.2
    return torch.randint(0, env.num_actions, (env.num_envs, env.num_agents), generator=generator)


def _reference(scenario, seed, limit, continuous, kwargs, actions, resets):
    """VMAS alone: the same stream, the same actions; finished worlds reset with VMAS's own reset/reset_at."""
    shared = Environment.vmas_random_state
    saved = list(shared)
    shared[:] = _seeded_streams(seed)
    try:
        raw = vmas.make_env(scenario, num_envs=N, continuous_actions=continuous, max_steps=limit,
                            clamp_actions=True, terminated_truncated=True, **kwargs)
        obs = raw.reset()
        out = []
        for t, action in enumerate(actions):
            for i in resets.get(t, ()):
                obs = raw.reset_at(i)
            if continuous:
                joint = list(action.unbind(1))
            else:
                joint = list(action.reshape(N, -1, 1).unbind(1))
            final, rewards, terminated, truncated, _ = raw.step(joint)
            truncated = truncated & ~terminated
            done = (terminated | truncated).nonzero().flatten().tolist()
            obs = final
            if len(done) == N:
                obs = raw.reset()
            else:
                for i in done:
                    obs = raw.reset_at(i)
            out.append((torch.stack(final, 1), torch.stack(rewards, 1), terminated, truncated, torch.stack(obs, 1)))
        return out
    finally:
        shared[:] = saved


@pytest.mark.parametrize("scenario, continuous, kwargs", [
    ("navigation", True, {"n_agents": 3}),
    ("balance", False, {"n_agents": 3}),
])
def test_the_adapter_steps_as_vmas_does(scenario, continuous, kwargs):
    limit, seed = 7, 5
    env = VmasEnv(scenario, N, seed=seed, max_episode_steps=limit, continuous_actions=continuous, **kwargs)
    g = torch.Generator().manual_seed(0)
    actions = [_actions(env, g) for _ in range(STEPS)]
    # Worlds 1 and 4 restart at step 3: from then on they finish at other steps than the rest (reset_at).
    resets = {3: [1, 4]}
    mine = []
    for t, action in enumerate(actions):
        if t in resets:
            rows = torch.zeros(N, dtype=torch.bool)
            rows[resets[t]] = True
            env.reset_rows(rows)
        step = env.step(action)
        mine.append(step)
    theirs = _reference(scenario, seed, limit, continuous, kwargs, actions, resets)
    finished_apart = False
    for t, (step, (final, reward, terminated, truncated, obs)) in enumerate(zip(mine, theirs)):
        assert torch.equal(step.final_obs, final), t
        assert torch.equal(step.reward, reward), t
        assert torch.equal(step.terminated, terminated) and torch.equal(step.truncated, truncated), t
        assert torch.equal(step.obs, obs), t
        assert torch.equal(step.critic_obs, step.obs.reshape(N, -1))
        finished_apart |= 0 < int(step.done.sum()) < N
    assert finished_apart  # the per-world reset path ran, not only the all-worlds one


def test_episode_statistics_and_the_contract():
    env = make("vmas:navigation", num_envs=4, seed=1, max_episode_steps=5, n_agents=2)
    assert env.spec.num_agents == 2 and env.spec.obs_groups["critic"] == (2 * env.spec.obs_shape[0],)
    total = torch.zeros(4, 2)
    for t in range(5):
        step = env.step(torch.zeros(4, 2, 2))
        total += step.reward
    assert step.truncated.all() and not step.terminated.any()
    assert torch.equal(step.episode_length, torch.full((4,), 5))
    assert torch.allclose(step.episode_return, total)
    check_run_env(make("vmas:navigation", num_envs=4, seed=1, n_agents=2))


def test_two_adapters_draw_from_their_own_streams():
    def run(other_between):
        env = VmasEnv("navigation", 3, seed=9, max_episode_steps=2, n_agents=2)
        seen = []
        for _ in range(4):
            if other_between:
                VmasEnv("navigation", 5, seed=1, n_agents=2).step(torch.zeros(5, 2, 2))
            seen.append(env.step(torch.zeros(3, 2, 2)).obs)
        return torch.stack(seen)

    assert torch.equal(run(False), run(True))
    assert not torch.equal(VmasEnv("navigation", 3, seed=1, n_agents=2).reset().obs,
                           VmasEnv("navigation", 3, seed=2, n_agents=2).reset().obs)


def test_what_the_adapter_refuses():
    with pytest.raises(UsageError, match="no such VMAS scenario"):
        VmasEnv("navigaton", 2)
    with pytest.raises(UsageError, match="different sizes"):
        VmasEnv("simple_adversary", 2)
    with pytest.raises(UsageError, match="cannot make it"):
        VmasEnv("navigation", 2, no_such_argument=1)
    env = VmasEnv("navigation", 2, n_agents=2)
    with pytest.raises(ValueError, match="shape"):
        env.step(torch.zeros(2, 2))
    with pytest.raises(ValueError, match="NaN"):
        env.step(torch.full((2, 2, 2), float("nan")))


def test_scenario_parameters_in_the_id():
    from rl_gpu.envs.vmas_env import parse_scenario

    assert parse_scenario("navigation?n_agents=2&shared_rew=false&x=0.5&name=a") == (
        "navigation", {"n_agents": 2, "shared_rew": False, "x": 0.5, "name": "a"})
    env = make("vmas:navigation?n_agents=2&shared_rew=false", num_envs=3, seed=0)
    assert env.num_agents == 2 and env.vmas.scenario.shared_rew is False
    for bad in ("navigation?n_agents", "navigation?n_agents=1&n_agents=2", "navigation?=3"):
        with pytest.raises(UsageError, match="name=value"):
            parse_scenario(bad)
    with pytest.raises(UsageError, match="both in the id"):
        make("vmas:navigation?n_agents=2", num_envs=3, n_agents=3)


def test_a_one_agent_scenario_has_no_agent_axis():
    env = make("vmas:simple", num_envs=3, seed=0, max_episode_steps=4)
    assert env.spec.num_agents == 1 and "critic" not in env.spec.obs_groups
    step = env.step(torch.zeros(3, 2))
    assert step.obs.shape == (3, 4) and step.reward.shape == (3,) and step.acting is None
    check_run_env(make("vmas:simple", num_envs=3, seed=0, max_episode_steps=4))


def test_agent_ids_append_a_one_hot_per_agent():
    plain = make("vmas:navigation?n_agents=3", num_envs=4, seed=2)
    with_ids = make("vmas:navigation?n_agents=3&agent_ids=true", num_envs=4, seed=2)
    assert with_ids.spec.obs_shape == (plain.spec.obs_shape[0] + 3,)
    assert with_ids.spec.obs_groups["critic"] == plain.spec.obs_groups["critic"]
    action = torch.zeros(4, 3, 2)
    for _ in range(3):
        a, b = plain.step(action), with_ids.step(action)
        o = plain.spec.obs_shape[0]
        assert torch.equal(b.obs[..., :o], a.obs) and torch.equal(b.final_obs[..., :o], a.final_obs)
        assert torch.equal(b.obs[..., o:], torch.eye(3).expand(4, 3, 3))
        assert torch.equal(b.critic_obs, a.critic_obs)
    with pytest.raises(UsageError, match="VMAS cannot make it"):  # allocation refused by the machine
        make("vmas:navigation?n_agents=1000000000000", num_envs=1)
    with pytest.raises(UsageError, match="agent_ids is true or false"):
        make("vmas:navigation?agent_ids=2", num_envs=1)
