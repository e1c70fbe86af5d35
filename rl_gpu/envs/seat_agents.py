"""A turn-based game's seats as agents of one world, written in the id (``"RussianRoulette-v0?seats_as_agents=1"``):
the same game on the agent axis that multi-agent learners (``--algo mappo``, ``--algo ippo``) and collectors read.

Shape legend: N games, P seats (the game's ``num_players``), O one seat's observation, A actions.

The view changes no rule of the game, only how it is presented:

- ``obs`` ``[N, P, O]``: seat p's row is the game's observation *of seat p* (``_observe_seat``), whether or not p is
  to act, so each seat's row carries its own information state through the other seat's turns;
- ``acting`` ``[N, P]``: the one-hot of the seat to act; the other seat's action is ignored;
- ``action_mask`` ``[N, P, A]``: the game's legal actions in the acting seat's row, every action elsewhere;
- ``action`` ``[N, P]``: the acting seat's column is played;
- ``reward`` and ``episode_return`` ``[N, P]``: each seat's own (a win for one is a loss for the other);
- the ``critic`` group ``[N, P * O]``: every seat's observation joined (MAPPO's centralised critic: in a game of
  private cards, both hands).

Learning on it is self-play: the learner plays every seat unless told otherwise (``controlled``); a seat it does not
control is played by the opponent. Advantages follow each seat's own decisions (a step where a seat does not act is
transparent to it: :func:`rl_gpu.data.advantages.compute_gae` with ``weight``). Evaluation gives the learner one
seat per game, drawn at random, against the opponent (uniform random by default), so it reports the same win rates
per seat as the turn-based view, and the exact exploitability of a game that has one is that of the shared actor
(its input is a seat's observation, the same tensor the turn-based view gives the seat to act).
"""

from __future__ import annotations

import torch
from torch import Tensor

from rl_gpu.core.errors import UsageError

SEATS_PARAMETER = "seats_as_agents"
"""The id parameter that asks for the view (``=1``)."""

_classes: dict[type, type] = {}


def seat_agents_class(cls: type, env_id: str) -> type:
    """The subclass of the turn-based game ``cls`` presenting its seats as agents (the same class for the same
    game), or a one-line :class:`~rl_gpu.core.errors.UsageError` when ``cls`` is not a game that can be."""
    from rl_gpu.envs.base import TensorEnv

    name = getattr(cls, "__name__", cls)
    if not (isinstance(cls, type) and issubclass(cls, TensorEnv)) or cls.num_players < 2:
        raise UsageError(f"{env_id!r}: {SEATS_PARAMETER} presents the seats of a turn-based game (num_players >= 2) "
                         f"as agents; {name} is not one")
    if cls.num_agents != 1 or cls.action_shape or getattr(cls, "_observe_seat", None) is None:
        raise UsageError(f"{env_id!r}: {SEATS_PARAMETER} needs a game of discrete actions that observes any seat "
                         f"(an _observe_seat(inner, seat) method); {name} has none")
    if cls not in _classes:
        p, o = cls.num_players, tuple(cls.obs_shape)
        namespace = {"num_agents": p, "num_players": 1, "seat_game": cls, "critic_obs_shape": (p * _size(o),),
                     "mirror": None, "__module__": __name__, "__qualname__": f"{cls.__name__}Seats",
                     "__doc__": f"{cls.__name__}'s seats as agents of one world (:mod:`{__name__}`)."}
        _classes[cls] = type(f"{cls.__name__}Seats", (SeatAgents, cls), namespace)
    return _classes[cls]


def _size(shape: tuple[int, ...]) -> int:
    out = 1
    for d in shape:
        out *= int(d)
    return out


def seat_game(env: object) -> type | None:
    """The turn-based game an environment (or its class) presents as agents, or None when it is no such view."""
    cls = env if isinstance(env, type) else type(env)
    return getattr(cls, "seat_game", None)


class SeatAgents:
    """Placed before a turn-based :class:`~rl_gpu.envs.base.TensorEnv` in a class built by
    :func:`seat_agents_class`; every game method still receives the game's own inner state."""

    seat_game: type
    num_players: int
    num_agents: int

    def _to_act(self, inner) -> Tensor:
        return self.seat_game._current_player(self, inner)

    def _observe(self, inner) -> Tensor:
        n = inner[0].shape[0]
        return torch.stack([self._observe_seat(inner, torch.full((n,), p, dtype=torch.long, device=self.device))
                            for p in range(self.num_agents)], dim=1)

    def _observe_critic(self, inner) -> Tensor:
        return self._observe(inner).flatten(1).float()

    def _acting(self, inner) -> Tensor:
        return torch.nn.functional.one_hot(self._to_act(inner), self.num_agents).bool()

    def _legal_actions(self, inner) -> Tensor:
        legal = self.seat_game._legal_actions(self, inner)  # [N, A] for the seat to act
        return torch.where(self._acting(inner)[..., None], legal[:, None], True)

    def _current_player(self, inner) -> Tensor:
        return torch.zeros(inner[0].shape[0], dtype=torch.long, device=self.device)

    def _transition(self, inner, action: Tensor):
        played = action.gather(1, self._to_act(inner)[:, None]).squeeze(1)
        return self.seat_game._transition(self, inner, played)
