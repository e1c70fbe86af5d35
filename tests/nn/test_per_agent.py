"""One network per agent (``PerAgentActorCritic``, MAPPO/IPPO ``--no-share-params``): the stacked networks are M
separate actor-critics, each agent's rows reach only its own, and the update keeps each world-step's agents
together."""

import copy

import pytest
import torch

from rl_gpu.algos.base import Setup
from rl_gpu.algos.mappo.algorithm import IPPO, MAPPO
from rl_gpu.algos.mappo.config import MAPPOConfig
from rl_gpu.nn.kinds import build_policy
from rl_gpu.nn.per_agent import PerAgentActorCritic

from rl_gpu.envs.testing.xor import HiddenXorEnv


def _policy(continuous: bool, **kw) -> PerAgentActorCritic:
    sizes = {"action_dim": 2} if continuous else {"num_actions": 5}
    return PerAgentActorCritic(4, 3, hidden_sizes=(8, 8), normalize_obs=True, critic_obs_dim=6, init_log_std=-0.5,
                               **sizes, **kw)


@pytest.mark.parametrize("continuous", [False, True])
def test_each_agent_is_a_plain_actor_critic_on_its_own_rows(continuous):
    torch.manual_seed(0)
    policy = _policy(continuous)
    with torch.no_grad():
        policy.log_std.copy_(torch.randn(3, 2)) if continuous else None
    obs, critic = torch.randn(10, 3, 4), torch.randn(10, 3, 6)
    # Each agent's statistics come from its own rows only.
    policy.update_normalizer(obs.reshape(30, 4) * torch.tensor([1.0, 2.0, 3.0]).repeat(10)[:, None] + 1,
                             torch.ones(30), critic.reshape(30, 6))
    action = torch.randn(30, 2) if continuous else torch.randint(0, 5, (30,))
    out, value = policy(obs.reshape(30, 4), critic.reshape(30, 6))
    log_prob, entropy, value2 = policy.evaluate(obs.reshape(30, 4), action, None, critic.reshape(30, 6))
    assert torch.equal(value, value2)
    for m in range(3):
        plain = policy.agent(m)
        theirs_out, theirs_value = plain(obs[:, m], critic[:, m])
        torch.testing.assert_close(out.view(10, 3, -1)[:, m], theirs_out, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(value.view(10, 3)[:, m], theirs_value, rtol=1e-6, atol=1e-6)
        lp, ent, _ = plain.evaluate(obs[:, m], action.view(10, 3, *action.shape[1:])[:, m], None, critic[:, m])
        torch.testing.assert_close(log_prob.view(10, 3)[:, m], lp, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(entropy.view(10, 3)[:, m], ent, rtol=1e-6, atol=1e-6)
    # The agents start different (each its own initialisation) and keep different statistics.
    assert not torch.equal(policy.agent(0).actor[0].weight, policy.agent(1).actor[0].weight)
    assert not torch.allclose(policy.obs_rms[0].var, policy.obs_rms[2].var)


def test_an_agents_rows_move_only_its_own_parameters():
    torch.manual_seed(1)
    policy = _policy(False, )
    obs, critic = torch.randn(12, 4), torch.randn(12, 6)
    out, value = policy(obs, critic)
    # Rows 1, 4, 7, 10 are agent 1's.
    (out.view(4, 3, 5)[:, 1].sum() + value.view(4, 3)[:, 1].sum()).backward()
    for stacked in (policy.actor, policy.critic):
        for layer in stacked.layers:
            grad = layer.weight.grad.abs().sum((1, 2))
            assert grad[1] > 0 and grad[0] == 0 and grad[2] == 0


def test_rows_not_in_groups_of_the_agents_and_a_bad_agent_are_refused():
    policy = _policy(False)
    with pytest.raises(ValueError, match="groups of its 3 agents"):
        policy.act(torch.zeros(4, 4))
    with pytest.raises(ValueError, match=r"agent must be in \[0, 3\)"):
        policy.agent(3)
    with pytest.raises(ValueError, match="export each agent's actor"):
        policy.export_module()


@pytest.mark.parametrize("continuous", [False, True])
def test_the_config_rebuilds_the_same_networks(continuous):
    policy = _policy(continuous)
    twin = build_policy(policy.config())
    twin.load_state_dict(policy.state_dict())
    obs, critic = torch.randn(6, 4), torch.randn(6, 6)
    assert all(torch.equal(a, b) for a, b in zip(policy(obs, critic), twin(obs, critic)))


def _separate(cls, env, **config):
    setup = Setup(env=env, seed=0, learning_rate=3e-3, num_steps=8, hidden_sizes=(32, 32))
    return cls.from_setup(setup, MAPPOConfig(share_params=False, **config))


def test_minibatches_hold_whole_world_steps_and_the_update_moves_every_agent():
    env = HiddenXorEnv(8, seed=1)
    algo = _separate(MAPPO, env, num_minibatches=4, update_epochs=2)
    assert isinstance(algo.policy, PerAgentActorCritic) and algo.policy.num_agents == 2
    slots = 8 * 8 * 2
    perms = algo._permutations(slots)
    assert perms.shape == (2, slots)
    for p in perms:
        assert sorted(p.tolist()) == list(range(slots))
        pairs = p.view(-1, 2)
        assert torch.equal(pairs[:, 0] % 2, torch.zeros(slots // 2, dtype=torch.long))
        assert torch.equal(pairs[:, 1], pairs[:, 0] + 1)
    before = copy.deepcopy(algo.policy)
    algo.iterate()
    for m in range(2):
        assert not torch.equal(before.agent(m).actor[0].weight, algo.policy.agent(m).actor[0].weight)


def test_separate_critics_still_tell_mappo_from_ippo():
    """The hidden-XOR task again, every agent with its own networks: only the centralised critics explain it."""
    def explained(cls):
        torch.manual_seed(0)
        algo = _separate(cls, HiddenXorEnv(64, seed=3), num_minibatches=4, update_epochs=4, ent_coef=0.0)
        values = [float(algo.iterate()["explained_variance"]) for _ in range(30)]
        return sum(values[-5:]) / 5

    centralised, independent = explained(MAPPO), explained(IPPO)
    assert centralised > 0.9, centralised
    assert abs(independent) < 0.1, independent


def test_what_separate_networks_refuse():
    env = HiddenXorEnv(5, seed=0)  # 8 steps x 5 worlds = 40 world-steps
    with pytest.raises(ValueError, match="num_minibatches=16 must divide it"):
        _separate(MAPPO, env, num_minibatches=16)
    with pytest.raises(ValueError, match="no --micro-batch-size"):
        _separate(MAPPO, env, num_minibatches=2, micro_batch_size=4)
