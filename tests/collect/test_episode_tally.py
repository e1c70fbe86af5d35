"""Episode accounting in one place (rl_gpu.data.episodes): the evaluation's recorder keeps each row's episode and
nothing of the steps, with the same actions and outcomes as a full rollout; the iteration statistics of a rollout,
of replay transitions and of population members are one function's."""

import pytest
import torch

from rl_gpu.collect.reference import EPISODES_CHECK_EVERY, collect, episode_horizon, tally_rollout
from rl_gpu.data.episodes import EpisodeTally, episode_metrics
from rl_gpu.envs.registry import make
from rl_gpu.nn.actor_critic import policy_for_env


def _policy(env):
    torch.manual_seed(0)
    return policy_for_env(env.spec, hidden_sizes=(16,))


@pytest.mark.parametrize("env_id,steps", [("CartPole-v1", 20), ("CartPole-v1", None), ("RussianRoulette-v0", None),
                                          ("Pendulum-v1", None)])
def test_the_tally_is_the_rollout_without_its_steps(env_id, steps):
    outcomes = []
    for record in ("rollout", "episodes"):
        env = make(env_id, num_envs=64, seed=3)
        policy = _policy(env)
        rng, opp = torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
        out = collect(policy, env, steps or episode_horizon(env), rng, episodic=True, opponent_rng=opp,
                      record=record)
        outcomes.append(tally_rollout(out) if record == "rollout" else out)
        assert isinstance(out, EpisodeTally) == (record == "episodes")
    full, lean = outcomes
    for a, b in zip(full, lean):
        assert torch.equal(a, b)
    if steps is not None:  # CartPole cut at 20 steps: some rows never ended, and count as return 0
        assert 0 < int(lean.ended.sum()) < 64 and (lean.episode_return[~lean.ended] == 0).all()


def test_the_tally_stops_once_every_episode_has_ended(monkeypatch):
    """An untrained CartPole policy's episodes end within a few dozen of the 500 steps: the tally stops at the first
    check after the last one ends, with the outcomes of the whole horizon (the test above)."""
    env = make("CartPole-v1", num_envs=16, seed=3)
    policy, steps = _policy(env), []
    step = env.step
    monkeypatch.setattr(env, "step", lambda action: (steps.append(1), step(action))[1])
    tally = collect(policy, env, episode_horizon(env), torch.Generator().manual_seed(1), episodic=True,
                    record="episodes")
    assert bool(tally.ended.all())
    longest = int(tally.episode_length.max())
    assert longest < 100 and len(steps) == -(-longest // EPISODES_CHECK_EVERY) * EPISODES_CHECK_EVERY


def test_the_tally_is_for_complete_episodes_only():
    env = make("CartPole-v1", num_envs=4, seed=0)
    with pytest.raises(ValueError, match="'episodes' with episodic=True"):
        collect(_policy(env), env, 8, record="episodes")
    with pytest.raises(ValueError, match="got 'steps'"):
        collect(_policy(env), env, 8, episodic=True, record="steps")


def test_one_function_counts_episodes_whole_or_per_member():
    g = torch.Generator().manual_seed(0)
    ended = torch.rand(6, 8, generator=g) < 0.3
    ret = torch.randn(6, 8, generator=g)
    length = torch.randint(1, 50, (6, 8), generator=g)
    whole = episode_metrics(ended, ret, length)
    n = int(ended.sum())
    assert whole["episodes"] == n
    assert torch.isclose(whole["episode_return"], ret[ended].mean())
    assert torch.isclose(whole["episode_length"], length[ended].float().mean())
    assert torch.isclose(whole["win_rate"], (ret[ended] > 0).float().mean())
    members = episode_metrics(*(x.view(6, 2, 4).movedim(1, 0).flatten(1) for x in (ended, ret, length)), dim=1)
    for k in range(2):
        alone = episode_metrics(ended[:, 4 * k:4 * k + 4], ret[:, 4 * k:4 * k + 4], length[:, 4 * k:4 * k + 4])
        for name in alone:
            assert torch.isclose(members[name][k].float(), alone[name].float()), name
    none = episode_metrics(torch.zeros(3, 2, dtype=torch.bool), torch.ones(3, 2), torch.ones(3, 2, dtype=torch.long))
    assert none["episodes"] == 0 and none["episode_return"] == 0 and none["win_rate"] == 0
