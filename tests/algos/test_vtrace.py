"""V-trace (rl_gpu.data.vtrace) against a hand-computed example, a scalar Python reference of its recursion, the
on-policy limit (GAE's lambda-returns) and the truncation levels' effect; APPO without lag against PPO with GAE(1);
APPO and IMPALA from the command line."""

import math

import pytest
import torch

from rl_gpu.data.advantages import compute_gae
from rl_gpu.data.vtrace import compute_vtrace


def _scalar_vtrace(log_rho, r, v, term, trunc, fv, boot, gamma, lam, rho_bar, c_bar):
    """One column, written as IMPALA's definition reads, in plain floats."""
    n = len(r)
    vs, adv = [0.0] * n, [0.0] * n
    for t in reversed(range(n)):
        ratio = math.exp(log_rho[t])
        rho, c = min(rho_bar, ratio), lam * min(c_bar, ratio)
        end = term[t] or trunc[t]
        after = 0.0 if term[t] else fv[t] if trunc[t] else boot if t == n - 1 else v[t + 1]
        later = 0.0 if end or t == n - 1 else vs[t + 1] - v[t + 1]
        vs[t] = v[t] + rho * (r[t] + gamma * after - v[t]) + gamma * c * later
        next_vs = after if end or t == n - 1 else vs[t + 1]
        adv[t] = rho * (r[t] + gamma * next_vs - v[t])
    return adv, vs


def test_a_hand_computed_example():
    # gamma 0.5, ratios 2 and 0.5, rho_bar 1.5, c_bar 1; V = 1 everywhere, bootstrap 4:
    # t=1: rho .5, vs1 = 1 + .5 (2 + .5*4 - 1) = 2.5;   t=0: rho 1.5, c 1, vs0 = 1 + 1.5 (1 + .5*1 - 1) + .5 (2.5 - 1) = 2.5
    # advantages: 1.5 (1 + .5*2.5 - 1) = 1.875 and .5 (2 + .5*4 - 1) = 1.5
    log_rho = torch.tensor([[math.log(2.0)], [math.log(0.5)]])
    no = torch.zeros(2, 1, dtype=torch.bool)
    adv, vs = compute_vtrace(log_rho, torch.tensor([[1.0], [2.0]]), torch.ones(2, 1), no, no, torch.zeros(2, 1),
                             torch.tensor([4.0]), 0.5, 1.0, rho_bar=1.5, c_bar=1.0)
    assert torch.allclose(vs[:, 0], torch.tensor([2.5, 2.5])) and torch.allclose(adv[:, 0], torch.tensor([1.875, 1.5]))


