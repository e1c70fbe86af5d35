"""Episode pieces packed for a recurrent layer: the layout on a hand-made rollout, the round trip, and the packed
replay of a policy with memory equal to its step-by-step replay (outputs and gradients)."""

import pytest
import torch

from rl_gpu.nn.composed import ComposedActorCritic
from rl_gpu.nn.pieces import first_states, from_packed, split_pieces, to_packed


def test_pieces_of_a_hand_made_rollout():
    # Column 0: one piece of 5 steps; column 1: starts at steps 2 and 4 -> pieces of 2, 2, 1; column 2: an episode
    # starts at step 0 (still one piece, from the initial state) and at step 1 -> pieces of 1 and 4.
    starts = torch.zeros(5, 3, dtype=torch.bool)
    starts[2, 1] = starts[4, 1] = starts[0, 2] = starts[1, 2] = True
    pieces = split_pieces(starts)
    assert pieces.count == 6
    # Lengths longest first: 5, 4, 2, 2, 1, 1 -> pieces longer than l = 0..4: 6, 4, 2, 2, 1.
    assert pieces.batch_sizes.tolist() == [6, 4, 2, 2, 1]
    assert sorted(pieces.index.reshape(-1).tolist()) == list(range(15))
    # Step 0 of every piece comes first (the first 6 rows), and column 0's piece is the longest: packed first.
    assert pieces.index[0, 0] == 0 and pieces.index[4, 0] == 14
    assert pieces.first[0] == 0 and pieces.first[2] == pieces.index[0, 2]
    x = torch.randn(5, 3, 7)
    torch.testing.assert_close(from_packed(to_packed(x, pieces), pieces), x, rtol=0, atol=0)
    # Each piece starts from the column's recorded state unless an episode starts at step 0.
    state0, initial = torch.full((3, 2), 5.0), torch.zeros(3, 2)
    h0 = first_states(state0, initial, starts[0], pieces)
    assert h0.shape == (6, 2)
    assert h0[pieces.first[0]].tolist() == [5.0, 5.0] and h0[pieces.first[1]].tolist() == [5.0, 5.0]
    assert float(h0.sum()) == 20.0  # the other four pieces begin episodes: the initial (zero) state


def test_split_pieces_refuses_what_is_not_a_bool_matrix():
    with pytest.raises(ValueError, match=r"\[T, N\] bool"):
        split_pieces(torch.zeros(4, 3))
    with pytest.raises(ValueError, match=r"\[T, N\] bool"):
        split_pieces(torch.zeros(4, dtype=torch.bool))


@pytest.mark.parametrize("lstm", [False, True])
@pytest.mark.parametrize("rate", [0.0, 0.1, 0.7])
def test_the_packed_replay_equals_the_step_by_step_replay(lstm, rate, monkeypatch):
    import rl_gpu.nn.composed as composed

    calls = []
    monkeypatch.setattr(composed, "split_pieces", lambda starts: calls.append(1) or split_pieces(starts))
    torch.manual_seed(0)
    policy = ComposedActorCritic((3,), num_actions=4, hidden_sizes=(16,), memory_size=8, lstm=lstm,
                                 normalize_obs=True)
    steps, cols = 12, 6
    obs, action = torch.randn(steps, cols, 3), torch.randint(0, 4, (steps, cols))
    starts = torch.rand(steps, cols) < rate
    starts[0, 0] = True
    state0 = torch.randn(cols, 2, 16 if lstm else 8)
    results = []
    for step in (None, policy.sequence_step):  # None: the packed path; a step given: the Python loop
        policy.zero_grad()
        out = policy.evaluate_sequence(obs, action, None, state0, starts, step=step)
        (out[0].sum() + out[1].sum() + (out[2] ** 2).sum()).backward()
        results.append((out, [p.grad.clone() for p in policy.parameters() if p.grad is not None]))
    assert calls == [1]  # the first replay was the packed one, the second the loop
    (packed, packed_grads), (looped, looped_grads) = results
    for a, b in zip(packed, looped):
        torch.testing.assert_close(a, b)
    assert len(packed_grads) == len(looped_grads) > 0
    for a, b in zip(packed_grads, looped_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
