"""Asymmetric actor-critic: an environment's ``critic`` observation group reaches PPO's value function only.

The toy task hides each episode's reward sign from the policy observation and reveals it in the ``critic``
group: a critic that sees it explains the returns, one that does not cannot.
"""

from __future__ import annotations

import copy
import io
from typing import NamedTuple

import pytest
import torch
from torch import Tensor

import rl_gpu
from rl_gpu.algos.ppo import PPO, PPOConfig
from rl_gpu.collect.reference import collect
from rl_gpu.envs.base import TensorEnv
from rl_gpu.envs.testing.contract import check_env
from rl_gpu.interop.export import to_torchscript_bytes
from rl_gpu.nn.actor_critic import build_policy, policy_for_env
from rl_gpu.runtime.checkpoint import save_checkpoint

HORIZON = 8


class HiddenSign(NamedTuple):
    sign: Tensor
    """``[N]`` float32 +-1: the reward of every step of the episode (hidden from the policy)."""
    t: Tensor
    """``[N]`` int64: steps taken."""


class HiddenSignEnv(TensorEnv[HiddenSign]):
    """Reward ``sign`` (+ a small action bonus) per step, cut by the time limit (bootstrapped truncation); the
    policy observes only time, the critic group the sign."""

    obs_shape = (2,)
    num_actions = 2
    max_episode_steps = HORIZON
    critic_obs_shape = (1,)

    def _sample_initial_state(self, num_envs: int, generator: torch.Generator) -> HiddenSign:
        sign = torch.randint(0, 2, (num_envs,), generator=generator, device=self.device).float() * 2 - 1
        return HiddenSign(sign, torch.zeros(num_envs, dtype=torch.long, device=self.device))

    def _transition(self, inner: HiddenSign, action: Tensor) -> tuple[HiddenSign, Tensor, Tensor]:
        reward = inner.sign + 0.1 * action.float()
        return HiddenSign(inner.sign, inner.t + 1), reward, torch.zeros_like(inner.t, dtype=torch.bool)

    def _observe(self, inner: HiddenSign) -> Tensor:
        return torch.stack([inner.t.float() / HORIZON, torch.ones_like(inner.sign)], dim=1)

    def _observe_critic(self, inner: HiddenSign) -> Tensor:
        return inner.sign[:, None]


class HiddenSignNoCriticEnv(HiddenSignEnv):
    critic_obs_shape = None


def _policy(env, seed=0, normalize_obs=True):
    torch.manual_seed(seed)
    return policy_for_env(env.spec, hidden_sizes=(16, 16), normalize_obs=normalize_obs)


def test_spec_and_step_results_carry_the_critic_group():
    env = HiddenSignEnv(4, seed=0)
    assert env.spec.obs_groups == {"policy": (2,), "critic": (1,)} and env.spec.critic_obs_size == 1
    plain = HiddenSignNoCriticEnv(4, seed=0)
    assert plain.spec.obs_groups == {"policy": (2,)} and plain.spec.critic_obs_size == 0
    step = env.reset()
    assert step.critic_obs.shape == (4, 1) and step.critic_obs.dtype == torch.float32
    assert torch.equal(step.critic_obs[:, 0], env.state.inner.sign)
    assert plain.reset().critic_obs is None and plain.reset().final_critic_obs is None
    for _ in range(HORIZON):
        before = env.state.inner.sign.clone()
        step = env.step(torch.zeros(4, dtype=torch.long))
    assert bool(step.truncated.all())
    # Before the reset: the finished episode's sign; after it: the fresh start's.
    assert torch.equal(step.final_critic_obs[:, 0], before)
    assert torch.equal(step.critic_obs[:, 0], env.state.inner.sign)


def test_an_env_with_a_critic_group_passes_the_generic_contract_checks():
    # critic_obs is an after-reset field like obs: determinism, batch-vs-single, resets and frozen rows cover it.
    reports = check_env(HiddenSignEnv, num_envs=8, num_steps=3 * HORIZON, seed=1)
    assert sum(r.episodes for r in reports.values()) > 0


def test_policy_critic_reads_policy_and_critic_obs_actor_policy_obs_only():
    env = HiddenSignEnv(4, seed=0)
    policy = _policy(env)
    assert policy.critic[0].in_features == 3 and policy.actor[0].in_features == 2
    assert policy.config()["critic_obs_dim"] == 1
    assert "critic_obs_rms.mean" in policy.state_dict()
    plain = _policy(HiddenSignNoCriticEnv(4, seed=0))
    assert "critic_obs_dim" not in plain.config() and plain.critic[0].in_features == 2
    assert not any(k.startswith("critic_obs_rms") for k in plain.state_dict())
    obs, critic = torch.randn(5, 2), torch.randn(5, 1)
    with pytest.raises(ValueError, match="critic_obs"):
        policy.value(obs)
    out = policy.act(obs, deterministic=True)  # the actor alone: players and exports
    assert torch.equal(out.value, torch.zeros(5))
    full = policy.act(obs, deterministic=True, critic_obs=critic)
    assert torch.equal(full.action, out.action)
    assert torch.allclose(full.value, policy.value(obs, critic))
    rebuilt = build_policy(policy.config())
    rebuilt.load_state_dict(policy.state_dict())
    assert torch.equal(rebuilt.value(obs, critic), policy.value(obs, critic))


