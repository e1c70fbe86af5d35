"""benchmarks/selfplay_dynamics.py: its exact tree evaluation agrees with OpenSpiel's own (expected returns,
CFR+ iterate for iterate), its rules run, and bad input is refused in one line with exit code 2."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("pyspiel", reason="needs open_spiel (pip install 'rl-gpu[games]')")

import pyspiel
from open_spiel.python.algorithms import cfr, expected_game_score


@pytest.fixture(scope="module")
def dynamics(benchmark_script):
    return benchmark_script("selfplay_dynamics")


def random_policy(tree, seed: int) -> torch.Tensor:
    weights = torch.rand(tree.mask.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return (weights + 0.05) * tree.mask / ((weights + 0.05) * tree.mask).sum(1, keepdim=True)


@pytest.mark.parametrize("name", ["kuhn_poker", "leduc_poker"])
def test_tree_value_equals_openspiel_expected_return(dynamics, name):
    game = pyspiel.load_game(name)
    tree = dynamics.GameTree(game)
    probs = random_policy(tree, seed=3)
    tree.table.action_probability_array[:] = probs.numpy()
    expected = expected_game_score.policy_value(game.new_initial_state(), [tree.table, tree.table])
    assert tree.evaluate(probs).value == pytest.approx(expected[0], abs=1e-12)


def test_counterfactual_values_give_openspiel_cfr_plus_iterate_for_iterate(dynamics):
    """Simultaneous-update CFR+ with linear averaging built on ``GameTree.evaluate`` has, after every iteration,
    the same average policy as OpenSpiel's solver with those settings: the counterfactual values, own reaches
    and the averaging weights are OpenSpiel's."""
    game = pyspiel.load_game("kuhn_poker")
    tree = dynamics.GameTree(game)
    solver = cfr._CFRSolver(game, regret_matching_plus=True, alternating_updates=False, linear_averaging=True)
    mask = tree.mask
    regrets = torch.zeros(mask.shape, dtype=torch.float64)
    average = torch.zeros_like(regrets)
    for t in range(1, 9):
        probs = dynamics.normalized(regrets * mask, mask)
        ev = tree.evaluate(probs)
        average += t * ev.own_reach[:, None] * probs
        regrets = (regrets + (ev.q - (probs * ev.q).sum(1, keepdim=True)) * mask).clamp(min=0)
        solver.evaluate_and_update_policy()
        theirs = solver.average_policy().action_probability_array
        ours = dynamics.normalized(average, mask).numpy()
        np.testing.assert_allclose(ours, theirs, atol=1e-12)


def test_sampled_games_follow_the_policy(dynamics):
    """Games sampled by ``GameTree.sample`` follow the policy: seat 0's mean return matches the exact value, and
    visits of an information state weighted by 1 / own reach estimate the chance-and-opponent reach, the
    weight ``neurd-sampled`` relies on (within 5 standard errors)."""
    tree = dynamics.GameTree(pyspiel.load_game("kuhn_poker"))
    probs = random_policy(tree, seed=5)
    games = 200_000
    info, action, reach, ret = tree.sample(probs, games, torch.Generator().manual_seed(0))
    assert bool(tree.mask[info, action].all())
    seat = torch.zeros(len(tree.mask), dtype=torch.long)
    seat[tree.info[tree.decisions]] = tree.player[tree.decisions]
    first = (reach == 1.0) & (seat[info] == 0)  # each game's first decision, seat 0's
    assert int(first.sum()) == games
    error = ret[first].std().item() / games**0.5
    assert abs(ret[first].mean().item() - tree.evaluate(probs).value) < 5 * error
    weights = torch.zeros(len(tree.mask), dtype=torch.float64).index_add_(0, info, 1.0 / reach) / games
    exact = torch.zeros_like(weights)
    for node in tree.decisions.tolist():
        exact[tree.info[node]] += others_reach(tree, probs, node)
    assert torch.allclose(weights, exact, atol=5 * (weights.max().item() / games) ** 0.5)


