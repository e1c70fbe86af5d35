"""MAPPO's world critic (``--world-critic``): the critic reads each world's critic group once and gives each of
its agents a value from a head of its own. Its values are that network's outputs spread over the world's rows;
minibatches keep a world-step's agents together; it explains a reward no agent sees, as the per-agent centralised
critic does; and it rebuilds from its checkpoint config."""

import pytest
import torch

from rl_gpu.algos.base import Setup
from rl_gpu.algos.mappo.algorithm import IPPO, MAPPO
from rl_gpu.algos.mappo.config import MAPPOConfig
from rl_gpu.envs.testing.xor import HiddenXorEnv
from rl_gpu.nn.actor_critic import ActorCritic, GaussianActorCritic, build_policy


def _setup(env, seed=0, **kw):
    return Setup(env=env, seed=seed, learning_rate=3e-3, num_steps=8, hidden_sizes=(32, 32), **kw)


@pytest.mark.parametrize("cls, size", [(ActorCritic, {"num_actions": 3}), (GaussianActorCritic, {"action_dim": 2})])
def test_each_worlds_group_is_valued_once_with_a_head_per_agent(cls, size):
    torch.manual_seed(0)
    policy = cls(4, hidden_sizes=(8,), critic_obs_dim=6, world_agents=3, normalize_obs=True, **size)
    assert policy.critic[0].in_features == 6 and policy.critic[-1].out_features == 3
    worlds = torch.randn(5, 6)
    rows = worlds.repeat_interleave(3, dim=0)  # rows 3w, 3w+1, 3w+2: the agents of world w, one group each
    obs = torch.randn(15, 4)
    policy.update_normalizer(obs, critic_obs=rows)
    expected = policy.critic(policy.critic_obs_rms(worlds))  # [5 worlds, 3 agents]
    assert torch.allclose(policy.value(obs, critic_obs=rows), expected.reshape(15))
    _, value = policy(obs, critic_obs=rows)
    assert torch.allclose(value, expected.reshape(15))
    assert torch.allclose(policy.evaluate(obs, policy.act(obs).action, critic_obs=rows)[2], expected.reshape(15))
    assert torch.allclose(policy.value(obs.view(5, 3, 4), critic_obs=rows.view(5, 3, 6)), expected)
    with pytest.raises(ValueError, match="groups of the world's 3 agents"):
        policy.value(obs[:4], critic_obs=rows[:4])
    rebuilt = build_policy(policy.config())
    rebuilt.load_state_dict(policy.state_dict())
    assert policy.config()["world_agents"] == 3
    assert torch.equal(rebuilt.value(obs, critic_obs=rows), policy.value(obs, critic_obs=rows))
    with pytest.raises(ValueError, match="world_agents >= 2"):
        cls(4, critic_obs_dim=0, world_agents=3, **size)


def test_minibatches_keep_each_world_steps_agents_together():
    env = HiddenXorEnv(6, seed=0)
    algo = MAPPO.from_setup(_setup(env), MAPPOConfig(world_critic=True, num_minibatches=4))
    assert algo.policy.world_agents == 2
    permutations = algo._permutations(8 * 6 * 2)
    assert permutations.shape == (algo.config.update_epochs, 96)
    pairs = permutations.view(algo.config.update_epochs, 48, 2)
    assert torch.equal(pairs[..., 0] % 2, torch.zeros_like(pairs[..., 0])) and torch.equal(pairs[..., 1],
                                                                                        pairs[..., 0] + 1)
    assert torch.equal(permutations.sort(-1).values[0], torch.arange(96))


def test_a_world_critic_explains_a_reward_no_agent_sees():
    torch.manual_seed(0)
    env = HiddenXorEnv(64, seed=3)
    algo = MAPPO.from_setup(_setup(env, seed=4), MAPPOConfig(num_minibatches=4, update_epochs=4, ent_coef=0.0,
                                                             world_critic=True))
    values = [float(algo.iterate()["explained_variance"]) for _ in range(40)]
    assert sum(values[-5:]) / 5 > 0.9, values[-5:]


@pytest.mark.parametrize("cls, config, setup, needle", [
    (IPPO, {}, {}, "use --algo mappo or drop --world-critic"),
    (MAPPO, {"share_params": False}, {}, "drop --no-share-params, --memory and --policy"),
    (MAPPO, {}, {"memory_size": 8}, "drop --no-share-params, --memory and --policy"),
    (MAPPO, {}, {"policy": "categorical"}, "drop --no-share-params, --memory and --policy"),
    (MAPPO, {"num_minibatches": 5}, {}, "num_minibatches=5 must divide it"),
    (MAPPO, {"micro_batch_size": 4}, {}, "takes no --micro-batch-size"),
])
def test_what_a_world_critic_refuses(cls, config, setup, needle):
    with pytest.raises(ValueError, match=needle):
        cls.from_setup(_setup(HiddenXorEnv(4, seed=0), **setup), MAPPOConfig(world_critic=True, **config))
