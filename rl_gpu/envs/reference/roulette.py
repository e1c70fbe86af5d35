"""Scalar reference of two-player Russian roulette, one game at a time.

Written from the rules, not from the tensor code, so that a parity test between the two means something:

- Six chambers; one of them (``live``) holds the round. The hammer starts at chamber 0; seat 0 acts first.
- FIRE: if the current chamber is live, the firer gets -1, the other seat +1, and the game is over.
  Otherwise the cylinder advances one chamber and the turn passes.
- PEEK (once per seat per game): the peeker learns whether the current chamber is live; the turn stays.
- SKIP (once per seat per game): the turn passes; the chamber does not move.
- What a seat learnt by peeking is forgotten as soon as the chamber moves.

The observation is what the seat to act may know, never ``live``:
``[chamber / 5, own PEEK left, own SKIP left, opponent PEEK left, opponent SKIP left, own PEEK result]``
with the PEEK result +1 (current chamber live), -1 (blank) or 0 (not peeked at this chamber).

The constants repeat the tensor module's values on purpose; a test asserts that both agree.
"""

from __future__ import annotations

import copy
import dataclasses
import random
from dataclasses import dataclass, field
from typing import Any

FIRE, PEEK, SKIP = 0, 1, 2
NUM_ACTIONS = 3
NUM_CHAMBERS = 6
MAX_GAME_LENGTH = 10
"""Five blanks and the live round fired, plus both seats' PEEK and SKIP."""

PEEK_UNKNOWN, PEEK_BLANK, PEEK_LIVE = 0, 1, 2

_SEEN_VALUE = {PEEK_UNKNOWN: 0.0, PEEK_BLANK: -1.0, PEEK_LIVE: 1.0}


@dataclass
class RouletteGame:
    """One game of roulette in plain Python values.

    Fields use the names and encodings of :class:`rl_gpu.envs.roulette.RouletteState` (one row of it),
    plus ``finished``, which the tensor environment tracks in its base class instead.
    """

    live: int
    """The chamber holding the live round, 0..5."""
    chamber: int = 0
    """The chamber under the hammer, 0..5."""
    current_player: int = 0
    """The seat to act, 0 or 1."""
    peek_available: list[bool] = field(default_factory=lambda: [True, True])
    """Per seat: PEEK not used yet."""
    skip_available: list[bool] = field(default_factory=lambda: [True, True])
    """Per seat: SKIP not used yet."""
    peek_result: list[int] = field(default_factory=lambda: [PEEK_UNKNOWN, PEEK_UNKNOWN])
    """Per seat: what it saw when peeking at the current chamber (PEEK_UNKNOWN/BLANK/LIVE)."""
    finished: bool = False
    """Someone fired the live round; no further action is allowed."""

    def __post_init__(self) -> None:
        self.peek_available = [bool(v) for v in self.peek_available]
        self.skip_available = [bool(v) for v in self.skip_available]
        self.peek_result = [int(v) for v in self.peek_result]
        if not 0 <= self.live < NUM_CHAMBERS or not 0 <= self.chamber < NUM_CHAMBERS:
            raise ValueError(f"chamber and live must be in 0..{NUM_CHAMBERS - 1}: {self}")
        if self.current_player not in (0, 1):
            raise ValueError(f"current_player must be 0 or 1: {self}")
        if len(self.peek_available) != 2 or len(self.skip_available) != 2 or len(self.peek_result) != 2:
            raise ValueError(f"per-seat fields need exactly two entries: {self}")
        if any(r not in _SEEN_VALUE for r in self.peek_result):
            raise ValueError(f"peek_result entries must be PEEK_UNKNOWN/BLANK/LIVE: {self}")

    @classmethod
    def new(cls, rng: random.Random) -> RouletteGame:
        """A fresh game with the live round in a uniformly random chamber."""
        return cls(live=rng.randrange(NUM_CHAMBERS))

    def legal_actions(self) -> list[bool]:
        """``[FIRE, PEEK, SKIP]`` legality for the seat to act (FIRE always is)."""
        me = self.current_player
        return [True, self.peek_available[me], self.skip_available[me]]

    def observation(self) -> list[float]:
        """The six observation values of the seat to act (see the module docstring)."""
        me = self.current_player
        other = 1 - me
        return [
            self.chamber / (NUM_CHAMBERS - 1),
            float(self.peek_available[me]),
            float(self.skip_available[me]),
            float(self.peek_available[other]),
            float(self.skip_available[other]),
            _SEEN_VALUE[self.peek_result[me]],
        ]

    def step(self, action: int) -> tuple[tuple[float, float], bool]:
        """Play ``action`` for the seat to act; returns ``((reward seat 0, reward seat 1), terminated)``.

        Raises:
            ValueError: the game is over, or ``action`` is not a legal action index here.
        """
        if self.finished:
            raise ValueError("the game is over")
        if isinstance(action, bool) or action not in (FIRE, PEEK, SKIP):
            raise ValueError(f"action must be FIRE (0), PEEK (1) or SKIP (2), got {action!r}")
        if not self.legal_actions()[action]:
            raise ValueError(f"action {action} is not legal for seat {self.current_player} now")
        me = self.current_player
        other = 1 - me
        if action == FIRE:
            if self.chamber == self.live:
                self.finished = True
                reward = [0.0, 0.0]
                reward[me] = -1.0
                reward[other] = 1.0
                return (reward[0], reward[1]), True
            self.chamber += 1
            self.peek_result = [PEEK_UNKNOWN, PEEK_UNKNOWN]
            self.current_player = other
        elif action == PEEK:
            self.peek_available[me] = False
            self.peek_result[me] = PEEK_LIVE if self.chamber == self.live else PEEK_BLANK
        else:
            self.skip_available[me] = False
            self.current_player = other
        return (0.0, 0.0), False

    def get_state(self) -> RouletteGame:
        """An independent copy of the game."""
        return copy.deepcopy(self)

    def set_state(self, state: RouletteGame) -> None:
        """Become an independent copy of ``state``."""
        copied = copy.deepcopy(state)
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(copied, f.name))

    @classmethod
    def from_row(cls, row: Any) -> RouletteGame:
        """Build a game from one row of a ``RouletteState`` (fields indexed by row: 0-d and ``[2]`` tensors).

        Only ``int()``, ``bool()`` and iteration are used, so any object with those attributes works.
        """
        return cls(
            live=int(row.live),
            chamber=int(row.chamber),
            current_player=int(row.current_player),
            peek_available=[bool(v) for v in row.peek_available],
            skip_available=[bool(v) for v in row.skip_available],
            peek_result=[int(v) for v in row.peek_result],
        )

    def as_row(self) -> dict[str, Any]:
        """This game as one row of a ``RouletteState``, keyed by field name (without ``finished``)."""
        return {
            "chamber": self.chamber,
            "live": self.live,
            "current_player": self.current_player,
            "peek_available": list(self.peek_available),
            "skip_available": list(self.skip_available),
            "peek_result": list(self.peek_result),
        }
