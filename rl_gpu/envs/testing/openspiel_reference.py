"""OpenSpiel's ``leduc_poker`` as the scalar reference of :class:`~rl_gpu.envs.leduc.LeducHoldem`, for
:func:`~rl_gpu.envs.testing.check_reference_parity`. Requires ``open_spiel`` (``pip install rl-gpu[games]``;
imported here, not by the environment).

A reference state is ``(cards, actions)``: the three cards of the deal (seat 0's, seat 1's, the public one)
and the players' actions so far. OpenSpiel's state is rebuilt from it by applying the same chance outcomes
(the card ids) and the same actions, so both sides play exactly the same deal::

    from rl_gpu.envs.leduc import LeducHoldem
    from rl_gpu.envs.testing import check_reference_parity
    from rl_gpu.envs.testing.openspiel_reference import OpenSpielLeduc, leduc_to_reference

    check_reference_parity(LeducHoldem(512, seed=0), OpenSpielLeduc, to_reference=leduc_to_reference)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyspiel

from rl_gpu.envs.leduc import NO_ACTION, NUM_CARDS, SLOTS_PER_ROUND

LeducReferenceState = tuple[tuple[int, int, int], tuple[int, ...]]
"""``(cards, actions)``: seat 0's, seat 1's and the public card, then every player action so far."""

_GAME = None


def leduc_game() -> pyspiel.Game:
    """OpenSpiel's two-player ``leduc_poker`` with its default parameters (loaded once)."""
    global _GAME
    if _GAME is None:
        _GAME = pyspiel.load_game("leduc_poker")
    return _GAME


class OpenSpielLeduc:
    """One OpenSpiel ``leduc_poker`` game behind the :class:`~rl_gpu.envs.testing.ScalarReference` protocol.

    ``observation()`` is ``information_state_tensor`` of the seat to act, or after the last action, of the
    seat that took it (what the tensor environment's ``final_obs`` shows). The public card is dealt from the
    stored deal as soon as OpenSpiel asks for it, so the wrapped state is never left at a chance node.
    """

    def __init__(self) -> None:
        self.set_state(((0, 1, 2), ()))

    @property
    def current_player(self) -> int:
        return self._last_actor if self.state.is_terminal() else self.state.current_player()

    def set_state(self, state: LeducReferenceState) -> None:
        cards, actions = state
        cards = tuple(int(c) for c in cards)
        if len(cards) != 3 or len(set(cards)) != 3 or not all(0 <= c < NUM_CARDS for c in cards):
            raise ValueError(f"a deal is three distinct cards in 0..{NUM_CARDS - 1}, got {cards}")
        self.cards = cards
        self.actions: list[int] = []
        self.state = leduc_game().new_initial_state()
        self._last_actor = 0
        self.state.apply_action(cards[0])
        self.state.apply_action(cards[1])
        for action in actions:
            self.step(int(action))

    def copy(self) -> OpenSpielLeduc:
        """An independent copy (OpenSpiel's own state clone, faster than replaying the game)."""
        copied = object.__new__(OpenSpielLeduc)
        copied.cards, copied.actions, copied._last_actor = self.cards, list(self.actions), self._last_actor
        copied.state = self.state.clone()
        return copied

    def get_state(self) -> LeducReferenceState:
        return self.cards, tuple(self.actions)

    def step(self, action: int) -> tuple[tuple[float, float], bool]:
        if self.state.is_terminal():
            raise ValueError("the game is over")
        if action not in self.state.legal_actions():
            raise ValueError(f"action {action} is not legal here; legal: {self.state.legal_actions()}")
        self._last_actor = self.state.current_player()
        self.state.apply_action(action)
        self.actions.append(action)
        if self.state.is_chance_node():
            self.state.apply_action(self.cards[2])
        if self.state.is_terminal():
            r0, r1 = self.state.returns()
            return (float(r0), float(r1)), True
        return (0.0, 0.0), False

    def observation(self) -> list[float]:
        return list(self.state.information_state_tensor(self.current_player))

    def legal_actions(self) -> list[bool]:
        legal = set(self.state.legal_actions())
        return [a in legal for a in range(3)]


def leduc_to_reference(row: Any) -> LeducReferenceState:
    """One row of a :class:`~rl_gpu.envs.leduc.LeducState` (0-d and ``[k]`` tensors) as a reference state: the
    deal and the actions recorded in ``betting``, round 1 then round 2."""
    codes = [int(c) for c in row.betting.flatten().tolist()]
    actions = tuple(c - 1 for c in codes if c != NO_ACTION)
    return tuple(int(c) for c in row.cards.tolist()), actions


def leduc_deal_to_inner(state: LeducReferenceState) -> dict[str, Any]:
    """A reference state with no action yet as one row of a :class:`~rl_gpu.envs.leduc.LeducState` (for
    ``check_reference_parity(initial_states=...)``)."""
    cards, actions = state
    if actions:
        raise ValueError("only fresh deals (no action yet) can be injected")
    return {"cards": list(cards), "round": 0, "current_player": 0, "contribution": [1, 1], "raises": 0,
            "round_actions": 0, "betting": [[NO_ACTION] * SLOTS_PER_ROUND] * 2}


def all_deals() -> Iterator[tuple[int, int, int]]:
    """Every deal of three distinct cards, in order (120)."""
    for a in range(NUM_CARDS):
        for b in range(NUM_CARDS):
            for c in range(NUM_CARDS):
                if len({a, b, c}) == 3:
                    yield a, b, c


def all_action_sequences(cards: tuple[int, int, int]) -> list[tuple[int, ...]]:
    """Every complete sequence of player actions of the deal ``cards``, as OpenSpiel's game tree has them."""
    sequences = []
    stack = [OpenSpielLeduc()]
    stack[0].set_state((cards, ()))
    while stack:
        game = stack.pop()
        for action, legal in enumerate(game.legal_actions()):
            if legal:
                child = game.copy()
                if child.step(action)[1]:
                    sequences.append(tuple(child.actions))
                else:
                    stack.append(child)
    return sequences
