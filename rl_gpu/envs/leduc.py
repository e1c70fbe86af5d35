"""Two-player Leduc Hold'em as N tensor games, move for move the game of OpenSpiel's ``leduc_poker``.

Rules. A deck of six cards, two suits of three ranks: card ``c`` has rank ``c // 2`` (0, 1: jack; 2, 3: queen;
4, 5: king). Each seat antes 1 chip and is dealt one private card; a public card is revealed between the two
betting rounds. Seat 0 acts first in both rounds. Actions:

- FOLD (0), only legal when facing a bet: the folder loses what it has put in the pot and the game is over.
- CALL (1): match the opponent's contribution (a check when there is nothing to match). A call that is not the
  first action of its round closes the round.
- RAISE (2), at most twice per round (both seats together): match, then add 2 chips (round 1) or 4 (round 2).

At the showdown (round 2 closed) a private card pairing the public card wins; otherwise the higher private
rank wins; equal ranks split the pot (reward 0). Rewards are in chips, ``+x`` to the winner and ``-x`` to the
loser, at the game's end only; a game lasts at most 8 actions (4 per round).

The public card is dealt with the private ones at reset (one draw of three distinct cards) and stays hidden
until round 2: the same distribution as dealing it after round 1, and all of an episode's randomness is in its
start.

Observation ``[N, 30]`` float32: OpenSpiel's ``information_state_tensor`` of the seat to act, so that a policy
over it is a tabular policy of OpenSpiel's game, information state for information state::

    [0:2]   the observing seat, one-hot (the seat to act here; ``_observe_seat`` observes any seat)
    [2:8]   its private card, one-hot
    [8:14]  the public card, one-hot (zeros in round 1)
    [14:22] round 1 betting: 4 slots of 2 bits, call = (1, 0), raise = (0, 1), fold and empty = (0, 0)
    [22:30] round 2 betting, the same way

After the last action ``final_obs`` is that tensor for the seat that acted last, with the final action
recorded.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import torch
from torch import Tensor

from rl_gpu.envs.base import TensorEnv

FOLD, CALL, RAISE = 0, 1, 2
NUM_CARDS = 6
NUM_RANKS = 3
MAX_RAISES = 2
"""Raises allowed per round, both seats together."""
RAISE_AMOUNTS = (2, 4)
"""Chips a raise adds in round 1 and in round 2."""
SLOTS_PER_ROUND = 4
"""Most actions in one round (call, raise, raise, call)."""
MAX_GAME_LENGTH = 2 * SLOTS_PER_ROUND
OBS_SIZE = 2 + 2 * NUM_CARDS + 2 * SLOTS_PER_ROUND * 2

NO_ACTION = 0
"""``betting`` code of an empty slot; an action ``a`` is stored as ``a + 1``."""


class LeducState(NamedTuple):
    """Inner state of N games; every field has leading dimension N."""

    cards: Tensor
    """``[N, 3]`` int64: seat 0's private card, seat 1's private card, the public card (hidden in round 1)."""
    round: Tensor
    """``[N]`` int64: 0 (before the public card) or 1."""
    current_player: Tensor
    """``[N]`` int64: the seat to act, 0 or 1."""
    contribution: Tensor
    """``[N, 2]`` int64: chips each seat has put in the pot, antes included."""
    raises: Tensor
    """``[N]`` int64: raises so far in the current round."""
    round_actions: Tensor
    """``[N]`` int64: actions so far in the current round."""
    betting: Tensor
    """``[N, 2, 4]`` int64: per round and slot, ``NO_ACTION`` or the action taken there plus 1."""


def hand_strength(private: Tensor, public: Tensor) -> Tensor:
    """Showdown strength (int64) of private cards against the public card (shapes that broadcast, e.g.
    ``[N, 2]`` and ``[N, 1]``): a pair (same rank) beats every other hand, otherwise the private rank
    decides."""
    rank = private // 2
    return torch.where(rank == public // 2, NUM_RANKS + rank, rank)


class LeducHoldem(TensorEnv[LeducState]):
    """N independent games of two-player Leduc Hold'em; see the module docstring for the rules and the
    observation.

    ``reward`` is ``[N, 2]`` chips (one column per seat); ``current_player`` tells whose turn it is.
    """

    obs_shape = (OBS_SIZE,)
    num_actions = 3
    compile_simd = False  # integer game logic (TensorEnv.compile_simd)
    num_players = 2
    max_episode_steps = None
    max_game_length = MAX_GAME_LENGTH
    obs_low = (0.0,) * OBS_SIZE
    obs_high = (1.0,) * OBS_SIZE

    def _sample_initial_state(self, num_envs: int, generator: torch.Generator) -> LeducState:
        device = self.device
        # The first three cards of a uniformly random permutation of the deck: a uniform draw of three
        # distinct cards in order (seat 0, seat 1, public), as OpenSpiel deals them one after another.
        order = torch.rand(num_envs, NUM_CARDS, generator=generator, device=device).argsort(dim=1)
        return self._deal(order[:, :3].contiguous())

    def chance_outcomes(self) -> tuple[LeducState, Tensor]:
        """The 120 deals (seat 0's card, seat 1's, the public card), each with probability 1/120."""
        cards = torch.tensor(list(itertools.permutations(range(NUM_CARDS), 3)), device=self.device)
        return self._deal(cards), torch.full((cards.shape[0],), 1.0 / cards.shape[0], dtype=torch.float64,
                                             device=self.device)

    def _deal(self, cards: Tensor) -> LeducState:
        """Fresh games of the deals ``cards`` (``[N, 3]``)."""
        num_envs, device = cards.shape[0], self.device
        zeros = torch.zeros(num_envs, dtype=torch.long, device=device)
        return LeducState(
            cards=cards,
            round=zeros,
            current_player=zeros,
            contribution=torch.ones(num_envs, 2, dtype=torch.long, device=device),
            raises=zeros,
            round_actions=zeros,
            betting=torch.zeros(num_envs, 2, SLOTS_PER_ROUND, dtype=torch.long, device=device),
        )

    def _transition(self, s: LeducState, action: Tensor) -> tuple[LeducState, Tensor, Tensor]:
        me = s.current_player
        seat = torch.nn.functional.one_hot(me, 2).bool()  # [N, 2], True at the acting seat
        fold, call, raise_ = action == FOLD, action == CALL, action == RAISE
        stake = s.contribution.max(dim=1).values
        amount = torch.where(s.round == 0, RAISE_AMOUNTS[0], RAISE_AMOUNTS[1])
        before = s.contribution.gather(1, me[:, None])[:, 0]
        mine = torch.where(call, stake, torch.where(raise_, stake + amount, before))
        contribution = torch.where(seat, mine[:, None], s.contribution)

        # Record the action in its round's next slot (a one-hot write, not an indexed one).
        slot = s.round * SLOTS_PER_ROUND + s.round_actions.clamp(max=SLOTS_PER_ROUND - 1)
        here = torch.nn.functional.one_hot(slot, 2 * SLOTS_PER_ROUND).bool().view(-1, 2, SLOTS_PER_ROUND)
        betting = torch.where(here, (action + 1)[:, None, None], s.betting)

        closes_round = call & (s.round_actions > 0)
        showdown = closes_round & (s.round == 1)
        next_round = closes_round & (s.round == 0)
        terminated = fold | showdown

        # Fold: the folder loses its own contribution. Showdown: both contributions are equal; the stronger
        # hand wins the other's, a tie pays nothing.
        folder_loss = torch.where(seat, -1, 1) * before[:, None]
        strength = hand_strength(s.cards[:, :2], s.cards[:, 2:3])  # [N, 2]
        sign = torch.sign(strength - strength.flip(1))
        showdown_pay = torch.where(showdown[:, None], sign * contribution, 0)
        reward = torch.where(fold[:, None], folder_loss, showdown_pay)

        zeros = torch.zeros_like(s.round)
        next_state = LeducState(
            cards=s.cards,
            round=torch.where(next_round, 1, s.round),
            current_player=torch.where(next_round, zeros, torch.where(terminated, me, 1 - me)),
            contribution=contribution,
            raises=torch.where(next_round, zeros, s.raises + raise_.long()),
            round_actions=torch.where(next_round, zeros, s.round_actions + 1),
            betting=betting,
        )
        return next_state, reward.float(), terminated

    def _observe(self, s: LeducState) -> Tensor:
        return self._observe_seat(s, s.current_player)

    def _observe_seat(self, s: LeducState, seat: Tensor) -> Tensor:
        """``[N, 30]``: the information state tensor of ``seat`` (``[N]``), whether or not it is to act (the
        seat one-hot at [0:2] is then that seat's, not the one to act)."""
        me = seat
        private = s.cards.gather(1, me[:, None])[:, 0]
        public = torch.nn.functional.one_hot(s.cards[:, 2], NUM_CARDS) * (s.round == 1).long()[:, None]
        bits = torch.stack((s.betting == CALL + 1, s.betting == RAISE + 1), dim=-1).flatten(1)  # [N, 16]
        return torch.cat(
            (
                torch.nn.functional.one_hot(me, 2),
                torch.nn.functional.one_hot(private, NUM_CARDS),
                public,
                bits.long(),
            ),
            dim=1,
        ).float()

    def _legal_actions(self, s: LeducState) -> Tensor:
        mine = s.contribution.gather(1, s.current_player[:, None])[:, 0]
        facing_bet = mine < s.contribution.max(dim=1).values
        return torch.stack((facing_bet, torch.ones_like(facing_bet), s.raises < MAX_RAISES), dim=1)

    def _current_player(self, s: LeducState) -> Tensor:
        return s.current_player
