"""What SAC and TD3 share: the batched critic ensemble is E separate networks, an iteration never synchronises
with the host, a state dict resumes exactly (and a checkpoint without the buffer says so), compiled and
graph-captured iterations equal eager ones, the policy exports with its normalisation, and tasks the algorithms
cannot train are refused with the reason."""

import copy
import io
import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from rl_gpu.algos.base import Setup
from rl_gpu.collect.transitions import correlated
from rl_gpu.algos.registry import make_algorithm
from rl_gpu.algos.sac import SACConfig
from rl_gpu.algos.td3 import TD3Config
from rl_gpu.envs.registry import make
from rl_gpu.interop.export import DeterministicPolicy, to_torchscript_bytes
from rl_gpu.interop.policy_io import rebuild_policy
from rl_gpu.nn.ensemble import EnsembleMLP
from test_no_sync import forbid_host_sync

CONFIGS = {"sac": SACConfig, "td3": TD3Config}


def _algo(name, device="cpu", compile="off", seed=1, env_seed=0, num_steps=4, **config):
    env = make("Pendulum-v1", num_envs=4, seed=env_seed, device=device, validate_actions=False)
    torch.manual_seed(seed)
    settings = dict(learning_starts=32, batch_size=16, buffer_size=256, n_step=2, policy_frequency=2,
                    noise_correlation=0.5)
    settings.update(config)
    if name == "sac":
        settings.pop("policy_frequency")
    setup = Setup(env=env, seed=seed, hidden_sizes=(16, 16), num_steps=num_steps, normalize_obs=True,
                  compile=compile)
    return make_algorithm(name, setup, CONFIGS[name](**settings)), env


def _floats(metrics):
    return {k: float(v) for k, v in metrics.items()}


def test_the_ensemble_is_separate_networks():
    torch.manual_seed(0)
    ensemble = EnsembleMLP(3, 5, (7, 6))
    x = torch.randn(11, 5)
    out = ensemble(x)
    assert out.shape == (3, 11)
    for e in range(3):
        h = x
        for i, layer in enumerate(ensemble.layers):
            h = h @ layer.weight[e] + layer.bias[e, 0]
            h = F.relu(h) if i < len(ensemble.layers) - 1 else h
        torch.testing.assert_close(out[e], h[:, 0])
    torch.testing.assert_close(ensemble(x, members=1), out[:1])
    # Detached weights: the input still takes gradients, the weights none.
    xg = x.clone().requires_grad_(True)
    ensemble(xg, detached=True).sum().backward()
    assert xg.grad is not None and all(p.grad is None for p in ensemble.parameters())
    # Each member starts as nn.Linear would: uniform within 1/sqrt(fan_in).
    assert ensemble.layers[0].weight.abs().max() <= 1 / math.sqrt(5)


@pytest.mark.parametrize("name", ["sac", "td3"])
def test_iterations_do_not_synchronise(name):
    algo, _ = _algo(name, learning_starts=16)
    algo.iterate()  # random actions, the first updates
    with forbid_host_sync():
        for _ in range(3):
            metrics = algo.iterate()
            algo.set_progress(0.5)
    assert algo.updates_done == 16 and all(math.isfinite(v) for v in _floats(metrics).values())
    with forbid_host_sync():
        stats = algo.update(3)  # updates alone, outside an iteration
    assert algo.updates_done == 19 and set(stats) == set(algo.STATS)
    empty, _ = _algo(name)
    with pytest.raises(ValueError, match="buffer is empty"):
        empty.update(1)