def test_corrected_advantage_is_unbiased_whatever_the_q_network(dynamics):
    """``corrected_advantage`` from sampled games estimates the exact counterfactual advantage even with q values
    that are plain noise (within 5 standard errors per entry), while the same wrong q values used uncorrected
    (what ``neurd-sampled --network`` does without ``--q-correction``) miss it."""
    tree = dynamics.GameTree(pyspiel.load_game("kuhn_poker"))
    probs = random_policy(tree, seed=7)
    games = 200_000
    info, action, reach, ret = tree.sample(probs, games, torch.Generator().manual_seed(1))
    ev = tree.evaluate(probs)
    exact = (ev.q - (probs * ev.q).sum(1, keepdim=True)) * tree.mask
    wrong_q = torch.randn(tree.mask.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * 2
    wrong_q = wrong_q * tree.mask
    estimate = dynamics.corrected_advantage(wrong_q, probs, tree.mask, info, action, reach, ret) / games
    # Standard error per entry from the visits' own values (Kuhn visits an information state at most once a game).
    rows = torch.arange(len(info))
    visit_q = wrong_q[info].clone()
    visit_q[rows, action] += (ret - visit_q[rows, action]) / probs[info, action]
    visit = (visit_q - (probs[info] * visit_q).sum(1, keepdim=True)) * tree.mask[info] / reach[:, None]
    second = torch.zeros_like(exact).index_add_(0, info, visit.square()) / games
    error = ((second - estimate.square()).clamp(min=0) / games).sqrt()
    assert bool(((estimate - exact).abs() <= 5 * error + 1e-12).all())
    assert error.max() < 0.05 * exact.abs().max()  # the check above is a tight one
    weights = torch.zeros(len(tree.mask), dtype=torch.float64).index_add_(0, info, 1.0 / reach) / games
    uncorrected = weights[:, None] * (wrong_q - (probs * wrong_q).sum(1, keepdim=True)) * tree.mask
    assert (uncorrected - exact).abs().max() > 10 * (estimate - exact).abs().max()


def others_reach(tree, probs, node: int) -> float:
    """Probability that chance and the seat not acting at ``node`` play the moves leading to it, by walking
    up the tree one node at a time (independent of ``GameTree.evaluate``'s level-wise products)."""
    seat = int(tree.player[node])
    p = 1.0
    while int(tree.parent[node]) >= 0:
        if not bool(tree.by_decision[node]):
            p *= float(tree.chance[node])
        elif int(tree.mover[node]) != seat:
            p *= float(probs[tree.mover_info[node], tree.mover_action[node]])
        node = int(tree.parent[node])
    return p


def test_a_tree_beyond_the_cap_is_refused_while_it_is_walked(dynamics):
    with pytest.raises(ValueError, match="more than 50 nodes"):
        dynamics.GameTree(pyspiel.load_game("kuhn_poker"), max_nodes=50)  # Kuhn has 58


def test_rules_report_and_cfr_plus_converges_on_kuhn(dynamics, capsys):
    assert dynamics.main(["--game", "kuhn_poker", "--iterations", "100", "--reports", "2", "--games", "256"]) == 0
    rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    table = [[cell.strip() for cell in row] for row in rows[2:]]
    assert {row[0] for row in table} == set(dynamics.RULES)
    cfr_plus_last = [row for row in table if row[0] == "cfr+"][-1]
    assert cfr_plus_last[2] == "100" and float(cfr_plus_last[5]) < 0.03  # uniform random: 0.4583
    sampled = [row for row in table if row[0] == "neurd-sampled"][-1]
    assert int(sampled[3].replace(",", "")) > 100 * 256  # at least one decision per game


def test_network_rules_learn_on_kuhn(dynamics, capsys):
    """With --network the table is an MLP trained by Adam: each rule's average policy ends well below uniform
    random's exploitability (0.4583) on Kuhn poker."""
    assert dynamics.main(["--game", "kuhn_poker", "--network", "--iterations", "200", "--reports", "1",
                          "--games", "512"]) == 0
    rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    table = [[cell.strip() for cell in row] for row in rows[2:]]
    assert [row[0] for row in table] == list(dynamics.NETWORK_RULES)
    assert all(row[1] == "Adam 0.003" and float(row[5]) < 0.4 for row in table)
    sampled = [row for row in table if row[0] == "neurd-sampled"]
    assert int(sampled[0][3].replace(",", "")) > 200 * 512  # at least one decision per game


def test_network_neurd_with_plain_sgd_learns_on_kuhn(dynamics, capsys):
    """``--optimizer sgd``: plain gradient steps of the policy network, reported as such, also end well below
    uniform random's exploitability on Kuhn poker."""
    assert dynamics.main(["--game", "kuhn_poker", "--network", "--optimizer", "sgd", "--lr", "0.1", "--rules",
                          "neurd", "--iterations", "200", "--reports", "1"]) == 0
    rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    (row,) = [[cell.strip() for cell in r] for r in rows[2:]]
    assert row[1] == "SGD 0.1" and float(row[5]) < 0.15  # uniform random: 0.4583


@pytest.mark.parametrize("argv, message", [
    (["--network", "--rules", "cfr+"], "--network runs the rules pg, neurd-onpolicy, neurd, neurd-sampled only"),
    (["--lr", "0"], "must be in (0, 1]"),
    (["--rules", "ppo"], "unknown rule 'ppo'"),
    (["--rules", "pg:0"], "must be in (0, 1e6]"),
    (["--rules", "pg:nan"], "must be in (0, 1e6]"),
    (["--rules", "cfr+:2"], "cfr+ takes no step size"),
    (["--iterations", "0"], "must be from 1"),
    (["--iterations", "1e9"], "expected a whole number"),
    (["--game", "no_such_game"], "OpenSpiel has no game 'no_such_game'"),
    (["--games", "0"], "must be from 1"),
    (["--q-step", "1.5"], "must be in (0, 1]"),
    (["--q-lr", "-1"], "must be in (0, 1]"),
    (["--q-updates", "0"], "must be from 1"),
    (["--optimizer", "sgd"], "--optimizer applies to --network only"),
    (["--network", "--optimizer", "lbfgs"], "invalid choice: 'lbfgs'"),
    (["--q-correction"], "--q-correction applies to --network --rules neurd-sampled only"),
    (["--network", "--rules", "neurd", "--q-lr", "1e-3"], "--q-lr applies to --network --rules neurd-sampled only"),
    (["--logit-bound", "inf"], "must be in (0, 100]"),
    (["--game", "tic_tac_toe"], "not a two-player zero-sum imperfect-information game"),
    (["--game", "leduc_poker(players=3)"], "not a two-player zero-sum imperfect-information game"),
])
def test_bad_input_is_refused_with_exit_code_2(dynamics, capfd, argv, message):
    try:
        code = dynamics.main(argv)
    except SystemExit as e:
        code = e.code
    assert code == 2
    err = capfd.readouterr().err  # file descriptor 2: OpenSpiel's C++ side writes there too
    assert message in err and "Traceback" not in err
    if "--game" in argv:  # refused after parsing: one line, none of OpenSpiel's list of games
        assert len(err.strip().splitlines()) == 1
