"""Full-width NeuRD (:mod:`rl_gpu.algos.neurd`): its step is NeuRD's logit update, its average policy falls in
exploitability measured by OpenSpiel, the average-policy network follows that average, a resume is exact, and
games or settings it cannot run are refused with the reason."""

import numpy as np
import pytest
import torch

from rl_gpu.algos.base import Setup
from rl_gpu.algos.neurd import NeuRD, NeuRDConfig
from rl_gpu.envs.cartpole import CartPoleEnv
from rl_gpu.envs.leduc import LeducHoldem
from rl_gpu.envs.roulette import RussianRouletteVectorized


def _neurd(seed=0, learning_rate=0.01, **config):
    torch.manual_seed(seed)
    return NeuRD.from_setup(Setup(env=LeducHoldem(1), seed=seed, learning_rate=learning_rate, hidden_sizes=(32, 32)),
                            NeuRDConfig(**config))


def _probs(net, algo):
    with torch.no_grad():
        logits = net.actor(algo.tree.obs).double().masked_fill(~algo.tree.mask, float("-inf"))
    return torch.softmax(logits, dim=1)


def _exploitability(algo, probs):
    pyspiel = pytest.importorskip("pyspiel")
    from open_spiel.python import policy as policy_lib
    from open_spiel.python.algorithms import exploitability

    game = pyspiel.load_game("leduc_poker")
    table = policy_lib.TabularPolicy(game)
    row = {tuple(obs.tolist()): i for i, obs in enumerate(algo.tree.obs)}
    order = [row[tuple(state.information_state_tensor())] for state in table.states]
    table.action_probability_array[:] = probs[order].numpy()
    return exploitability.exploitability(game, table)


def test_one_step_moves_each_logit_by_its_advantage():
    algo = _neurd(learning_rate=1.0)
    head = algo.current.actor[-1]
    before = algo.current.actor(algo.tree.obs).detach().double()
    tree = algo.tree
    pi = _probs(algo.current, algo)
    values = tree.evaluate(pi)
    advantage = (values.q - (pi * values.q).sum(1, keepdim=True)) * tree.mask
    # Only the last layer's bias moves, so every logit row moves by the same vector: the summed gradient.
    for p in algo.current.actor.parameters():
        p.requires_grad_(p is head.bias)
    algo.iterate()
    moved = algo.current.actor(algo.tree.obs).detach().double() - before
    expected = (advantage - pi * advantage.sum(1, keepdim=True)).sum(0)  # d(loss)/d(logits) under pi fixed
    torch.testing.assert_close(moved[0], expected, rtol=1e-4, atol=1e-6)


@pytest.mark.slow  # long: keeps the default suite under 8 minutes on 2 cores (make test-slow runs it)
def test_the_average_policy_and_its_network_fall_in_exploitability():
    algo = _neurd()
    start = _exploitability(algo, _probs(algo.policy, algo))
    for _ in range(600):
        metrics = algo.iterate()
    average_table = _exploitability(algo, algo.average_target())
    average_net = _exploitability(algo, _probs(algo.policy, algo))
    assert start > 2.0  # near uniform: 2.3736
    assert average_table < 0.5 and average_net < 0.8, (average_table, average_net)  # measured: 0.40, 0.61
    assert metrics["average_kl"].item() < 0.05
    assert metrics["transitions"].item() == algo.tree.num_transitions
    assert np.isfinite(metrics["policy_loss"].item())


def test_a_resume_is_exact():
    straight = _neurd()
    for _ in range(6):
        straight.iterate()
    first = _neurd()
    for _ in range(3):
        first.iterate()
    state = first.state_dict()
    second = _neurd(seed=5)  # other initial weights: everything must come from the state
    second.load_state_dict(state)
    for _ in range(3):
        second.iterate()
    for a, b in zip((*straight.current.parameters(), *straight.policy.parameters()),
                    (*second.current.parameters(), *second.policy.parameters())):
        assert torch.equal(a, b)
    assert torch.equal(straight.average, second.average) and second.iteration == 6


def test_the_learning_rate_anneals_when_asked():
    algo = NeuRD.from_setup(Setup(env=LeducHoldem(1), seed=0, learning_rate=0.02, anneal_lr=True), NeuRDConfig())
    algo.set_progress(0.25)
    assert algo.iterate()["learning_rate"].item() == pytest.approx(0.015)


@pytest.mark.parametrize("env, reason", [
    (RussianRouletteVectorized(1), "does not list its chance outcomes"),
    (CartPoleEnv(1), "not a two-player game"),
])
def test_games_it_cannot_enumerate_are_refused(env, reason):
    with pytest.raises(ValueError, match=f"--algo neurd needs .*{reason}"):
        NeuRD.from_setup(Setup(env=env, seed=0), NeuRDConfig())


@pytest.mark.parametrize("setup, reason", [({"normalize_obs": True}, "--normalize-obs"),
                                           ({"num_steps": 8}, "--num-steps")])
def test_settings_that_do_not_apply_are_refused(setup, reason):
    with pytest.raises(ValueError, match=reason):
        NeuRD.from_setup(Setup(env=LeducHoldem(1), seed=0, **setup), NeuRDConfig())


@pytest.mark.parametrize("bad", [{"logit_threshold": 0.0}, {"average_lr": -1.0}, {"average_steps": 0},
                                 {"average": "cubic"}])
def test_bad_hyper_parameters_are_refused(bad):
    with pytest.raises(Exception, match="NeuRD hyper-parameter"):
        NeuRDConfig(**bad)
