"""``--policy tanh_gaussian``: PPO's actions squashed into the bounds by tanh (rl_gpu/nn/tanh_gaussian.py)."""

from __future__ import annotations

import io

import pytest
import torch

from rl_gpu.core.types import EnvSpec
from rl_gpu.nn.kinds import build_policy
from rl_gpu.nn.tanh_gaussian import TanhGaussianActorCritic, tanh_gaussian_for_env

LOW, HIGH = [-2.0, 0.0, -0.5], [2.0, 1.0, 1.5]


def _policy(log_std: float = 0.0) -> TanhGaussianActorCritic:
    torch.manual_seed(0)
    policy = TanhGaussianActorCritic(5, 3, LOW, HIGH, (16, 16), init_log_std=log_std)
    with torch.no_grad():  # a mean far from 0, so the samples reach the flat ends of tanh
        policy.actor[-1].bias.copy_(torch.tensor([0.5, -1.0, 2.0]))
    return policy


def test_the_log_density_is_that_of_the_affine_tanh_of_a_gaussian():
    from torch.distributions import AffineTransform, Normal, TanhTransform, TransformedDistribution

    policy = _policy(log_std=-0.5)
    obs = torch.randn(256, 5)
    out = policy.act(obs, generator=torch.Generator().manual_seed(1))
    low, high = torch.tensor(LOW), torch.tensor(HIGH)
    assert bool(((out.action > low) & (out.action < high)).all())
    mean, _ = policy(obs)
    reference = TransformedDistribution(Normal(mean, policy.log_std.exp()),
                                        [TanhTransform(), AffineTransform((high + low) / 2, (high - low) / 2)])
    expected = reference.log_prob(out.action).sum(-1)
    inside = ((out.action - (high + low) / 2).abs() / ((high - low) / 2) < 0.999).all(-1)
    assert int(inside.sum()) > 200
    torch.testing.assert_close(out.log_prob[inside], expected[inside], rtol=1e-4, atol=1e-4)


def test_a_fresh_update_scores_every_stored_action_as_it_was_sampled_even_at_the_bounds():
    policy = _policy(log_std=2.5)  # wide: many samples round to the bounds
    obs = torch.randn(512, 5)
    out = policy.act(obs, generator=torch.Generator().manual_seed(2))
    at_bound = (out.action == torch.tensor(LOW)) | (out.action == torch.tensor(HIGH))
    assert bool(at_bound.any())
    log_prob, entropy, value = policy.evaluate(obs, out.action)
    assert torch.equal(log_prob, out.log_prob)  # the ratio starts at exactly 1
    assert bool(torch.isfinite(log_prob).all()) and bool(torch.isfinite(entropy).all())
    assert torch.equal(value, out.value)


def test_the_entropy_estimate_is_unbiased_and_stops_growing_with_the_log_std():
    policy = _policy(log_std=0.3)
    obs = torch.randn(1, 5).expand(200_000, 5)
    out = policy.act(obs, generator=torch.Generator().manual_seed(3))
    _, entropy, _ = policy.evaluate(obs, out.action)
    # Both are one-sample estimates of the same entropy: E[estimate] = H = -E[log p(a)].
    assert abs(float(entropy.detach().mean()) + float(out.log_prob.detach().mean())) < 0.02

    for log_std, sign in [(-1.0, 1.0), (3.0, -1.0)]:
        policy = _policy(log_std)
        out = policy.act(obs[:4096], generator=torch.Generator().manual_seed(4))
        policy.evaluate(obs[:4096], out.action)[1].mean().backward()
        assert float(policy.log_std.grad.sum()) * sign > 0  # narrow: the bonus widens it; wide: it narrows it


def test_checkpoint_config_export_and_deterministic_action():
    policy = _policy()
    rebuilt = build_policy(policy.config())
    rebuilt.load_state_dict(policy.state_dict())
    obs = torch.randn(64, 5)
    action = policy.act(obs, deterministic=True).action
    assert torch.equal(rebuilt.act(obs, deterministic=True).action, action)
    mean, _ = policy(obs)
    torch.testing.assert_close(action, torch.tensor([0.0, 0.5, 0.5]) + torch.tensor([2.0, 0.5, 1.0]) * mean.tanh())
    exported = policy.export_module()
    torch.testing.assert_close(exported(obs), action)
    from rl_gpu.interop.export import to_torchscript_bytes

    scripted = torch.jit.load(io.BytesIO(to_torchscript_bytes(policy)))
    torch.testing.assert_close(scripted(obs), action)


def test_what_it_cannot_act_on_is_refused():
    spec = EnvSpec(obs_shape=(4,), action_shape=(2,), num_actions=0)
    with pytest.raises(ValueError, match="needs the environment's action bounds"):
        tanh_gaussian_for_env(spec)
    with pytest.raises(ValueError, match="finite bounds with low < high"):
        TanhGaussianActorCritic(4, 2, [-1.0, 1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="2 entries each"):
        TanhGaussianActorCritic(4, 2, [-1.0], [1.0])


TINY = ["--num-envs", "16", "--num-steps", "32", "--max-updates", "2", "--eval-every", "1",
        "--eval-episodes", "4", "--final-eval-episodes", "4", "--solve-threshold", "1e9", "--min-updates", "1",
        "--device", "cpu", "--quiet"]


def test_trains_evaluates_and_loads_from_the_command_line(tmp_path, call_main):
    import rl_gpu
    from rl_gpu.cli.evaluate import main as evaluate
    from rl_gpu.cli.train import main as train

    code, _, err = call_main(train, "--env", "Pendulum-v1", *TINY, "--policy", "tanh_gaussian",
                             "--output", tmp_path / "run")
    assert code == 1, err  # the goal is out of reach: every file written, exit 1
    best = tmp_path / "run" / "seed-11" / "best.pt"
    code, out, err = call_main(evaluate, best, "--episodes", "4", "--device", "cpu")
    assert code == 0 and "mean return" in out, err
    loaded = rl_gpu.load(best)
    assert isinstance(loaded.policy, TanhGaussianActorCritic)
    action = loaded.act(torch.randn(8, 3))
    assert bool((action.abs() <= 2.0).all())
    code, _, err = call_main(train, "--env", "CartPole-v1", *TINY, "--policy", "tanh_gaussian",
                             "--output", tmp_path / "refused")
    assert code == 2 and "takes continuous actions" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "refused").exists()
