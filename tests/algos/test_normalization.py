"""Reward normalisation (running std of the discounted return) in PPO, and action clipping in exports."""

import copy
import importlib.util
import io
import json

import numpy as np
import pytest
import torch

from rl_gpu.__main__ import main as rl_gpu_main
from rl_gpu.algos.ppo import PPO, PPOConfig, update_policy
from rl_gpu.envs.registry import make
from rl_gpu.interop.export import DeterministicPolicy, ExportError, to_onnx_bytes, to_torchscript_bytes
from rl_gpu.nn.actor_critic import ActorCritic, policy_for_env
from rl_gpu.nn.normalization import RewardNormalizer
from rl_gpu.runtime.checkpoint import save_checkpoint

HAS_ORT = all(importlib.util.find_spec(name) is not None for name in ("onnx", "onnxruntime"))


def _rollouts(num=4, t=7, n=5, seed=0):
    """``num`` rollouts of ``(reward [T, N] float32, done [T, N] bool, weight [T, N] float32)``."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(num):
        reward = (torch.randn(t, n, generator=g) * 3 + 1).float()
        done = torch.rand(t, n, generator=g) < 0.2
        weight = (torch.rand(t, n, generator=g) < 0.7).float()
        out.append((reward, done, weight))
    return out


def _reference(rollouts, gamma, clip, eps=1e-8, weighted=True):
    """The same maths with numpy scalars: the statistics after each rollout are the weighted mean and
    (population) variance of every discounted return recorded so far."""
    n = rollouts[0][0].shape[1]
    ret = [0.0] * n
    seen, seen_w, outs = [], [], []
    for reward, done, weight in rollouts:
        r, d = reward.double().numpy(), done.numpy()
        w = weight.double().numpy() if weighted else np.ones_like(r)
        for t in range(r.shape[0]):
            for i in range(n):
                ret[i] = ret[i] * gamma + r[t, i]
                seen.append(ret[i])
                seen_w.append(w[t, i])
                if d[t, i]:
                    ret[i] = 0.0
        x, wx = np.array(seen), np.array(seen_w)
        mean = (wx * x).sum() / wx.sum()
        var = (wx * (x - mean) ** 2).sum() / wx.sum()
        outs.append(np.clip(r / np.sqrt(var + eps), -clip, clip))
    return outs, np.array(ret), mean, var, sum(seen_w)


@pytest.mark.parametrize("weighted", [True, False])
def test_reward_normalizer_matches_a_scalar_reference(weighted):
    rollouts = _rollouts()
    gamma, clip = 0.9, 1.5  # a small clip, so clipping happens
    norm = RewardNormalizer(5, gamma, clip)
    got = [norm.normalize(r, d, w if weighted else None) for r, d, w in rollouts]
    expected, ret, mean, var, count = _reference(rollouts, gamma, clip, weighted=weighted)
    for g, e in zip(got, expected):
        assert g.dtype == torch.float32 and g.shape == (7, 5)
        np.testing.assert_allclose(g.numpy(), e, rtol=1e-6, atol=1e-6)
    assert any((g.abs() == clip).any() for g in got)
    np.testing.assert_allclose(norm.ret.numpy(), ret, rtol=1e-12)
    np.testing.assert_allclose(norm.return_rms.mean.item(), mean, rtol=1e-10)
    np.testing.assert_allclose(norm.return_rms.var.item(), var, rtol=1e-10)
    assert norm.return_rms.count.item() == count
    assert set(norm.state_dict()) == {"ret", "return_rms.mean", "return_rms.var", "return_rms.count"}


def test_zero_weight_rollout_leaves_the_statistics_empty():
    norm = RewardNormalizer(3, 0.99)
    reward = torch.randn(4, 3)
    out = norm.normalize(reward, torch.zeros(4, 3, dtype=torch.bool), torch.zeros(4, 3))
    assert norm.return_rms.count.item() == 0 and norm.return_rms.var.item() == 1.0
    assert torch.isfinite(norm.return_rms.mean).all()
    torch.testing.assert_close(out, reward.clamp(-10, 10), rtol=1e-7, atol=1e-7)
    assert torch.all(norm.ret != 0)  # the running return still advances


def test_compiled_normalizer_equals_eager():
    rollouts = _rollouts(num=3, t=3, n=4, seed=3)
    eager = RewardNormalizer(4, 0.95, 5.0)
    compiled_norm = copy.deepcopy(eager)
    compiled = torch.compile(compiled_norm.normalize, dynamic=False, fullgraph=True)
    for reward, done, weight in rollouts:
        torch.testing.assert_close(compiled(reward, done, weight), eager.normalize(reward, done, weight),
                                   rtol=1e-6, atol=1e-6)
    for key, value in eager.state_dict().items():
        torch.testing.assert_close(compiled_norm.state_dict()[key], value, rtol=1e-12, atol=1e-12)


def _ppo(norm_reward=True, seed=0, env=None):
    torch.manual_seed(seed)
    spec = make("CartPole-v1", num_envs=1).spec
    config = PPOConfig(norm_reward=norm_reward, update_epochs=2, num_minibatches=2)
    return PPO(policy_for_env(spec), config, 1e-3, seed, env=env)


def _env():
    return make("CartPole-v1", num_envs=8, seed=0)


def test_ppo_reward_normalisation_state_round_trip():
    env_a = _env()
    algo = _ppo()
    assert algo.reward_normalizer is None  # unbound: created on the first update
    algo.iterate(env_a, 16)
    norm = algo.reward_normalizer
    assert norm.return_rms.count.item() == 16 * 8
    assert norm.return_rms.var.item() != 1.0 and torch.any(norm.ret != 0)
    before = copy.deepcopy(norm.state_dict())
    algo.iterate(env_a, 16)
    assert norm.return_rms.count.item() == 2 * 16 * 8
    assert not torch.equal(before["return_rms.var"], norm.return_rms.var)

    state = copy.deepcopy(algo.state_dict())
    assert "reward_normalizer" in state
    env_state = copy.deepcopy(env_a.state_dict())
    restored, env_b = _ppo(seed=5), _env()
    restored.load_state_dict(state)
    env_b.load_state_dict(env_state)
    expected = {k: v.clone() for k, v in algo.iterate(env_a, 16).items()}
    got = restored.iterate(env_b, 16)
    assert all(torch.equal(expected[k], got[k]) for k in expected), (expected, got)
    for key, value in algo.reward_normalizer.state_dict().items():
        assert torch.equal(restored.reward_normalizer.state_dict()[key], value)

    # Without the normaliser's state the same iteration learns from differently scaled rewards.
    fresh, env_c = _ppo(seed=5), _env()
    fresh.load_state_dict({k: v for k, v in state.items() if k != "reward_normalizer"})
    env_c.load_state_dict(env_state)
    assert not torch.equal(fresh.iterate(env_c, 16)["value_loss"], expected["value_loss"])


def test_ppo_normalised_rewards_change_the_update_not_the_logged_returns():
    out = {}
    for flag in (False, True):
        env = _env()
        out[flag] = _ppo(norm_reward=flag, env=env).iterate(num_steps=16)
    assert not torch.equal(out[True]["loss"], out[False]["loss"])
    assert not torch.equal(out[True]["value_loss"], out[False]["value_loss"])
    assert torch.equal(out[True]["episode_return"], out[False]["episode_return"])


@pytest.mark.parametrize("env_id, episodic", [("CartPole-v1", False), ("RussianRoulette-v0", True)])
def test_ppo_reward_normalisation_does_not_synchronise(env_id, episodic):
    from test_no_sync import forbid_host_sync

    env = make(env_id, num_envs=8, seed=1)
    torch.manual_seed(0)
    algo = PPO(policy_for_env(env.spec), PPOConfig(norm_reward=True, num_minibatches=2, update_epochs=1),
               1e-3, seed=3)
    g = torch.Generator().manual_seed(2)
    with forbid_host_sync():
        for _ in range(2):
            algo.iterate(env, 10, episodic=episodic, opponent_rng=g)
    assert algo.reward_normalizer.return_rms.count.item() > 0


def test_ppo_bound_normaliser_is_sized_by_the_env_and_checked():
    algo = _ppo(env=_env())
    assert algo.reward_normalizer is not None and algo.reward_normalizer.num_envs == 8
    with pytest.raises(ValueError, match="8 environments, not 4"):
        algo.iterate(make("CartPole-v1", num_envs=4, seed=0), 16)


def test_norm_reward_config_checks():
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="norm_reward_clip"):
            PPOConfig(norm_reward_clip=bad)
    with pytest.raises(ValueError, match="norm_reward"):
        update_policy(torch.nn.Linear(1, 1), None, None, PPOConfig(norm_reward=True))


def _pendulum_policy():
    env = make("Pendulum-v1", num_envs=1)
    torch.manual_seed(0)
    policy = policy_for_env(env.spec)
    # Means far beyond the +-2 torque bounds on both sides.
    torch.nn.init.normal_(policy.actor[-1].weight, std=5.0)
    return policy.eval(), env.spec


def _expected_clipped(policy, obs, low, high):
    with torch.no_grad():
        return policy.act(obs, deterministic=True).action.clamp(low, high)


@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:FutureWarning")
def test_export_clips_continuous_actions_to_the_bounds():
    policy, spec = _pendulum_policy()
    low, high = spec.action_low, spec.action_high
    assert (low, high) == ((-2.0,), (2.0,))
    obs = torch.randn(256, policy.obs_dim, generator=torch.Generator().manual_seed(1)) * 3
    with torch.no_grad():
        raw = policy.act(obs, deterministic=True).action
    assert (raw > 2).any() and (raw < -2).any()
    expected = _expected_clipped(policy, obs, low[0], high[0])

    extra = {"rl_gpu.json": ""}
    loaded = torch.jit.load(io.BytesIO(to_torchscript_bytes(policy, action_low=low, action_high=high)),
                            _extra_files=extra)
    action = loaded(obs)
    assert action.min() >= -2 and action.max() <= 2 and (action.abs() == 2).any()
    # The export computes tanh; the policy's CPU sigmoid form rounds like W h with h = 2 sigmoid(2z) - 1 summed
    # in float32, about 1e-7 of |W| * hidden, and these last-layer weights are deliberately huge (std 5).
    torch.testing.assert_close(action, expected, rtol=1e-4, atol=1e-4)
    info = json.loads(extra["rl_gpu.json"])
    assert info["action_low"] == [-2.0] and info["action_high"] == [2.0] and "clipped" in info["action"][3]
    # Without bounds the export stays unclipped.
    assert (torch.jit.load(io.BytesIO(to_torchscript_bytes(policy)))(obs).abs() > 2).any()

    if HAS_ORT:
        import onnxruntime as ort

        session = ort.InferenceSession(to_onnx_bytes(policy, dynamo=False, action_low=low, action_high=high))
        (onnx_action,) = session.run(None, {"obs": obs.numpy()})
        torch.testing.assert_close(torch.from_numpy(onnx_action), expected, rtol=1e-4, atol=1e-4)


def test_bounds_are_refused_for_discrete_policies():
    with pytest.raises(ExportError, match="discrete"):
        DeterministicPolicy(ActorCritic(obs_dim=4, num_actions=2), [-1.0], [1.0])


def _checkpoint(path, policy, env_id):
    save_checkpoint(path, {"env_id": env_id, "policy_config": policy.config(),
                           "algorithm": {"policy": policy.state_dict()}})
    return path


@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:FutureWarning")
def test_cli_clip_actions(tmp_path, capsys):
    policy, _ = _pendulum_policy()
    ckpt = _checkpoint(tmp_path / "pendulum.pt", policy, "Pendulum-v1")
    out = tmp_path / "p.pt"
    assert rl_gpu_main(["export", str(ckpt), "--output", str(out), "--clip-actions"]) == 0
    assert "actions clipped to low [-2.0], high [2.0]" in capsys.readouterr().out
    obs = torch.randn(64, policy.obs_dim) * 3
    torch.testing.assert_close(torch.jit.load(str(out))(obs), _expected_clipped(policy, obs, -2.0, 2.0),
                               rtol=1e-5, atol=1e-5)

    discrete = _checkpoint(tmp_path / "cartpole.pt", ActorCritic(obs_dim=4, num_actions=2), "CartPole-v1")
    with pytest.raises(SystemExit) as exit_info:
        rl_gpu_main(["export", str(discrete), "--output", str(tmp_path / "d.pt"), "--clip-actions"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rl-gpu export: error:") and "discrete" in err and "\n" not in err
    assert not (tmp_path / "d.pt").exists()
