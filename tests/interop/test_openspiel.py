"""OpenSpiel interop: a network read out as OpenSpiel's tabular policy of ``leduc_poker`` information state by
information state, OpenSpiel's exploitability of it, and the library's own exact best response agreeing with
OpenSpiel's on Leduc (whose bets give private cards away)."""

from __future__ import annotations

import sys

import pytest
import torch

from rl_gpu.core.errors import UsageError
from rl_gpu.envs import make
from rl_gpu.envs.exploitability import best_response
from rl_gpu.envs.leduc import LeducHoldem
from rl_gpu.envs.testing import inner_row, sample_actions
from rl_gpu.interop import openspiel as interop
from rl_gpu.interop.exploitability import has_exploitability, measure_exploitability
from rl_gpu.nn.actor_critic import ActorCritic, UniformRandomPolicy
from rl_gpu.nn.probabilities import action_probabilities

pytest.importorskip("pyspiel", reason="needs open_spiel (pip install 'rl-gpu[games]')")

from open_spiel.python import policy as policy_lib
from open_spiel.python.algorithms import exploitability as openspiel_exploitability

from rl_gpu.envs.testing.openspiel_reference import (
    OpenSpielLeduc,
    all_deals,
    leduc_game,
    leduc_to_reference,
)


def network(seed: int, scale: float = 30.0) -> ActorCritic:
    torch.manual_seed(seed)
    policy = ActorCritic(30, 3, hidden_sizes=(16,))
    with torch.no_grad():
        policy.actor[-1].weight.mul_(scale)  # far from uniform: bets depend on the cards
    return policy


def test_uniform_policy_read_out_of_a_network_has_openspiels_uniform_exploitability():
    game = leduc_game()
    expected = openspiel_exploitability.exploitability(game, policy_lib.UniformRandomPolicy(game))
    flat = ActorCritic(30, 3, hidden_sizes=(16,))
    torch.nn.init.zeros_(flat.actor[-1].weight)
    torch.nn.init.zeros_(flat.actor[-1].bias)
    result = measure_exploitability(LeducHoldem, flat)
    assert result.value == pytest.approx(expected, abs=1e-9) and result.unit == "chips per game"
    assert sum(result.best_response) / 2 == pytest.approx(expected, abs=1e-9)
    table = interop.tabular_policy(game, action_probabilities(UniformRandomPolicy()))
    assert openspiel_exploitability.exploitability(game, table) == pytest.approx(expected, abs=1e-12)
    assert expected == pytest.approx(2.373611111, abs=1e-6)


def test_the_tabular_policy_is_the_network_on_the_environments_observations():
    """Play random games in the tensor environment; at every decision, OpenSpiel's state rebuilt from the row
    has, in the tabular policy, exactly the network's probabilities on the row's observation."""
    policy = network(0)
    probs = action_probabilities(policy)
    table = interop.tabular_policy(leduc_game(), probs)
    env = LeducHoldem(32, seed=1)
    result, generator, checked = env.reset(), torch.Generator().manual_seed(2), 0
    for _ in range(12):
        expected = probs(result.obs, result.action_mask)
        for row in range(env.num_envs):
            reference = OpenSpielLeduc()
            reference.set_state(leduc_to_reference(inner_row(env.state.inner, row)))
            got = table.action_probabilities(reference.state)
            assert [got.get(a, 0.0) for a in range(3)] == pytest.approx(expected[row].tolist(), abs=1e-6)
            checked += 1
        result = env.step(sample_actions(env, result.action_mask, generator))
    assert checked == 12 * 32


def test_own_best_response_agrees_with_openspiels_on_leduc():
    """The library's solver (beliefs by Bayes over the 120 deals, given the network's bets) and OpenSpiel's
    best response find the same values for a policy whose bets reveal its card."""
    game, probs = leduc_game(), action_probabilities(network(3))
    table = interop.tabular_policy(game, probs)

    outcomes = []
    for deal in all_deals():
        start = OpenSpielLeduc()
        start.set_state((deal, ()))
        outcomes.append((1 / 120, start))
    for seat in (0, 1):
        ours = best_response(outcomes, seat, probs, OpenSpielLeduc.copy).value
        theirs = openspiel_exploitability.best_response(game, table, seat)["best_response_value"]
        # Not bit-equal: the table holds probabilities of a batched forward pass, the solver asks row by row.
        assert ours == pytest.approx(theirs, abs=1e-6)


def test_which_games_have_an_exploitability():
    assert has_exploitability(LeducHoldem) and has_exploitability(make("RussianRoulette-v0", 1))
    cartpole = make("CartPole-v1", 1)
    assert not has_exploitability(cartpole)
    assert measure_exploitability(cartpole, UniformRandomPolicy()) is None
    roulette = measure_exploitability(make("RussianRoulette-v0", 1), UniformRandomPolicy())
    assert roulette.unit == "win probability" and roulette.value == pytest.approx(0.1510416667, abs=1e-9)


def test_missing_openspiel_is_a_usage_error_naming_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyspiel", None)
    with pytest.raises(UsageError, match=r"rl-gpu\[games\]"):
        measure_exploitability(LeducHoldem, UniformRandomPolicy())
