"""PettingZoo both ways: a user's ``ParallelEnv`` as an rl_gpu batch (``from_pettingzoo``), checked step by step
against the same environments stepped by PettingZoo alone; ours as a ``ParallelEnv`` (``to_pettingzoo``), passing
PettingZoo's own ``parallel_api_test``."""

import functools
import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("pettingzoo")
mpe = pytest.importorskip("mpe2.simple_spread_v3")

from gymnasium import spaces  # noqa: E402
from pettingzoo import ParallelEnv  # noqa: E402
from pettingzoo.test import parallel_api_test  # noqa: E402

from rl_gpu.core.errors import UsageError  # noqa: E402
from rl_gpu.envs.pettingzoo_env import from_pettingzoo  # noqa: E402
from rl_gpu.envs.registry import make  # noqa: E402
from rl_gpu.interop.pettingzoo import to_pettingzoo  # noqa: E402


def _stacked(obs: dict, agents: list[str]) -> np.ndarray:
    return np.stack([obs[a] for a in agents])


@pytest.mark.parametrize("continuous", [False, True])
def test_from_pettingzoo_steps_as_pettingzoo_alone_does(continuous):
    """Same seeds, same actions: identical observations, global state, rewards and flags, across episode ends
    (a finished world restarts in the same step, as the same environment's next reset() would)."""
    n, seed, cycles = 3, 5, 7
    make_one = functools.partial(mpe.parallel_env, N=2, max_cycles=cycles, continuous_actions=continuous)
    env = from_pettingzoo(make_one, n, seed=seed)
    alone = [make_one() for _ in range(n)]
    agents = alone[0].possible_agents
    obs = [e.reset(seed=seed + i)[0] for i, e in enumerate(alone)]
    step = env.reset(seed=seed)
    gen = torch.Generator().manual_seed(0)
    ends = 0
    for t in range(2 * cycles + 3):
        for i in range(n):
            np.testing.assert_array_equal(step.obs[i].numpy(), _stacked(obs[i], agents), err_msg=f"t={t} world {i}")
            np.testing.assert_array_equal(step.critic_obs[i].numpy(), alone[i].state())
        assert bool(step.acting.all())
        if continuous:
            action = torch.rand(n, 2, 5, generator=gen)
        else:
            action = torch.randint(0, 5, (n, 2), generator=gen)
        step = env.step(action)
        for i, e in enumerate(alone):
            joint = {a: (action[i, j].numpy() if continuous else int(action[i, j])) for j, a in enumerate(agents)}
            obs[i], rew, term, trunc, _ = e.step(joint)
            np.testing.assert_array_equal(step.final_obs[i].numpy(), _stacked(obs[i], agents))
            np.testing.assert_array_equal(step.reward[i].numpy(), np.float32([rew[a] for a in agents]))  # float32 rewards
            assert bool(step.truncated[i]) == all(trunc.values()) and not bool(step.terminated[i])
            if not e.agents:
                ends += 1
                assert int(step.episode_length[i]) == cycles
                obs[i] = e.reset()[0]
    assert ends == 2 * n


class _Relay(ParallelEnv):
    """Three agents with legal-move masks; agent_2 leaves after 2 steps (terminated), the others after 4 (the
    time limit, truncated) unless agent_0 plays action 2 (the world terminates)."""

    metadata = {"name": "relay"}
    possible_agents = ["agent_0", "agent_1", "agent_2"]
    max_cycles = 4

    def __init__(self):
        self._obs = spaces.Dict({"observation": spaces.Box(-9, 9, (2,)), "action_mask": spaces.MultiBinary(3)})

    def observation_space(self, agent):
        return self._obs

    def action_space(self, agent):
        return spaces.Discrete(3)

    def _observe(self):
        return {a: {"observation": np.array([self.t, i], np.float32),
                    "action_mask": np.array([1, 1, self.t % 2], np.int8)} for i, a in enumerate(self.agents)}

    def reset(self, seed=None, options=None):
        self.t, self.agents = 0, list(self.possible_agents)
        return self._observe(), {a: {} for a in self.agents}

    def step(self, actions):
        assert set(actions) == set(self.agents), (actions, self.agents)
        self.t += 1
        rewards = {a: float(actions[a]) for a in self.agents}
        ended = actions.get("agent_0") == 2
        terms = {a: ended or (a == "agent_2" and self.t == 2) for a in self.agents}
        truncs = {a: not terms[a] and self.t == self.max_cycles for a in self.agents}
        obs = self._observe()
        self.agents = [a for a in self.agents if not (terms[a] or truncs[a])]
        return obs, rewards, terms, truncs, {a: {} for a in obs}