def _batch(t=24, n=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    term = torch.rand(t, n, generator=g) < 0.08
    trunc = (torch.rand(t, n, generator=g) < 0.08) & ~term
    return dict(reward=torch.randn(t, n, generator=g), value=torch.randn(t, n, generator=g), terminated=term,
                truncated=trunc, final_value=torch.randn(t, n, generator=g), bootstrap_value=torch.randn(n, generator=g))


@pytest.mark.parametrize("lam, rho_bar, c_bar, spread", [(1.0, 1.0, 1.0, 1.0), (0.9, 1.0, 1.0, 2.0),
                                                         (1.0, 2.0, 0.5, 1.5), (0.7, 10.0, 10.0, 0.5)])
def test_the_recursion_equals_the_scalar_reference(lam, rho_bar, c_bar, spread):
    b = _batch()
    log_rho = torch.randn(b["reward"].shape, generator=torch.Generator().manual_seed(1)) * spread
    adv, vs = compute_vtrace(log_rho, *b.values(), 0.97, lam, rho_bar, c_bar)
    for col in range(b["reward"].shape[1]):
        ref_adv, ref_vs = _scalar_vtrace(*(x[:, col].tolist() for x in (log_rho, b["reward"], b["value"])),
                                         *(x[:, col].tolist() for x in (b["terminated"], b["truncated"],
                                                                        b["final_value"])),
                                         float(b["bootstrap_value"][col]), 0.97, lam, rho_bar, c_bar)
        assert torch.allclose(vs[:, col], torch.tensor(ref_vs), atol=1e-5)
        assert torch.allclose(adv[:, col], torch.tensor(ref_adv), atol=1e-5)


@pytest.mark.parametrize("lam", [1.0, 0.9, 0.0])
def test_on_policy_the_targets_are_the_lambda_returns(lam):
    b = _batch(seed=3)
    adv, vs = compute_vtrace(torch.zeros_like(b["reward"]), *b.values(), 0.99, lam)
    gae_adv, returns = compute_gae(*b.values(), 0.99, lam)
    assert torch.allclose(vs, returns, atol=1e-5)
    if lam == 1.0:  # the one-step advantage on the n-step return is then GAE(1)'s advantage
        assert torch.allclose(adv, gae_adv, atol=1e-5)


def test_the_truncation_levels():
    b = _batch(seed=5)
    on_adv, on_vs = compute_vtrace(torch.zeros_like(b["reward"]), *b.values(), 0.99)
    # Every ratio above 1: truncated at 1, V-trace is the on-policy target exactly.
    high = torch.full_like(b["reward"], math.log(3.0))
    adv, vs = compute_vtrace(high, *b.values(), 0.99, rho_bar=1.0, c_bar=1.0)
    assert torch.equal(vs, on_vs) and torch.equal(adv, on_adv)
    # Let rho through (rho_bar 5): the temporal differences are weighted by 3, the traces still cut at 1.
    _, vs3 = compute_vtrace(high, *b.values(), 0.99, rho_bar=5.0, c_bar=1.0)
    assert not torch.allclose(vs3, on_vs)
    single = b["terminated"][0]  # a row that ends at once: vs - V is its one weighted difference
    delta = b["reward"][0] - b["value"][0]
    assert torch.allclose((vs3 - b["value"])[0][single], 3 * delta[single], atol=1e-5)
    # Ratios near 0 stop the correction: vs -> V and advantages -> 0.
    low = torch.full_like(b["reward"], -30.0)
    adv0, vs0 = compute_vtrace(low, *b.values(), 0.99)
    assert torch.allclose(vs0, b["value"], atol=1e-6) and adv0.abs().max() < 1e-6


def test_appo_without_lag_is_ppo_with_gae_of_lambda_one():
    import copy

    from rl_gpu import make
    from rl_gpu.algos.ppo.algorithm import PPO
    from rl_gpu.algos.ppo.config import PPOConfig
    from rl_gpu.algos.vtrace.algorithm import APPO
    from rl_gpu.algos.vtrace.config import APPOConfig
    from rl_gpu.nn.actor_critic import policy_for_env

    torch.manual_seed(0)
    envs = [make("CartPole-v1", num_envs=8, seed=2) for _ in range(2)]
    policy = policy_for_env(envs[0].spec, hidden_sizes=(16,), normalize_obs=True)
    settings = dict(gae_lambda=1.0, update_epochs=2, num_minibatches=4)
    ppo = PPO(copy.deepcopy(policy), PPOConfig(**settings), 3e-4, seed=5, env=envs[0], num_steps=16)
    appo = APPO(copy.deepcopy(policy), APPOConfig(**settings), 3e-4, seed=5, env=envs[1], num_steps=16)
    for _ in range(3):
        a, b = ppo.iterate(), appo.iterate()
        assert torch.allclose(a.learner["loss"], b.learner["loss"], atol=1e-5)
    for p, q in zip(ppo.policy.parameters(), appo.policy.parameters()):
        assert torch.allclose(p, q, atol=1e-5)


@pytest.mark.parametrize("algo", ["impala"])  # APPO's run: tests/training/test_async_resume.py
def test_appo_and_impala_train_evaluate_and_export_from_the_command_line(algo, call_main, tmp_path):
    from rl_gpu.cli.evaluate import main as evaluate_main
    from rl_gpu.cli.export import main as export_main
    from rl_gpu.cli.train import main as train_main

    run = tmp_path / "run"
    code, out, err = call_main(train_main, "--env", "Pendulum-v1", "--algo", algo, "--device", "cpu",
                               "--num-envs", "16", "--num-steps", "16", "--max-updates", "2", "--min-updates", "2",
                               "--eval-episodes", "2", "--final-eval-episodes", "2", "--output", run, "--quiet")
    assert code in (0, 1) and (run / "seed-11" / "best.pt").exists(), err
    code, out, err = call_main(evaluate_main, run / "seed-11" / "best.pt", "--episodes", "2")
    assert code == 0 and "policy:" in out, err
    code, out, err = call_main(export_main, run / "seed-11" / "best.pt", "--output", tmp_path / "a.onnx")
    assert code == 0 and (tmp_path / "a.onnx").exists(), err


def test_the_command_line_refuses_what_v_trace_cannot_use(call_main, tmp_path):
    from rl_gpu.cli.train import main as train_main

    code, out, err = call_main(train_main, "--algo", "impala", "--clip-coef", "0.3", "--output", tmp_path / "a")
    assert code == 2 and "does not use --clip-coef" in err
    code, out, err = call_main(train_main, "--algo", "appo", "--rho-bar", "0", "--output", tmp_path / "b")
    assert code == 2 and "rho_bar" in err
    code, out, err = call_main(train_main, "--env", "LeducHoldem-v0", "--algo", "appo", "--output", tmp_path / "c")
    assert code == 2 and "single-agent tasks" in err and not (tmp_path / "c").exists()