def _roundtrip(state):
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("name", ["sac", "td3"])
def test_a_state_dict_resumes_exactly(name):
    algo, env = _algo(name)
    for _ in range(3):
        algo.iterate()
    state, env_state = _roundtrip(algo.state_dict()), _roundtrip(env.state_dict())
    straight = [_floats(algo.iterate()) for _ in range(3)]
    other, other_env = _algo(name, seed=9, env_seed=9)
    other.load_state_dict(state)
    other_env.load_state_dict(env_state)
    assert other.resume_notes == ()
    resumed = [_floats(other.iterate()) for _ in range(3)]
    assert resumed == straight
    for a, b in zip(algo.state_dict()["policy"].values(), other.state_dict()["policy"].values()):
        assert torch.equal(a, b)
    for a, b in zip(algo.critic.parameters(), other.critic.parameters()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", ["sac", "td3"])
def test_a_checkpoint_without_the_buffer_refills_it_and_says_so(name):
    algo, _ = _algo(name, checkpoint_buffer=False)
    for _ in range(3):
        algo.iterate()
    state = algo.state_dict()
    assert "replay" not in state and algo.updates_done == 8
    other, _ = _algo(name, checkpoint_buffer=False)
    other.load_state_dict(state)
    assert len(other.buffer) == 0 and "no replay buffer" in other.resume_notes[0]
    assert "32 transitions" in other.resume_notes[0]
    other.iterate()  # 16 transitions held: below learning_starts, no update
    assert other.updates_done == 8
    other.iterate()  # 32 held: learning again, with the policy (not random actions: steps_done counts on)
    assert other.updates_done == 12 and other.steps_done == 80


def test_tasks_the_algorithms_cannot_train_are_refused():
    for env_id, needle in (("CartPole-v1", "needs continuous actions; CartPoleEnv has 2 discrete actions"),
                           ("RussianRoulette-v0", "needs continuous actions")):
        env = make(env_id, num_envs=2)
        for name in ("sac", "td3"):
            with pytest.raises(ValueError, match=needle):
                make_algorithm(name, Setup(env=env, seed=0), CONFIGS[name]())
    env = make("Pendulum-v1", num_envs=4)
    with pytest.raises(ValueError, match="whole number"):
        make_algorithm("sac", Setup(env=env, seed=0, num_steps=3), SACConfig(updates_per_step=0.5))
    with pytest.raises(ValueError, match="exceeds the replay buffer's 2 rows"):
        make_algorithm("td3", Setup(env=env, seed=0, num_steps=3), TD3Config(buffer_size=8))


@pytest.mark.parametrize("name", ["sac", "td3"])
def test_the_policy_exports_and_reloads_with_its_normalisation(name):
    algo, _ = _algo(name)
    for _ in range(3):
        algo.iterate()
    policy = algo.policy
    assert float(policy.obs_rms.count) > 0
    obs = torch.randn(64, 3) * 3
    with torch.no_grad():
        want = policy.act(obs, deterministic=True).action
        model = DeterministicPolicy(policy)
        torch.testing.assert_close(model(obs), want, atol=1e-6, rtol=1e-5)
    scripted = torch.jit.load(io.BytesIO(to_torchscript_bytes(policy)))
    torch.testing.assert_close(scripted(obs), want, atol=1e-6, rtol=1e-5)
    assert model.describe()["action"][3] == "squashed mean, inside the action bounds"
    rebuilt = rebuild_policy(policy.config(), policy.state_dict(), "best.pt")
    assert type(rebuilt) is type(policy)
    torch.testing.assert_close(rebuilt.act(obs, deterministic=True).action, want)
    bad = {**policy.config(), "action_low": ["x"]}
    with pytest.raises(ValueError, match="action_low is .* expected a list of finite numbers"):
        rebuild_policy(bad, policy.state_dict(), "best.pt")


def _compiled_matches_eager(name, device, modes):
    runs = {}
    for mode in modes:
        algo, _ = _algo(name, device=device, compile=mode, learning_starts=16)
        metrics = [_floats(algo.iterate()) for _ in range(4)]
        params = [p.detach().clone() for p in [*algo.policy.parameters(), *algo.critic.parameters()]]
        runs[mode] = (metrics, params, algo.buffer.obs.clone())
    base_metrics, base_params, base_obs = runs[modes[0]]
    for mode in modes[1:]:
        metrics, params, obs = runs[mode]
        for a, b in zip(base_metrics, metrics):
            for k in a:
                assert math.isclose(a[k], b[k], rel_tol=1e-3, abs_tol=1e-5), (mode, k, a[k], b[k])
        for x, y in zip(base_params, params):
            torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(base_obs, obs, atol=1e-5, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sac", "td3"])
def test_inductor_matches_eager_on_cpu(name):
    _compiled_matches_eager(name, "cpu", ("off", "inductor"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", ["sac", "td3"])
def test_cuda_modes_match_eager(name):
    _compiled_matches_eager(name, "cuda", ("off", "inductor", "cudagraphs"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("mode", ["off", "cudagraphs"])
@pytest.mark.parametrize("name", ["sac", "td3"])
def test_cuda_iterations_under_sync_debug_mode_error(name, mode):
    algo, _ = _algo(name, device="cuda", compile=mode, learning_starts=16)
    for _ in range(4):  # random actions, then learning; the first calls of each graph warm up and capture
        algo.iterate()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            algo.set_learning_rate(5e-4)
            algo.iterate()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


def test_correlated_noise_is_a_unit_variance_ar1_process():
    g = torch.Generator().manual_seed(0)
    previous, steps = torch.zeros(2000), []
    for _ in range(400):
        previous = correlated(torch.randn(2000, generator=g), previous, 0.9)
        steps.append(previous)
    x = torch.stack(steps[100:])  # past the start from zeros
    assert x.var().item() == pytest.approx(1.0, abs=0.03)
    lag1 = (x[1:] * x[:-1]).mean() / x.var()
    assert lag1.item() == pytest.approx(0.9, abs=0.01)
    fresh = torch.randn(5)
    assert correlated(fresh, torch.ones(5), 0.0) is fresh


@pytest.mark.parametrize("correlation", [0.0, 0.9])
def test_exploration_follows_the_correlated_noise(correlation):
    algo, _ = _algo("td3", learning_starts=0, noise_correlation=correlation, exploration_noise=0.1, num_steps=256,
                    updates_per_step=1 / 256, buffer_size=2048)
    before = algo.initial_policy()  # the policy that collects (updates come after the collection)
    algo.iterate()
    collected = algo.collector.storage
    det = before.act(collected.obs.flatten(0, 1), deterministic=True).action.view_as(collected.action)
    # TD3 explores around its deterministic action: the difference is the scaled noise (2 x 0.1 x eps; Pendulum's
    # half-range is 2), whose consecutive steps are as correlated as configured.
    noise = (collected.action - det)[..., 0] / 0.2  # [T, N]
    lag1 = (noise[1:] * noise[:-1]).mean() / (noise**2).mean()
    assert lag1.item() == pytest.approx(correlation, abs=0.1)


def test_the_deterministic_action_is_the_squashed_mean():
    algo, _ = _algo("sac")
    policy = algo.policy
    obs = torch.randn(8, 3)
    mean, _ = policy.heads(policy.preprocess(obs))
    torch.testing.assert_close(policy.act(obs, deterministic=True).action, 2.0 * torch.tanh(mean))
    assert isinstance(policy, nn.Module) and policy.value(obs).abs().sum() == 0
    # initial_policy is a frozen copy: training does not move it.
    frozen = algo.initial_policy()
    before = copy.deepcopy(frozen.state_dict())
    for _ in range(9):
        algo.iterate()
    assert all(torch.equal(before[k], v) for k, v in frozen.state_dict().items())


@pytest.mark.parametrize("name", ["sac", "td3"])
def test_an_l2_anchor_holds_the_actor_in_its_steps_only(name):
    """Continual learning's L2 penalty on an off-policy actor (rl-gpu continual --method l2 --algo sac|td3): a
    strong anchor keeps the actor at its reference while the critic learns on; without it the actor moves."""
    from rl_gpu.algos.anchor import make_anchor, trainable

    moved = {}
    for coef in (0.0, 1e6):
        algo, _ = _algo(name)
        for _ in range(10):  # past learning_starts: updates run
            algo.iterate()
        actor = [p.detach().clone() for p in trainable(algo.policy)]
        critic = [p.detach().clone() for p in algo.networks()["critic"].parameters()]
        if coef:
            algo.anchor = make_anchor("l2", algo.policy, coef, [torch.ones_like(p) for p in actor])
        for _ in range(5):
            algo.iterate()
        moved[coef] = max(float((p - a).abs().max()) for p, a in zip(trainable(algo.policy), actor))
        assert any(not torch.equal(p, c) for p, c in zip(algo.networks()["critic"].parameters(), critic))
    # Adam's steps are about the learning rate whatever the gradient's size: held, the actor stays within a few of
    # them of its reference.
    assert moved[0.0] > 1e-2 and moved[1e6] < 1e-3, moved