def test_agents_that_leave_masks_and_world_ends():
    env = from_pettingzoo(_Relay, 2, seed=0)
    spec = env.spec
    assert spec.num_agents == 3 and spec.has_action_mask and spec.obs_groups["critic"] == (6,)
    step = env.reset()
    assert step.action_mask[0].tolist() == [[True, True, False]] * 3
    step = env.step(torch.tensor([[1, 1, 1], [1, 1, 1]]))
    assert step.reward[0].tolist() == [1.0, 1.0, 1.0] and step.action_mask[0, 0].tolist() == [True, True, True]
    step = env.step(torch.tensor([[0, 0, 0], [2, 0, 0]]))  # world 1: agent_0 ends the game
    assert step.terminated.tolist() == [False, True] and not step.truncated.any()
    assert step.acting.tolist() == [[True, True, False], [True, True, True]]  # world 1 restarted
    assert step.obs[0, 2].tolist() == [0.0, 0.0]  # agent_2 is gone: zeros, every action legal for it
    assert step.action_mask[0, 2].tolist() == [True, True, True]
    assert step.final_obs[1].tolist() == [[2, 0], [2, 1], [2, 2]] and step.obs[1, 0].tolist() == [0, 0]
    assert step.episode_length[1] == 2 and step.episode_return[1].tolist() == [3.0, 1.0, 1.0]
    for _ in range(2):
        step = env.step(torch.tensor([[1, 1, 0], [0, 0, 0]]))
    assert step.truncated.tolist() == [True, False] and not step.terminated[0]
    assert step.episode_return[0].tolist() == [3.0, 3.0, 1.0] and step.episode_length[0] == 4


def test_what_cannot_be_adapted_is_refused_in_one_line():
    class Mixed(_Relay):
        def observation_space(self, agent):
            return spaces.Box(-1, 1, (2 if agent == "agent_0" else 3,))

    with pytest.raises(UsageError, match="agents must observe alike"):
        from_pettingzoo(Mixed, 2)
    with pytest.raises(UsageError, match="builds a ParallelEnv"):
        from_pettingzoo(object(), 2)
    with pytest.raises(UsageError, match="no parallel_env"):
        make("pettingzoo:json", num_envs=1)
    with pytest.raises(UsageError, match="dotted identifiers"):
        make("pettingzoo:../x", num_envs=1)
    # What the module's own code raises for a value of the id is said in one line, naming the values.
    with pytest.raises(UsageError, match=r"cannot be built with \{'N': 0\}: ValueError"):
        make("pettingzoo:mpe2.simple_spread_v3?N=0", num_envs=1)
    with pytest.raises(UsageError, match="no positive time limit"):
        make("pettingzoo:mpe2.simple_spread_v3?max_cycles=-5", num_envs=1)


def test_the_id_builds_the_module_parallel_env():
    env = make("pettingzoo:mpe2.simple_spread_v3?N=2&continuous_actions=true", num_envs=2, seed=1)
    assert env.spec.num_agents == 2 and env.spec.action_shape == (5,) and env.spec.max_episode_steps == 25
    assert env.step(torch.full((2, 2, 5), 0.5)).reward.shape == (2, 2)


@pytest.mark.parametrize("env_id, kwargs", [
    ("vmas:navigation?n_agents=3", {}), ("vmas:balance", {"continuous_actions": False}),
    ("CartPole-v1", {}), ("Pendulum-v1", {}), ("RussianRoulette-v0?seats_as_agents=1", {}),
    ("LeducHoldem-v0?seats_as_agents=1", {}),
])
def test_to_pettingzoo_passes_pettingzoo_parallel_api_test(env_id, kwargs):
    env = to_pettingzoo(env_id, seed=3, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the API test reports some mistakes only as warnings
        parallel_api_test(env, num_cycles=250)


def test_to_pettingzoo_round_trip_equals_the_environment_itself():
    """A PettingZoo environment taken in and given back out steps exactly as it does alone."""
    make_one = functools.partial(mpe.parallel_env, N=2, max_cycles=5)
    ours = to_pettingzoo(from_pettingzoo(make_one, 1, seed=4))
    alone = make_one()
    a_obs, _ = ours.reset(seed=4)
    b_obs, _ = alone.reset(seed=4)
    rng = np.random.default_rng(0)
    for _ in range(5):
        for x, y in zip(a_obs.values(), b_obs.values(), strict=True):
            np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(ours.state(), alone.state())
        joint = {f"agent_{i}": int(rng.integers(5)) for i in range(2)}
        a_obs, a_rew, _, a_trunc, _ = ours.step(joint)
        b_obs, b_rew, _, b_trunc, _ = alone.step(joint)
        assert list(a_rew.values()) == [float(np.float32(r)) for r in b_rew.values()]
        assert list(a_trunc.values()) == list(b_trunc.values())
    assert ours.agents == [] and alone.agents == []


def test_a_games_seats_as_agents_carry_their_legal_moves():
    env = to_pettingzoo("RussianRoulette-v0?seats_as_agents=1", seed=0)
    obs, _ = env.reset(seed=0)
    assert obs["agent_0"]["action_mask"].tolist() == [1, 1, 1]  # seat 0 to act: FIRE, PEEK, SKIP
    obs, *_ = env.step({"agent_0": 1, "agent_1": 0})  # seat 0 peeks (seat 1's action is ignored)
    assert obs["agent_0"]["action_mask"].tolist() == [1, 0, 1]  # one PEEK a game
    assert obs["agent_0"]["observation"][1] == 0.0 and obs["agent_1"]["observation"][3] == 0.0


def test_to_pettingzoo_refuses_turn_based_games_and_batches():
    with pytest.raises(ValueError, match="AECEnv"):
        to_pettingzoo("RussianRoulette-v0")
    with pytest.raises(ValueError, match="num_envs=1"):
        to_pettingzoo(make("CartPole-v1", num_envs=2))
