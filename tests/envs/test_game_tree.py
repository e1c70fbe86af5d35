"""The game tree enumerated through a tensor environment (:mod:`rl_gpu.envs.game_tree`): Leduc's tree, its
information states and the exact counterfactual values of a policy, checked against a walk of OpenSpiel's own
``leduc_poker``; games it cannot enumerate are refused with the reason."""

import pytest
import torch

from rl_gpu.envs.cartpole import CartPoleEnv
from rl_gpu.envs.game_tree import GameTree
from rl_gpu.envs.leduc import LeducHoldem
from rl_gpu.envs.roulette import NUM_CHAMBERS, RussianRouletteVectorized


def _openspiel_values(game, probs_of):
    """Counterfactual values q[(information state string, action)], own reach per information state and seat 0's
    value, by a plain recursive walk of OpenSpiel's tree (``probs_of(state) -> {action: probability}``)."""
    q, own = {}, {}

    def walk(state, reach):  # reach = (seat 0's own, seat 1's own, chance)
        if state.is_terminal():
            return state.returns()
        if state.is_chance_node():
            total = [0.0, 0.0]
            for outcome, p in state.chance_outcomes():
                child = walk(state.child(outcome), (reach[0], reach[1], reach[2] * p))
                total = [t + p * c for t, c in zip(total, child)]
            return total
        seat, key = state.current_player(), state.information_state_string()
        own[key] = reach[seat]
        others = reach[1 - seat] * reach[2]
        total = [0.0, 0.0]
        for action, p in probs_of(state).items():
            moved = list(reach)
            moved[seat] *= p
            child = walk(state.child(action), tuple(moved))
            q[(key, action)] = q.get((key, action), 0.0) + others * child[seat]
            total = [t + p * c for t, c in zip(total, child)]
        return total

    return q, own, walk(game.new_initial_state(), (1.0, 1.0, 1.0))[0]


def test_leduc_tree_and_values_match_openspiel():
    pyspiel = pytest.importorskip("pyspiel")
    game = pyspiel.load_game("leduc_poker")
    tree = GameTree(LeducHoldem(1))
    assert tree.obs.shape == (936, 30)  # OpenSpiel's leduc_poker has 936 information states
    assert tree.num_transitions == tree.num_nodes - 120  # every node but the 120 deals is reached by an action
    probs = torch.rand(tree.mask.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    probs = probs * tree.mask
    probs = probs / probs.sum(1, keepdim=True)
    row = {tuple(obs.tolist()): i for i, obs in enumerate(tree.obs)}

    def probs_of(state):
        i = row[tuple(state.information_state_tensor())]
        return {a: float(probs[i, a]) for a in state.legal_actions()}

    q, own, value = _openspiel_values(game, probs_of)
    keys = {}
    stack = [game.new_initial_state()]
    while stack:  # information state string -> our row, through the tensor OpenSpiel gives for it
        state = stack.pop()
        if state.is_terminal():
            continue
        if not state.is_chance_node():
            keys[state.information_state_string()] = row[tuple(state.information_state_tensor())]
        stack.extend(state.child(a) for a in state.legal_actions())
    assert len(keys) == 936 and len(set(keys.values())) == 936
    values = tree.evaluate(probs)
    expected_q = torch.zeros_like(probs)
    for (key, action), v in q.items():
        expected_q[keys[key], action] = v
    expected_own = torch.zeros(936, dtype=torch.float64)
    for key, v in own.items():
        expected_own[keys[key]] = v
    torch.testing.assert_close(values.q, expected_q, rtol=0, atol=1e-12)
    torch.testing.assert_close(values.own_reach, expected_own, rtol=0, atol=1e-12)
    assert values.value[0].item() == pytest.approx(value, abs=1e-12)
    assert values.value.sum().item() == pytest.approx(0.0, abs=1e-12)


def test_uniform_play_of_leduc():
    tree = GameTree(LeducHoldem(1))
    values = tree.evaluate(tree.uniform())
    assert 0.0 < values.win_rate.item() < 1.0
    assert 2.0 <= values.game_length.item() <= 8.0  # at least a check and a call; at most 8 actions
    # Both seats reach their first decision with certainty.
    first = (tree.obs[:, 14:].sum(1) == 0) & (tree.player == 0)
    assert torch.all(values.own_reach[first] == 1.0)


class _RouletteWithStarts(RussianRouletteVectorized):
    """Roulette listing its six live chambers, to reach the perfect-recall check."""

    def chance_outcomes(self):
        live = torch.arange(NUM_CHAMBERS)
        inner = self._sample_initial_state(NUM_CHAMBERS, self.generator)
        return inner._replace(live=live), torch.full((NUM_CHAMBERS,), 1 / NUM_CHAMBERS, dtype=torch.float64)


@pytest.mark.parametrize("env, reason", [
    (RussianRouletteVectorized(1), "does not list its chance outcomes"),
    (_RouletteWithStarts(1), "do not give perfect recall"),
    (CartPoleEnv(1), "not a two-player game"),
])
def test_games_it_cannot_enumerate_are_refused_with_the_reason(env, reason):
    with pytest.raises(ValueError, match=reason):
        GameTree(env)


def test_a_tree_over_the_cap_is_refused_while_it_is_built():
    with pytest.raises(ValueError, match="more than 1,000 nodes"):
        GameTree(LeducHoldem(1), max_nodes=1_000)
