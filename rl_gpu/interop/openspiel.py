"""OpenSpiel interop: a policy read out as an OpenSpiel tabular policy, and its exploitability computed by
OpenSpiel's own routine (:func:`open_spiel.python.algorithms.exploitability.exploitability`). Requires
``open_spiel`` (``pip install rl-gpu[games]``).

Shape legend: S = OpenSpiel's information states of the game, A = actions.

An environment whose observation is exactly OpenSpiel's ``information_state_tensor`` (LeducHoldem-v0 is
``leduc_poker``'s, checked transition by transition by its parity test) maps a network to a tabular policy
one to one: each information state's tensor goes through the network once, in one batch.
"""

from __future__ import annotations

from typing import Any

import torch

from rl_gpu.core.errors import UsageError
from rl_gpu.envs.exploitability import ActionProbabilities, Exploitability, check_distribution

OPENSPIEL_GAMES: dict[str, str] = {"rl_gpu.envs.leduc:LeducHoldem": "leduc_poker"}
"""Environment classes (``"module:Class"``) whose observation is an OpenSpiel game's information state tensor,
and that game's name."""

INSTALL_HINT = "pip install 'rl-gpu[games]' (or pip install open_spiel)"

OPENSPIEL_DEFINITION = ("OpenSpiel's exploitability: (best response's return in seat 0 + in seat 1) / 2 "
                        "against the policy in the other seat, i.e. NashConv / 2; 0 for a Nash equilibrium")


def _openspiel() -> tuple[Any, Any, Any]:
    """``(pyspiel, open_spiel.python.policy, open_spiel.python.algorithms.exploitability)``, or a
    :class:`UsageError` saying how to install them."""
    try:
        import pyspiel
        from open_spiel.python import policy
        from open_spiel.python.algorithms import exploitability
    except ImportError as e:
        raise UsageError(f"computing exploitability with OpenSpiel needs the open_spiel package ({e}): "
                         f"{INSTALL_HINT}") from None
    return pyspiel, policy, exploitability


def load_game(name: str) -> Any:
    """OpenSpiel's game ``name`` (e.g. ``"leduc_poker"``)."""
    pyspiel, _, _ = _openspiel()
    return pyspiel.load_game(name)


def tabular_policy(game: Any, probs: ActionProbabilities) -> Any:
    """An OpenSpiel ``TabularPolicy`` of ``game`` holding ``probs`` at every information state of both seats.

    ``probs`` is called once on ``[S, *tensor shape]`` information state tensors and their ``[S, A]`` legal
    masks (:func:`rl_gpu.nn.probabilities.action_probabilities` makes one from a network).
    """
    _, policy_lib, _ = _openspiel()
    table = policy_lib.TabularPolicy(game)
    obs = torch.tensor([state.information_state_tensor() for state in table.states], dtype=torch.float32)
    mask = torch.as_tensor(table.legal_actions_mask).bool()
    values = probs(obs, mask).detach().to("cpu", torch.float64)
    check_distribution(values, mask)
    table.action_probability_array[:] = values.numpy()
    return table


def openspiel_exploitability(game_name: str, probs: ActionProbabilities) -> Exploitability:
    """Exploitability of ``probs`` (playing both seats of OpenSpiel's two-player zero-sum ``game_name``) in
    the game's utility (chips for poker), by OpenSpiel's exploitability routine on the tabular policy read out
    of ``probs`` at every information state; the per-seat best-response values come from OpenSpiel's
    ``best_response``."""
    _, _, exploitability = _openspiel()
    game = load_game(game_name)
    table = tabular_policy(game, probs)
    value = float(exploitability.exploitability(game, table))
    seats = tuple(float(exploitability.best_response(game, table, seat)["best_response_value"])
                  for seat in (0, 1))
    unit = "chips per game" if "poker" in game_name else "utility per game"
    return Exploitability(value, unit, seats, OPENSPIEL_DEFINITION)
