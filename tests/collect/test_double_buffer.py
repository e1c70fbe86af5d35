"""Double-buffered collection (rl_gpu.collect.double_buffer): the rows in two halves, the environment stepping
one in a worker thread while the policy acts on the other, gives the synchronous loop's rollouts and updates bit
for bit (a tensor env and MuJoCo's host-stepped engine, with auto-resets and truncation inside the rollout);
what cannot be double-buffered is refused."""

import copy

import pytest
import torch

from rl_gpu import make
from rl_gpu.algos.ppo.algorithm import PPO
from rl_gpu.algos.ppo.config import PPOConfig
from rl_gpu.nn.actor_critic import policy_for_env

FIELDS = ("obs", "action", "log_prob", "value", "reward", "terminated", "truncated", "final_value",
          "bootstrap_value", "episode_return")


@pytest.mark.parametrize("env_id, num_envs", [("CartPole-v1", 40), ("HalfCheetah-v5", 32)])
def test_double_buffering_gives_the_synchronous_results(env_id, num_envs):
    pytest.importorskip("mujoco") if env_id.endswith("-v5") else None
    torch.manual_seed(0)
    envs = [make(env_id, num_envs=num_envs, seed=4, max_episode_steps=9) for _ in range(2)]
    policy = policy_for_env(envs[0].spec, hidden_sizes=(32, 32), normalize_obs=True)
    config = PPOConfig(update_epochs=2, num_minibatches=2)
    algos = [PPO(copy.deepcopy(policy), config, 1e-2, seed=7, env=env, num_steps=12, double_buffer=on)
             for env, on in zip(envs, (False, True))]
    for _ in range(3):
        results = [algo.iterate() for algo in algos]
        for name in FIELDS:
            a, b = (getattr(algo.last_rollout, name) for algo in algos)
            assert torch.equal(a, b), name
        assert torch.equal(results[0].collected.episode_return, results[1].collected.episode_return)
    assert algos[0].last_rollout.truncated.any()  # auto-resets happened inside the rollouts
    for a, b in zip(algos[0].policy.parameters(), algos[1].policy.parameters()):
        assert torch.equal(a, b)
    for x, y in zip(torch.utils._pytree.tree_leaves(envs[0].state), torch.utils._pytree.tree_leaves(envs[1].state)):
        assert torch.equal(x, y)


@pytest.mark.parametrize("kwargs, match", [
    ({"env_id": "RussianRoulette-v0"}, "single-player"),
    ({"async_collect": True}, "choose one"),
    ({"num_envs": 1}, "at least 2"),
])
def test_refusals(kwargs, match):
    env = make(kwargs.pop("env_id", "CartPole-v1"), num_envs=kwargs.pop("num_envs", 4), seed=0)
    policy = policy_for_env(env.spec, hidden_sizes=(8,))
    with pytest.raises(ValueError, match=match):
        PPO(policy, PPOConfig(num_minibatches=1), 1e-3, seed=0, env=env, num_steps=16, double_buffer=True, **kwargs)


def test_the_worker_steps_without_autograd(monkeypatch):
    # Grad mode is per thread: the worker's environment step and value head must run without it too.
    env = make("CartPole-v1", num_envs=8, seed=0, max_episode_steps=5)
    modes = []
    step_rows = type(env).step_rows

    def recording(self, *args):
        modes.append(torch.is_grad_enabled())
        return step_rows(self, *args)

    monkeypatch.setattr(type(env), "step_rows", recording)
    policy = policy_for_env(env.spec, hidden_sizes=(8,))
    algo = PPO(policy, PPOConfig(num_minibatches=1), 1e-3, seed=0, env=env, num_steps=8, double_buffer=True)
    algo.collect()
    assert len(modes) == 16 and not any(modes)
