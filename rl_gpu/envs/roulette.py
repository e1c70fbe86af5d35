"""Two-player Russian roulette as N tensor games.

Rules. Six chambers, one of them (hidden, uniform) holds the live round; the chamber under the hammer starts
at 0 and player 0 acts first. On their turn a player picks one action:

- FIRE: fire the current chamber. Live: the firer loses (+1 to the other seat, -1 to the firer) and the game
  is over. Blank: the cylinder advances one chamber and the turn passes.
- PEEK (once per player per game): the peeker learns whether the current chamber is live; the turn stays.
- SKIP (once per player per game): the turn passes; the chamber does not move.

FIRE is always legal, so a game lasts at most 6 fires + 2 PEEKs + 2 SKIPs = 10 actions and never needs a
time limit.

Observation ``[N, 6]`` float32, from the point of view of the player to act — never the live position:
``[chamber / 5, own PEEK left, own SKIP left, opponent PEEK left, opponent SKIP left, own PEEK result]``,
where the PEEK result is +1 (the current chamber is live), -1 (blank) or 0 (not peeked at this chamber).
A PEEK result is forgotten when the chamber moves.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from rl_gpu.envs.base import TensorEnv

FIRE, PEEK, SKIP = 0, 1, 2
NUM_CHAMBERS = 6
MAX_GAME_LENGTH = NUM_CHAMBERS + 2 * 2
"""Every blank chamber fired, the live one fired, and both players' PEEK and SKIP used."""

PEEK_UNKNOWN, PEEK_BLANK, PEEK_LIVE = 0, 1, 2


class RouletteState(NamedTuple):
    """Inner state of N games; every field has leading dimension N."""

    chamber: Tensor
    """``[N]`` int64: the chamber under the hammer, 0..5."""
    live: Tensor
    """``[N]`` int64: the chamber holding the live round, 0..5 (hidden from the players)."""
    current_player: Tensor
    """``[N]`` int64: the seat to act, 0 or 1."""
    peek_available: Tensor
    """``[N, 2]`` bool: seat s may still PEEK."""
    skip_available: Tensor
    """``[N, 2]`` bool: seat s may still SKIP."""
    peek_result: Tensor
    """``[N, 2]`` int64: what seat s saw when peeking at the current chamber (PEEK_UNKNOWN/BLANK/LIVE)."""


class RussianRouletteVectorized(TensorEnv[RouletteState]):
    """N independent two-player roulette games; see the module docstring for the rules.

    ``reward`` is ``[N, 2]`` (one column per seat); ``current_player`` tells whose turn it is.
    """

    obs_shape = (6,)
    num_actions = 3
    compile_simd = False  # integer game logic (TensorEnv.compile_simd)
    num_players = 2
    max_episode_steps = None
    max_game_length = MAX_GAME_LENGTH

    def _sample_initial_state(self, num_envs: int, generator: torch.Generator) -> RouletteState:
        device = self.device
        return RouletteState(
            chamber=torch.zeros(num_envs, dtype=torch.long, device=device),
            live=torch.randint(0, NUM_CHAMBERS, (num_envs,), generator=generator, device=device),
            current_player=torch.zeros(num_envs, dtype=torch.long, device=device),
            peek_available=torch.ones(num_envs, 2, dtype=torch.bool, device=device),
            skip_available=torch.ones(num_envs, 2, dtype=torch.bool, device=device),
            peek_result=torch.zeros(num_envs, 2, dtype=torch.long, device=device),
        )

    def _transition(self, s: RouletteState, action: Tensor) -> tuple[RouletteState, Tensor, Tensor]:
        player = s.current_player
        seat = torch.nn.functional.one_hot(player, 2).bool()  # [N, 2], True at the acting seat
        is_live = s.chamber == s.live
        fire = action == FIRE
        peek = (action == PEEK) & (s.peek_available & seat).any(1)
        skip = (action == SKIP) & (s.skip_available & seat).any(1)
        fire_live = fire & is_live
        fire_blank = fire & ~is_live

        chamber = s.chamber + fire_blank.long()
        passes_turn = fire_blank | skip
        current_player = torch.where(passes_turn, 1 - player, player)
        peek_available = s.peek_available & ~(seat & peek.unsqueeze(1))
        skip_available = s.skip_available & ~(seat & skip.unsqueeze(1))
        seen = torch.where(is_live, PEEK_LIVE, PEEK_BLANK)
        peek_result = torch.where(seat & peek.unsqueeze(1), seen.unsqueeze(1), s.peek_result)
        peek_result = torch.where(fire_blank.unsqueeze(1), torch.zeros_like(peek_result), peek_result)

        # The firer of the live round loses: -1 for the acting seat, +1 for the other.
        outcome = torch.where(seat, -1.0, 1.0)
        reward = torch.where(fire_live.unsqueeze(1), outcome, torch.zeros_like(outcome))
        next_state = RouletteState(chamber, s.live, current_player, peek_available, skip_available, peek_result)
        return next_state, reward, fire_live

    def _observe(self, s: RouletteState) -> Tensor:
        return self._observe_seat(s, s.current_player)

    def _observe_seat(self, s: RouletteState, seat: Tensor) -> Tensor:
        """``[N, 6]``: the observation of ``seat`` (``[N]``), whether or not it is to act."""
        me = seat.unsqueeze(1)
        other = 1 - me
        own_peek = s.peek_available.gather(1, me).squeeze(1)
        own_skip = s.skip_available.gather(1, me).squeeze(1)
        opp_peek = s.peek_available.gather(1, other).squeeze(1)
        opp_skip = s.skip_available.gather(1, other).squeeze(1)
        result = s.peek_result.gather(1, me).squeeze(1)
        seen = torch.where(result == PEEK_LIVE, 1.0, torch.where(result == PEEK_BLANK, -1.0, 0.0))
        return torch.stack(
            (
                s.chamber.float() / (NUM_CHAMBERS - 1),
                own_peek.float(),
                own_skip.float(),
                opp_peek.float(),
                opp_skip.float(),
                seen,
            ),
            dim=1,
        )

    def _legal_actions(self, s: RouletteState) -> Tensor:
        me = s.current_player.unsqueeze(1)
        return torch.stack(
            (
                torch.ones_like(s.chamber, dtype=torch.bool),
                s.peek_available.gather(1, me).squeeze(1),
                s.skip_available.gather(1, me).squeeze(1),
            ),
            dim=1,
        )

    def _current_player(self, s: RouletteState) -> Tensor:
        return s.current_player
