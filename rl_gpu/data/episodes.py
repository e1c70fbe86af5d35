"""Episode accounting, in one place: what the episodes that ended in a batch of steps amount to (count, mean
return, mean length, win rate), for training iterations (on-policy rollouts, replay transitions, population
members) and evaluation alike.

Shape legend: T = steps, N = environments (rows), K = population members.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

EPISODE_METRICS = ("episodes", "episode_return", "episode_length", "win_rate")
"""What :func:`episode_metrics` returns."""


def episode_metrics(ended: Tensor, episode_return: Tensor, episode_length: Tensor,
                    dim: int | None = None) -> dict[str, Tensor]:
    """The episodes that ended, summarised: ``episodes`` (count, int64), the mean ``episode_return`` and
    ``episode_length`` and the ``win_rate`` (share of positive returns) over them, 0 when none ended.

    Args:
        ended: ``[T, N]`` (any shape) bool: an episode ended at this step.
        episode_return: the same shape: the ended episode's return there (anything elsewhere).
        episode_length: the same shape, int64: its length there.
        dim: reduce over this dimension only (``[T, K, N/K]`` -> ``[T, N/K]`` per member: pass the member axis
            first, ``[K, ...]``, and ``dim=1``); None: over every element (0-dim results).
    No host synchronisation.
    """
    def total(x: Tensor) -> Tensor:
        return x.sum() if dim is None else x.sum(dim)

    count = total(ended)
    denom = count.clamp(min=1).float()
    return {
        "episodes": count,
        "episode_return": total(torch.where(ended, episode_return, 0.0)) / denom,
        "episode_length": total(torch.where(ended, episode_length, 0)).float() / denom,
        "win_rate": total(ended & (episode_return > 0)).float() / denom,
    }


def agent_metrics(ended: Tensor, episode_return: Tensor, controlled: Tensor) -> dict[str, Tensor]:
    """Per-agent returns of the episodes that ended in a rollout of M agents: ``team_return`` (the controlled
    agents' returns summed, averaged over episodes), ``agent_return_min`` and ``agent_return_max`` (the lowest
    and highest of the controlled agents' mean returns: one agent left behind shows here, not in the mean).

    Args:
        ended: ``[T, N]`` bool: a world's episode ended at this step.
        episode_return: ``[T, N, M]``: each agent's return of the episode that ended there.
        controlled: ``[N, M]`` bool: the agents the learner plays.
    0-dim float tensors, 0 when no episode ended; no host synchronisation.
    """
    mine = ended[..., None] & controlled
    count = mine.sum((0, 1))                                               # [M] episodes per agent
    per_agent = torch.where(mine, episode_return, 0.0).sum((0, 1)) / count.clamp(min=1)
    played = count > 0
    team = torch.where(mine, episode_return, 0.0).sum() / ended.sum().clamp(min=1)
    low = torch.where(played, per_agent, torch.inf).amin()
    high = torch.where(played, per_agent, -torch.inf).amax()
    some = played.any()
    return {"team_return": team.float(), "agent_return_min": torch.where(some, low, 0.0).float(),
            "agent_return_max": torch.where(some, high, 0.0).float()}


class EpisodeTally(NamedTuple):
    """One episode per row (an evaluation's complete games), without the steps that led there."""

    episode_return: Tensor
    """``[N]`` float: the learner's return (with M agents: the controlled agents' mean); 0 for a row whose
    episode did not end."""
    episode_length: Tensor
    """``[N]`` int64: the episode's length (0 if it did not end)."""
    ended: Tensor
    """``[N]`` bool: the row's episode ended within the steps played."""
    learner_seat: Tensor
    """``[N]`` int64: the learner's seat."""

    @staticmethod
    def start(n: int, seat: Tensor) -> EpisodeTally:
        device = seat.device
        return EpisodeTally(torch.zeros(n, device=device), torch.zeros(n, dtype=torch.long, device=device),
                            torch.zeros(n, dtype=torch.bool, device=device), seat)

    def add(self, done: Tensor, episode_return: Tensor, episode_length: Tensor) -> EpisodeTally:
        """The tally after one step whose rows ``done`` (``[N]``) ended with these returns and lengths."""
        return self._replace(episode_return=self.episode_return + torch.where(done, episode_return, 0.0),
                             episode_length=self.episode_length + torch.where(done, episode_length, 0),
                             ended=self.ended | done)
