"""A league of opponents with memory: the stacked members act as each member's own composed policy does, the
collector advances an opponent's state on its own turns only (a league run with memory resumes exactly:
tests/training/test_league.py)."""

from __future__ import annotations

import pytest
import torch

from rl_gpu.collect.reference import collect
from rl_gpu.envs.registry import make
from rl_gpu.nn import distributions as D
from rl_gpu.nn.composed import ComposedActorCritic
from rl_gpu.nn.recurrent_opponents import StackedRecurrentActors, stacked_opponents


def _composed(seed: int, lstm: bool = False, normalize_obs: bool = False) -> ComposedActorCritic:
    torch.manual_seed(seed)
    policy = ComposedActorCritic((6,), num_actions=3, hidden_sizes=(16, 8), memory_size=8, lstm=lstm,
                                 normalize_obs=normalize_obs)
    with torch.no_grad():
        for p in policy.parameters():
            p.normal_(0.0, 0.5)
    if normalize_obs:
        policy.update_normalizer(torch.randn(50, 6) * 3 + seed)
    return policy


@pytest.mark.parametrize("lstm, normalize_obs", [(False, False), (True, True)])
def test_stacked_members_with_memory_act_as_their_own_policies(lstm, normalize_obs):
    policies = [_composed(s, lstm, normalize_obs) for s in range(3)]
    n = 32
    stacked = stacked_opponents(policies[0], capacity=4, num_rows=n, num_blocks=8)
    assert isinstance(stacked, StackedRecurrentActors)
    for k, policy in enumerate(policies):
        stacked.load_member(k, policy)
    stacked.make_uniform(3)
    gen = torch.Generator().manual_seed(0)
    stacked.assign(torch.tensor([0, 1, 2, 3, 2, 1, 0, 3]))
    state = stacked.initial_state(n)
    own_state = [p.initial_state(n) for p in policies]
    for _ in range(3):  # three steps: the state carries what the rows saw
        obs = torch.randn(n, 6, generator=gen) * 2
        mask = torch.rand(n, 3, generator=gen) < 0.7
        mask[:, 0] = True
        noise = D.categorical_noise((n, 3), gen, "cpu")
        out, state = stacked.act_with_state(obs, state, mask, noise=noise)
        for k, policy in enumerate(policies):
            rows = stacked.slot == k
            own, own_state[k] = policy.act_with_state(obs, own_state[k], mask, noise=noise)
            assert torch.equal(out.action[rows], own.action[rows])
            torch.testing.assert_close(out.log_prob[rows], own.log_prob[rows])
            torch.testing.assert_close(state[rows], own_state[k][rows, 0])
        uniform = stacked.slot == 3
        legal = mask[uniform].sum(-1).float()
        torch.testing.assert_close(out.log_prob[uniform], -legal.log())
    with pytest.raises(ValueError, match="act_with_state"):
        stacked.act(obs, mask)
    with pytest.raises(TypeError, match="composed policies with memory"):
        StackedRecurrentActors(ComposedActorCritic((6,), num_actions=3), 2, 4)


class _Recording:
    """An opponent with memory that records the state it was handed at each step."""

    is_recurrent = True

    def __init__(self, inner):
        self.inner, self.seen = inner, []

    def initial_state(self, n):
        return self.inner.initial_state(n)

    def act_with_state(self, obs, state, *args, **kwargs):
        self.seen.append(state.clone())
        return self.inner.act_with_state(obs, state, *args, **kwargs)


def _learner_and_recorded_league(rows: int = 16) -> tuple[ComposedActorCritic, _Recording]:
    """A learner with memory, and a league of it whose every row plays member 1 (another policy), recorded."""
    learner = _composed(0)
    league = stacked_opponents(learner, capacity=2, num_rows=rows)
    league.load_member(1, _composed(1))
    league.assign(torch.ones(league.num_blocks, dtype=torch.long))
    return learner, _Recording(league)


def test_the_collector_moves_an_opponents_memory_on_its_own_turns_only():
    env = make("RussianRoulette-v0", num_envs=16, seed=0)
    learner, opponent = _learner_and_recorded_league()
    rollout = collect(learner, env, 10, torch.Generator().manual_seed(1), episodic=True, opponent=opponent,
                      opponent_rng=torch.Generator().manual_seed(2))
    seen = torch.stack(opponent.seen)  # [T, N, S]: the state before each step
    moved = (seen[1:] != seen[:-1]).any(-1)  # [T - 1, N]: the state changed over step t
    opponent_turn = rollout.live & (rollout.weight == 0)  # a live game's step that is not the learner's
    going_on = rollout.live[1:]  # the game continues after step t
    assert bool((opponent_turn[:-1] & going_on).any()) and bool((~opponent_turn[:-1] & going_on).any())
    assert torch.equal(moved[going_on], opponent_turn[:-1][going_on])
    ended = rollout.done[:-1]  # a game ended at step t: the next state is the initial one
    assert bool(ended.any()) and not seen[1:][ended].any()


def test_a_continuing_rollout_hands_the_opponents_memory_to_the_next():
    env = make("RussianRoulette-v0?seats_as_agents=1", num_envs=8, seed=0)
    learner, opponent = _learner_and_recorded_league()  # 8 worlds x 2 seats
    seat = torch.arange(8) % 2

    def rollout(seed, state=None):
        opponent.seen.clear()
        return collect(learner, env, 6, torch.Generator().manual_seed(seed), opponent=opponent,
                       opponent_rng=torch.Generator().manual_seed(seed + 1), learner_seat=seat,
                       opponent_state=state)

    first = rollout(1)
    assert first.opponent_state is not None and float(first.opponent_state.abs().sum()) > 0
    assert not opponent.seen[0].any()  # the first rollout's opponents start from their initial state
    rollout(3, first.opponent_state)
    assert torch.equal(opponent.seen[0], first.opponent_state)  # the next one goes on from where it stopped
