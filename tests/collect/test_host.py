"""The host collector: engine-stepped environments (MuJoCo, Gymnasium) collected with the policy's half of each
step as one unit. Uncompiled it is the reference collector, value for value; compiled (Inductor) it matches the
uncompiled one; PPO takes it in its compiled modes."""

import copy
from dataclasses import fields

import pytest
import torch

from rl_gpu import make
from rl_gpu.algos.ppo import PPO, PPOConfig
from rl_gpu.collect.host import HostCollector, supports
from rl_gpu.collect.reference import collect
from rl_gpu.nn.actor_critic import policy_for_env

CASES = [("HalfCheetah-v5", False), ("HalfCheetah-v5", True), ("gym:CartPole-v1", False), ("gym:CartPole-v1", True)]


def _env(env_id, max_steps=6):
    pytest.importorskip("mujoco" if "Cheetah" in env_id else "gymnasium")
    return make(env_id, num_envs=4, device="cpu", seed=3, max_episode_steps=max_steps)


def _assert_same(a, b, exact=True):
    for f in fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if not isinstance(x, torch.Tensor):
            assert x is None and y is None or not isinstance(y, torch.Tensor), f.name
            continue
        if exact or not x.is_floating_point():
            assert torch.equal(x, y), f.name
        else:
            torch.testing.assert_close(x, y, atol=1e-4, rtol=1e-4, msg=f.name)


def _pair(env_id, episodic, compile_mode, steps=10):
    """(reference rollout, host rollout) from equal environments, policies and generator states."""
    runs = []
    for which in ("reference", "host"):
        env = _env(env_id)
        torch.manual_seed(0)
        policy = policy_for_env(env.spec, (16,), normalize_obs=True)
        g, o = torch.Generator().manual_seed(5), torch.Generator().manual_seed(6)
        if which == "reference":
            runs.append([collect(policy, env, steps, g, episodic=episodic, opponent_rng=o) for _ in range(2)])
        else:
            host = HostCollector(policy, env, steps, episodic=episodic, compile=compile_mode)
            runs.append([host.collect(g, o) for _ in range(2)])
        runs[-1].append((g.get_state(), o.get_state()))
    return runs


@pytest.mark.parametrize("env_id, episodic", CASES)
def test_uncompiled_host_collection_is_the_reference_collector(env_id, episodic):
    (ref1, ref2, ref_rng), (host1, host2, host_rng) = _pair(env_id, episodic, "off")
    _assert_same(ref1, host1)
    _assert_same(ref2, host2)  # the batch carries on (continuing) or restarts (episodic) alike
    assert all(torch.equal(a, b) for a, b in zip(ref_rng, host_rng))
    if not episodic:
        assert bool(ref1.truncated.any())  # the time limit of 6 cut episodes: V(final_obs) was bootstrapped
        assert bool((ref1.final_value != 0).any())


@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "gym:CartPole-v1"])
def test_the_compiled_policy_half_matches_the_eager_one(env_id):
    (eager, _, _), (compiled, _, _) = _pair(env_id, False, "inductor", steps=6)
    _assert_same(eager, compiled, exact=False)


def test_what_it_does_not_take_is_refused_and_ppo_uses_it_when_compiled():
    pytest.importorskip("gymnasium")
    roulette = make("RussianRoulette-v0", num_envs=4, device="cpu", seed=0)
    policy = policy_for_env(roulette.spec, (8,))
    assert not supports(policy, roulette)  # a functional environment: the rollout engine's
    with pytest.raises(ValueError, match="host-stepped"):
        HostCollector(policy, roulette, 4)

    env = _env("gym:CartPole-v1")
    torch.manual_seed(0)
    policy = policy_for_env(env.spec, (16,))
    eager = PPO(copy.deepcopy(policy), PPOConfig(num_minibatches=2), 1e-3, seed=1, env=env, num_steps=8)
    rollout = eager.collect()
    env = _env("gym:CartPole-v1")
    compiled = PPO(copy.deepcopy(policy), PPOConfig(num_minibatches=2), 1e-3, seed=1, compile="inductor", env=env,
                   num_steps=8)
    same = compiled.collect()
    assert list(compiled._host.values())[0].num_steps == 8
    _assert_same(rollout, same, exact=False)