def test_reference_and_engine_rollouts_hold_critic_obs_and_agree():
    env_a, env_b = HiddenSignEnv(4, seed=3), HiddenSignEnv(4, seed=3)
    policy = _policy(env_a, normalize_obs=False)
    rollout = collect(policy, env_a, 12, torch.Generator().manual_seed(5))
    assert rollout.critic_obs.shape == (12, 4, 1)
    with torch.no_grad():
        assert torch.allclose(rollout.value, policy.value(rollout.obs, rollout.critic_obs))
    # The truncation bootstrap reads the finished episode's privileged observation.
    assert bool(rollout.truncated.any()) and bool((rollout.final_value != 0).any())
    algo = PPO(policy, PPOConfig(), 1e-3, seed=0)
    algo.policy_rng.manual_seed(5)
    engine_rollout = algo.collect(env_b, 12, episodic=False)
    for name in ("obs", "critic_obs", "action", "log_prob", "value", "reward", "truncated", "final_value",
                 "bootstrap_value"):
        assert torch.equal(getattr(engine_rollout, name), getattr(rollout, name)), name


def _explained_variance(env_cls, iterations=15) -> float:
    env = env_cls(32, seed=1, validate_actions=False)
    policy = _policy(env)
    algo = PPO(policy, PPOConfig(gamma=0.8, update_epochs=4, num_minibatches=4), 1e-2, seed=0,
               env=env, num_steps=16)
    values = [float(algo.iterate()["explained_variance"]) for _ in range(iterations)]
    return sum(values[-5:]) / 5


def test_the_critic_group_lets_the_value_function_explain_hidden_returns():
    with_critic = _explained_variance(HiddenSignEnv)
    without = _explained_variance(HiddenSignNoCriticEnv)
    assert with_critic > 0.8, with_critic
    assert without < 0.5, without


def test_resume_is_exact_with_a_critic_group():
    env = HiddenSignEnv(8, seed=2, validate_actions=False)
    algo = PPO(_policy(env), PPOConfig(num_minibatches=2), 3e-3, seed=4, env=env, num_steps=8)
    algo.iterate()
    saved_algo, saved_env = copy.deepcopy(algo.state_dict()), copy.deepcopy(env.state_dict())
    expected = algo.iterate()
    env2 = HiddenSignEnv(8, seed=99, validate_actions=False)
    resumed = PPO(_policy(env2, seed=1), PPOConfig(num_minibatches=2), 3e-3, seed=4, env=env2, num_steps=8)
    resumed.load_state_dict(saved_algo)
    env2.load_state_dict(saved_env)
    got = resumed.iterate()
    assert all(torch.equal(got[k], expected[k]) for k in expected)
    for k, v in algo.policy.state_dict().items():
        assert torch.equal(resumed.policy.state_dict()[k], v), k


def test_exports_and_load_take_the_policy_observation_only(tmp_path):
    env = HiddenSignEnv(8, seed=2, validate_actions=False)
    algo = PPO(_policy(env), PPOConfig(num_minibatches=2), 3e-3, seed=4, env=env, num_steps=8)
    algo.iterate()
    policy = algo.policy.eval()
    obs = torch.randn(16, 2, generator=torch.Generator().manual_seed(0))
    expected = policy.act(obs, deterministic=True).action
    scripted = torch.jit.load(io.BytesIO(to_torchscript_bytes(policy, {"env_id": "test"})))
    assert torch.equal(scripted(obs), expected)
    path = tmp_path / "best.pt"
    save_checkpoint(path, {"env_id": "CartPole-v1", "policy_config": policy.config(), "update": 1,
                           "global_step": 8, "algorithm": {"policy": policy.state_dict()}})
    loaded = rl_gpu.load(path)
    assert loaded.obs_dim == 2 and torch.equal(loaded.act(obs), expected)


def test_go1_declares_its_privileged_observation_as_the_critic_group():
    pytest.importorskip("mujoco")
    from rl_gpu.envs.mujoco.quadruped import Go1VelocityEnv

    env = Go1VelocityEnv(4, seed=0, num_threads=1)
    assert env.spec.obs_groups == {"policy": (48,), "critic": (7,)}
    step = env.step(torch.zeros(4, 12))
    assert step.critic_obs.shape == (4, 7) and step.critic_obs.dtype == torch.float32
    assert torch.equal(step.critic_obs, env.privileged_obs(env.state.inner))
    policy = policy_for_env(env.spec, hidden_sizes=(16,))
    assert policy.critic[0].in_features == 55 and policy.actor[0].in_features == 48
