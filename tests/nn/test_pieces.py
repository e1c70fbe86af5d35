"""Episode pieces for a recurrent layer: the bucket layout on a hand-made rollout, the round trip, and an LSTM policy
replayed over pieces equal to its step-by-step replay (outputs and gradients)."""

import pytest
import torch

from rl_gpu.nn.composed import ComposedActorCritic
from rl_gpu.nn.pieces import first_states, run_pieces, split_pieces


def test_pieces_of_a_hand_made_rollout():
    # Column 0: one piece of 5 steps; column 1: starts at steps 2 and 4 -> pieces of 2, 2, 1; column 2: an episode
    # starts at step 0 (still one piece, from the initial state) and at step 1 -> pieces of 1 and 4.
    starts = torch.zeros(5, 3, dtype=torch.bool)
    starts[2, 1] = starts[4, 1] = starts[0, 2] = starts[1, 2] = True
    pieces = split_pieces(starts)
    assert pieces.count == 6 and pieces.first.tolist() == [0, 1, 4]
    # Length classes: 1 -> pieces 3 and 4, 2 -> pieces 1 and 2, (2, 4] -> piece 5 (4 steps), (4, 8] -> piece 0.
    layout = [(b.pieces.tolist(), b.length) for b in pieces.buckets]
    assert layout == [([3, 4], 1), ([1, 2], 2), ([5], 4), ([0], 5)]
    assert sorted(torch.cat([b.steps for b in pieces.buckets]).tolist()) == list(range(15))
    # Column 1's second piece (steps 2, 3 -> flat 7, 10) is lane 1 of the length-2 bucket, rows 0 and 1.
    two = pieces.buckets[1]
    assert sorted(zip(two.steps.tolist(), two.time.tolist(), two.lane.tolist())) == [
        (1, 0, 0), (4, 1, 0), (7, 0, 1), (10, 1, 1)]
    # Through an identity layer the real steps come back in rollout order.
    x = torch.randn(5, 3, 7)
    torch.testing.assert_close(run_pieces(lambda seq, h: seq, x, torch.zeros(6, 1), pieces), x, rtol=0, atol=0)
    # Each piece starts from the column's recorded state unless an episode starts at step 0.
    state0, initial = torch.full((3, 2), 5.0), torch.zeros(3, 2)
    h0 = first_states(state0, initial, starts[0], pieces)
    assert h0.shape == (6, 2) and h0[0].tolist() == [5.0, 5.0] and h0[1].tolist() == [5.0, 5.0]
    assert float(h0.sum()) == 20.0  # the other four pieces begin episodes: the initial (zero) state


def test_split_pieces_refuses_what_is_not_a_bool_matrix():
    with pytest.raises(ValueError, match=r"\[T, N\] bool"):
        split_pieces(torch.zeros(4, 3))
    with pytest.raises(ValueError, match=r"\[T, N\] bool"):
        split_pieces(torch.zeros(4, dtype=torch.bool))


@pytest.mark.parametrize("rate", [0.0, 0.1, 0.7])
def test_an_lstm_replayed_over_pieces_equals_the_step_by_step_replay(rate, monkeypatch):
    import rl_gpu.nn.composed as composed

    calls = []
    monkeypatch.setattr(composed, "split_pieces", lambda starts: calls.append(1) or split_pieces(starts))
    torch.manual_seed(0)
    policy = ComposedActorCritic((3,), num_actions=4, hidden_sizes=(16,), memory_size=8, lstm=True,
                                 normalize_obs=True)
    steps, cols = 12, 6
    obs, action = torch.randn(steps, cols, 3), torch.randint(0, 4, (steps, cols))
    starts = torch.rand(steps, cols) < rate
    starts[0, 0] = True
    state0 = torch.randn(cols, 2, 16)
    results = []
    for step in (None, policy.sequence_step):  # None: over pieces; a step given: the Python loop
        policy.zero_grad()
        out = policy.evaluate_sequence(obs, action, None, state0, starts, step=step)
        (out[0].sum() + out[1].sum() + (out[2] ** 2).sum()).backward()
        results.append((out, [p.grad.clone() for p in policy.parameters() if p.grad is not None]))
    assert calls == [1]  # the first replay ran over pieces, the second was the loop
    (pieced, pieced_grads), (looped, looped_grads) = results
    for a, b in zip(pieced, looped):
        torch.testing.assert_close(a, b)
    assert len(pieced_grads) == len(looped_grads) > 0
    for a, b in zip(pieced_grads, looped_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_a_gru_keeps_the_step_by_step_replay(monkeypatch):
    import rl_gpu.nn.composed as composed

    calls = []
    monkeypatch.setattr(composed, "split_pieces", lambda starts: calls.append(1) or split_pieces(starts))
    policy = ComposedActorCritic((3,), num_actions=2, hidden_sizes=(8,), memory_size=4)
    out = policy.evaluate_sequence(torch.randn(5, 2, 3), torch.randint(0, 2, (5, 2)), None, torch.zeros(2, 2, 4),
                                   torch.zeros(5, 2, dtype=torch.bool))
    assert calls == [] and out[0].shape == (5, 2)
