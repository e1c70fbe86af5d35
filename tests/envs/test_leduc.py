"""Leduc Hold'em: transition-by-transition parity with OpenSpiel's ``leduc_poker`` (every deal and every
action sequence of the game, and random play across auto-resets), the deal's distribution, a few rules by
hand, and the contract's invariants."""

from __future__ import annotations

import functools

import pytest
import torch

from rl_gpu.envs import make
from rl_gpu.envs.leduc import CALL, FOLD, MAX_GAME_LENGTH, OBS_SIZE, RAISE, LeducHoldem
from rl_gpu.envs.testing import check_env, check_reference_parity, sample_actions, stack_rows

pytest.importorskip("pyspiel", reason="the parity tests need open_spiel (pip install 'rl-gpu[games]')")

from rl_gpu.envs.testing.openspiel_reference import (
    OpenSpielLeduc,
    all_action_sequences,
    all_deals,
    leduc_deal_to_inner,
    leduc_game,
    leduc_to_reference,
)


def test_the_game_has_openspiels_sizes():
    game = leduc_game()
    assert game.information_state_tensor_shape() == [OBS_SIZE]
    assert game.num_distinct_actions() == LeducHoldem.num_actions
    assert game.max_game_length() == MAX_GAME_LENGTH == LeducHoldem.max_game_length
    env = make("LeducHoldem-v0", 4, seed=0)
    assert env.spec.num_players == 2 and env.spec.has_action_mask and env.spec.obs_shape == (OBS_SIZE,)


def test_every_deal_and_every_action_sequence_matches_openspiel():
    """One row per (deal, complete action sequence of OpenSpiel's tree): 120 deals x 49 sequences, each played
    to its end and compared at every step (rewards, termination, information state tensors, legal actions,
    seat to act); so every transition of the game is compared once at least."""
    sequences = all_action_sequences((0, 1, 2))
    assert len(sequences) == 49  # betting does not depend on the cards
    assert all(all_action_sequences(deal) == sequences for deal in [(5, 4, 3), (2, 3, 0)])
    paths = [(deal, seq) for deal in all_deals() for seq in sequences]
    env = LeducHoldem(len(paths), seed=0)
    planned = torch.full((MAX_GAME_LENGTH, len(paths)), -1, dtype=torch.long)
    for row, (_, seq) in enumerate(paths):
        planned[: len(seq), row] = torch.tensor(seq)
    step = iter(range(MAX_GAME_LENGTH))

    def action_fn(result, generator):
        # Rows whose path has ended were reset: they play random legal actions from there on.
        t = next(step)
        random = sample_actions(env, result.action_mask, generator)
        return torch.where(planned[t] >= 0, planned[t], random)

    report = check_reference_parity(
        env, OpenSpielLeduc, to_reference=leduc_to_reference, to_inner=leduc_deal_to_inner,
        initial_states=[(deal, ()) for deal, _ in paths], num_steps=MAX_GAME_LENGTH, action_fn=action_fn,
    )
    assert report.episodes >= len(paths)


def test_random_play_across_resets_matches_openspiel():
    report = check_reference_parity(LeducHoldem(64, seed=3), OpenSpielLeduc, to_reference=leduc_to_reference,
                                    num_steps=40, seed=4)
    assert report.episodes >= 400


def test_deals_are_three_distinct_cards_uniform_over_the_120_orders():
    cards = LeducHoldem(60_000, seed=5).state.inner.cards
    assert bool((cards[:, 0] != cards[:, 1]).all() and (cards[:, 0] != cards[:, 2]).all()
                and (cards[:, 1] != cards[:, 2]).all())
    counts = torch.bincount(cards[:, 0] * 36 + cards[:, 1] * 6 + cards[:, 2], minlength=216).double()
    used = counts[counts > 0]
    assert len(used) == 120  # OpenSpiel deals each order with probability 1/6 * 1/5 * 1/4
    expected = len(cards) / 120
    chi2 = float(((used - expected) ** 2 / expected).sum())
    assert chi2 < 180.0, chi2  # the 0.1% tail of chi-square with 119 degrees of freedom is about 173


def _fresh(deals):
    env = LeducHoldem(len(deals), seed=0, autoreset=False)
    rows = [leduc_deal_to_inner((deal, ())) for deal in deals]
    env.set_rows(torch.arange(len(deals)), stack_rows(env.state.inner, rows))
    return env


def _play(env, *actions):
    result = None
    for a in actions:
        result = env.step(torch.full((env.num_envs,), a, dtype=torch.long))
    return result


def test_rules_by_hand():
    # A fold right after a raise: the folder loses its ante only.
    env = _fresh([(0, 2, 4)])
    result = _play(env, RAISE, FOLD)
    assert result.terminated.tolist() == [True] and result.reward.tolist() == [[1.0, -1.0]]
    # Check-check, then raise-call in round 2: 1 + 4 = 5 chips each; a pair (queen 3 with the public queen 2)
    # beats a king; a king beats a jack; equal ranks split.
    env = _fresh([(3, 4, 2), (4, 0, 2), (0, 1, 4)])
    first = _play(env, CALL, CALL)
    assert first.obs[:, 8 + 2].tolist() == [1.0, 1.0, 0.0] and first.obs[:, 8 + 4].tolist() == [0.0, 0.0, 1.0]
    result = _play(env, RAISE, CALL)
    assert result.terminated.all() and result.reward.tolist() == [[5.0, -5.0], [5.0, -5.0], [0.0, 0.0]]
    # Raise, re-raise, call: 1 + 2 + 2 = 5 chips each after round 1; no third raise; no fold when not facing
    # a bet.
    env = _fresh([(0, 2, 4)])
    result = _play(env, RAISE, RAISE)
    assert result.action_mask.tolist() == [[True, True, False]]
    result = _play(env, CALL)
    assert result.action_mask.tolist() == [[False, True, True]] and result.current_player.tolist() == [0]
    assert env.state.inner.contribution.tolist() == [[5, 5]]


def test_contract():
    reports = check_env(functools.partial(LeducHoldem, device="cpu"), num_envs=8, num_steps=24)
    assert reports["autoreset"].episodes > 0
