"""MAPPO and IPPO populations (``--parallel``): each member's rows act with its own parameters and its own
sampling noise, and each member's update on its agent rows equals its lone update (parameters to rounding, its
value and reward normalisers exactly as a lone update leaves them)."""

import copy
import dataclasses

import pytest
import torch

from rl_gpu.algos.base import Setup
from rl_gpu.algos.mappo.algorithm import IPPO, MAPPO
from rl_gpu.algos.mappo.config import MAPPOConfig
from rl_gpu.algos.population.mappo import PopulationMAPPO
from rl_gpu.data.rollout import Rollout
from rl_gpu.envs.testing.xor import HiddenXorEnv

TOLERANCE = 1e-5
"""As tests/algos/test_population.py: a batched matrix multiply rounds differently from a plain one."""

PER_ENV = ("bootstrap_value", "controlled", "learner_seat")
"""Rollout fields without the time axis."""


def _members(cls, make_env, config, seeds=(1, 2), n=8):
    members = []
    for s in seeds:
        torch.manual_seed(s)
        setup = Setup(env=make_env(n, s), seed=s, learning_rate=3e-3, num_steps=4, hidden_sizes=(16, 16))
        members.append(cls.from_setup(setup, config))
    return members


def _worlds(rollout: Rollout, w: slice) -> Rollout:
    """The rollout of worlds ``w`` only."""
    fields = {}
    for name in Rollout.__dataclass_fields__:
        x = getattr(rollout, name)
        fields[name] = x if not isinstance(x, torch.Tensor) else (x[w] if name in PER_ENV else x[:, w])
    return Rollout(**fields)


def _xor(n, seed):
    return HiddenXorEnv(n, seed=seed)


@pytest.mark.parametrize("cls", [MAPPO, IPPO])
def test_each_members_update_is_its_lone_update(cls):
    config = MAPPOConfig(num_minibatches=2, update_epochs=2, norm_reward=True)
    members = _members(cls, _xor, config)
    twins = [copy.deepcopy(m) for m in members]
    population = PopulationMAPPO(members, HiddenXorEnv(16, seed=0))
    assert population.cols == 16  # 8 worlds x 2 agents per member
    for _ in range(2):
        rollout = population.collect([True, True])
        metrics = population.update(rollout.agents_as_rows(critic=cls.centralised), [True, True])
        lone = [twin.update(_worlds(rollout, slice(k * 8, (k + 1) * 8))) for k, twin in enumerate(twins)]
    for k, (m, twin) in enumerate(zip(members, twins)):
        assert abs(float(metrics["loss"][k]) - float(lone[k].loss)) < TOLERANCE
        for p, q in zip(m.policy.parameters(), twin.policy.parameters()):
            assert (p - q).abs().max() < TOLERANCE
        for norm in ("value_normalizer", "reward_normalizer"):
            ours, theirs = getattr(m, norm).state_dict(), getattr(twin, norm).state_dict()
            assert ours.keys() == theirs.keys()
            for name in ours:
                assert torch.allclose(ours[name].double(), theirs[name].double(), atol=1e-6), (norm, name)
    # the members learnt different things: their columns were their own
    assert any((p - q).abs().max() > 1e-3 for p, q in zip(members[0].policy.parameters(),
                                                          members[1].policy.parameters()))


def _navigation(n, seed):
    from rl_gpu.envs.vmas_env import VmasEnv
    return VmasEnv("navigation?n_agents=2", num_envs=n, device="cpu", seed=seed)


@pytest.mark.parametrize("env", ["xor", "vmas"])
def test_each_members_rows_act_with_its_parameters_and_its_own_noise(env):
    if env == "vmas":
        pytest.importorskip("vmas")
    make_env = _xor if env == "xor" else _navigation
    members = _members(MAPPO, make_env, MAPPOConfig())
    population = PopulationMAPPO(members, make_env(16, 0))
    before = [m.policy_rng.get_state() for m in members]
    rollout = population.collect([True, True])
    for k, m in enumerate(members):
        w = slice(k * 8, (k + 1) * 8)
        masks = None if rollout.action_mask is None else rollout.action_mask[:, w].flatten(0, 2)
        obs, mask = rollout.obs[0, w].flatten(0, 1), None if masks is None else rollout.action_mask[0, w].flatten(0, 1)
        critic = rollout.critic_obs[0, w][:, None].expand(-1, 2, -1).flatten(0, 1)
        generator = torch.Generator().set_state(before[k])
        alone = m.policy.act(obs, mask, generator, critic_obs=critic)
        assert torch.allclose(alone.action.float(), rollout.action[0, w].flatten(0, 1).float(), atol=1e-5)
        log_prob, _, _ = m.policy.evaluate(rollout.obs[:, w].flatten(0, 2),
                                           rollout.action[:, w].flatten(0, 2), masks,
                                           rollout.critic_obs[:, w][:, :, None].expand(-1, -1, 2, -1).flatten(0, 2))
        assert torch.allclose(log_prob, rollout.log_prob[:, w].flatten(), atol=1e-5)
    result = population.iterate()  # what each member's trainer logs, a lone MAPPO's names
    assert set(members[0].metric_names) <= set(result) and result["team_return"].shape == (2,)
    # a frozen member's generator is left alone
    states = [m.policy_rng.get_state() for m in members]
    population.collect([True, False])
    assert not torch.equal(members[0].policy_rng.get_state(), states[0])
    assert torch.equal(members[1].policy_rng.get_state(), states[1])


def test_one_network_per_agent_is_refused():
    members = _members(MAPPO, _xor, dataclasses.replace(MAPPOConfig(), share_params=False))
    with pytest.raises(ValueError, match="--no-share-params"):
        PopulationMAPPO(members, HiddenXorEnv(16, seed=0))
