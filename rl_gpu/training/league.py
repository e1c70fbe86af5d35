"""Self-play against a league: the learner's latest self, frozen past snapshots and fixed baselines, all played
in one batch, with Elo ratings and prioritised fictitious self-play (PFSP).

Shape legend: N = rows (games) of an iteration, K = league members.

Members (:class:`~rl_gpu.nn.opponents.StackedActors`, one batched forward for all; for a learner with memory
:class:`~rl_gpu.nn.recurrent_opponents.StackedRecurrentActors`, each row's state carried by the collector): member
0 is the learner as it is at the start of the iteration (``latest``); members ``1..P`` hold snapshots copied from
the learner every ``snapshot_every`` iterations, the oldest replaced once ``P`` are held; the last member is the
uniform-random baseline. Before each iteration every block of rows (:func:`~rl_gpu.nn.opponents.block_count`: up
to 256 equal blocks) is assigned a member, drawn independently from the mixture::

    latest_share * [latest] + baseline_share * [baseline] + (1 - latest_share - baseline_share) * PFSP

where PFSP picks snapshot ``k`` with probability proportional to ``f(x_k)``, ``x_k`` = the learner's expected
score against ``k`` from the ratings (AlphaStar's weighting): ``hard`` ``(1 - x)^2`` prefers the snapshots the
learner beats least, ``variance`` ``x (1 - x)`` those of its own level, ``uniform`` all alike. With no snapshot
yet the PFSP share goes to ``latest``.

Ratings: Elo, the baseline anchored at 0 (the learner starts there too: an untrained network plays almost
uniformly). An iteration's games against one member count as one match, scored by their mean: the learner's
score against member ``k`` (win 1, draw 1/2, loss 0) over its ``n_k > 0`` games, ``s_k``, against the Elo
expectation ``e_k = 1 / (1 + 10^((R_k - R_learner) / 400))``, moves ``R_k`` by ``-elo_k * (s_k - e_k)`` and
the learner's by ``+elo_k * (s_k - e_k)``, summed over the members it met. Games against ``latest`` (a mirror
match) do not count. Everything stays on the device: no host read per iteration.

A game's seats as agents (:mod:`rl_gpu.envs.seat_agents`, ``agents`` M > 1): the members play the ``N * M`` agent
rows in blocks of whole worlds; a world assigned ``latest`` is the learner playing every seat (plain self-play,
every seat learns), any other world gives the learner one seat and the member the others (the algorithm's
``controlled``, recorded in the rollout). Rollouts there are
continuing (several games per world): each game that ends in a rated world counts, scored from the learner's seat.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from rl_gpu.algos.base import Iteration, PhaseTimer, no_phase
from rl_gpu.data.rollout import Rollout
from rl_gpu.nn.opponents import block_count
from rl_gpu.nn.recurrent_opponents import stacked_opponents

PFSP_KINDS = ("hard", "variance", "uniform")
LEAGUE_METRICS = ("league/elo_learner", "league/pool_size", "league/score_vs_league")
"""What :meth:`SelfPlay.iterate` adds to the algorithm's metrics: the learner's rating, the snapshots held,
and the learner's mean score (win 1, draw 1/2) in the iteration's games against frozen members."""


@dataclass(frozen=True)
class LeagueSettings:
    snapshot_every: int = 10
    """iterations between snapshots of the learner joining the pool"""
    pool_size: int = 8
    """most snapshots held (the oldest is replaced)"""
    pfsp: Literal["hard", "variance", "uniform"] = "variance"
    """PFSP weighting of snapshots by the learner's expected score x against them"""
    latest_share: float = 0.5
    """share of rows played against the learner's latest self"""
    baseline_share: float = 0.1
    """share of rows played against the uniform-random baseline"""
    elo_k: float = 16.0
    """Elo step per iteration"""

    def __post_init__(self) -> None:
        if self.snapshot_every < 1 or self.pool_size < 1:
            raise ValueError(f"snapshot_every and pool_size must be at least 1, got {self.snapshot_every} and "
                             f"{self.pool_size}")
        if self.pfsp not in PFSP_KINDS:
            raise ValueError(f"unknown PFSP weighting {self.pfsp!r}; known: {', '.join(PFSP_KINDS)}")
        shares = (self.latest_share, self.baseline_share)
        if not all(0.0 <= s <= 1.0 for s in shares) or sum(shares) > 1.0:
            raise ValueError(f"latest_share and baseline_share must be in [0, 1] with a sum of at most 1, got "
                             f"{self.latest_share} and {self.baseline_share}")
        if not (self.elo_k > 0 and math.isfinite(self.elo_k)):
            raise ValueError(f"elo_k must be positive, got {self.elo_k}")


def elo_expected(rating: Tensor, other: Tensor) -> Tensor:
    """Expected score of a player rated ``rating`` against ``other``: ``1 / (1 + 10^((other - rating) / 400))``."""
    return 1.0 / (1.0 + torch.pow(10.0, (other - rating) / 400.0))


def elo_update(rating: Tensor, other: Tensor, score: Tensor, k: float) -> tuple[Tensor, Tensor]:
    """Both ratings after a result ``score`` (1 win, 1/2 draw, 0 loss, or a mean of such) of ``rating``'s
    player against ``other``'s: each moves by ``k`` times the surprise ``score - expected``."""
    delta = k * (score - elo_expected(rating, other))
    return rating + delta, other - delta


def pfsp_weights(expected_score: Tensor, kind: str) -> Tensor:
    """Unnormalised PFSP weights of opponents from the learner's expected score ``x`` against each:
    ``hard`` ``(1 - x)^2``, ``variance`` ``x (1 - x)``, ``uniform`` 1."""
    x = expected_score
    if kind == "hard":
        return (1.0 - x).square()
    if kind == "variance":
        return x * (1.0 - x)
    if kind == "uniform":
        return torch.ones_like(x)
    raise ValueError(f"unknown PFSP weighting {kind!r}; known: {', '.join(PFSP_KINDS)}")


class League:
    """The members, their ratings and the row assignment of a self-play run (see the module docstring).

    Args:
        learner: the learner's policy (an :class:`~rl_gpu.nn.actor_critic.ActorCritic`).
        num_rows: N, rows (games, or worlds of M agents) per iteration.
        settings: the league's settings.
        seed: seeds the assignment draws.
        agents: M, the agents (seats) of a world; the members then play ``N * M`` agent rows, whole worlds per
            block.
    """

    def __init__(self, learner: nn.Module, num_rows: int, settings: LeagueSettings, seed: int,
                 agents: int = 1) -> None:
        self.settings = settings
        self.learner = learner
        self.agents = agents
        self.pool = settings.pool_size
        self.size = self.pool + 2
        self.baseline = self.size - 1
        self.members = stacked_opponents(learner, self.size, num_rows * agents, num_blocks=block_count(num_rows))
        self.device = self.members.slot.device
        self.num_rows = num_rows
        self.rng = torch.Generator(device=self.device).manual_seed(seed)
        f64 = {"dtype": torch.float64, "device": self.device}
        self.rating = torch.zeros(self.size, **f64)
        """Elo per member; member 0 (latest) carries the learner's."""
        self.games = torch.zeros(self.size, **f64)
        self.score = torch.zeros(self.size, **f64)
        self.last_score_vs_league = torch.zeros((), **f64)
        self.iteration = 0
        self.snapshots_added = 0
        self.added_at = [0] * self.size
        """The iteration each member's current snapshot was taken at."""

    @property
    def world_slot(self) -> Tensor:
        """``[N]``: the member playing each row (each world: its seats are in one block)."""
        return self.members.slot.view(self.num_rows, self.agents)[:, 0]

    def _results(self, rollout: Rollout) -> tuple[Tensor, Tensor]:
        """``[N]`` games and the learner's summed score (win 1, draw 1/2) in them, per row of the rollout."""
        if self.agents == 1:  # episodic: one game per row
            ret = (rollout.episode_return * rollout.done).sum(0).double()
            return torch.ones_like(ret), (ret > 0).double() + 0.5 * (ret == 0).double()
        done = rollout.done.double()  # [T, N]; in a rated world the learner controls one seat
        mine = (rollout.episode_return * rollout.controlled).sum(-1)
        result = (mine > 0).double() + 0.5 * (mine == 0).double()
        return done.sum(0), (done * result).sum(0)

    @property
    def pool_held(self) -> int:
        """Snapshots held (members ``1..pool_held``)."""
        return min(self.snapshots_added, self.pool)

    def distribution(self) -> Tensor:
        """``[K]``: the probability that a row is assigned each member (module docstring)."""
        s = self.settings
        probs = torch.zeros(self.size, dtype=torch.float64, device=self.device)
        probs[self.baseline] = s.baseline_share
        pfsp_share = 1.0 - s.latest_share - s.baseline_share
        held = self.pool_held
        if held == 0:
            probs[0] = s.latest_share + pfsp_share
            return probs
        probs[0] = s.latest_share
        expected = elo_expected(self.rating[0], self.rating[1:1 + held])
        weights = pfsp_weights(expected, s.pfsp)
        total = weights.sum()
        # Every weight can vanish (e.g. "hard" when the learner is sure to beat all): uniform over the pool.
        weights = torch.where(total > 0, weights / total.clamp(min=1e-300), torch.full_like(weights, 1.0 / held))
        probs[1:1 + held] = pfsp_share * weights
        return probs

    def before_iteration(self) -> None:
        """Refresh ``latest`` from the learner, add a snapshot when one is due, and assign the rows."""
        members = self.members
        members.load_member(0, self.learner)
        if self.iteration == 0:
            members.make_uniform(self.baseline)
        elif self.iteration % self.settings.snapshot_every == 0:
            k = 1 + self.snapshots_added % self.pool
            members.copy_member(0, k)
            self.rating[k] = self.rating[0]
            self.games[k] = 0.0
            self.score[k] = 0.0
            self.added_at[k] = self.iteration
            self.snapshots_added += 1
        members.assign(torch.multinomial(self.distribution().float(), members.num_blocks, replacement=True,
                                         generator=self.rng))

    def after_iteration(self, rollout: Rollout) -> dict[str, Tensor]:
        """Tally the iteration's games by member, update the ratings; returns :data:`LEAGUE_METRICS`."""
        count, result = self._results(rollout)
        slot = self.world_slot
        games = torch.zeros(self.size, dtype=torch.float64, device=self.device)
        games.index_add_(0, slot, count)
        score = torch.zeros_like(games).index_add_(0, slot, result)
        games[0] = 0.0  # mirror matches are not rated
        score[0] = 0.0
        self.games += games
        self.score += score
        played = games > 0
        mean = torch.where(played, score / games.clamp(min=1.0), 0.0)
        surprise = torch.where(played, mean - elo_expected(self.rating[0], self.rating), 0.0)
        step = self.settings.elo_k * surprise
        rated = games.sum()
        learner_step = step.sum()
        step[self.baseline] = 0.0  # the anchor
        self.rating -= step
        self.rating[0] += learner_step
        self.last_score_vs_league = torch.where(rated > 0, score.sum() / rated.clamp(min=1.0), 0.5)
        self.iteration += 1
        return {"league/elo_learner": self.rating[0].float(),
                "league/pool_size": torch.tensor(float(self.pool_held), device=self.device),
                "league/score_vs_league": self.last_score_vs_league.float()}

    def ratings_table(self) -> dict[str, Any]:
        """The ratings of every member held (one host read), for ``ratings.json``."""
        rating, games, score = (t.cpu().tolist() for t in (self.rating, self.games, self.score))
        rows = [{"member": "learner", "elo": rating[0], "games": int(sum(games)), "learner_score": None}]
        for k in sorted(range(1, 1 + self.pool_held), key=lambda k: self.added_at[k]):
            rows.append({"member": f"snapshot@{self.added_at[k]}", "elo": rating[k], "games": int(games[k]),
                         "learner_score": score[k] / games[k] if games[k] else None})
        rows.append({"member": "uniform_random", "elo": rating[self.baseline], "games": int(games[self.baseline]),
                     "learner_score": score[self.baseline] / games[self.baseline] if games[self.baseline] else None})
        return {"iteration": self.iteration, "anchor": "uniform_random = 0", "elo_k": self.settings.elo_k,
                "pfsp": self.settings.pfsp, "members": rows}

    def state_dict(self) -> dict[str, Any]:
        return {"members": self.members.state_dict(), "rng": self.rng.get_state(), "rating": self.rating,
                "games": self.games, "score": self.score, "iteration": self.iteration,
                "snapshots_added": self.snapshots_added, "added_at": list(self.added_at)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.members.load_state_dict(state["members"])
        self.rng.set_state(state["rng"].cpu())
        for name in ("rating", "games", "score"):
            getattr(self, name).copy_(state[name])
        self.iteration = int(state["iteration"])
        self.snapshots_added = int(state["snapshots_added"])
        self.added_at = [int(v) for v in state["added_at"]]


class SelfPlay:
    """An :class:`~rl_gpu.algos.base.Algorithm` whose opponent is a :class:`League`: each :meth:`iterate`
    assigns the rows, runs the wrapped algorithm's iteration (its rollout engine plays the league's members in
    the opponent's seat) and rates the games. Everything else is the wrapped algorithm's.

    The wrapped algorithm (its spec says ``self_play``) has filled its opponent slot from ``Setup.opponent`` with
    the league's members and hands back its ``last_rollout`` (:class:`~rl_gpu.algos.ppo.algorithm.PPO` does).
    """

    def __init__(self, inner: Any, league: League) -> None:
        if getattr(inner, "opponent", None) is not league.members:
            raise ValueError(f"self-play needs an algorithm that plays Setup.opponent (PPO), not "
                             f"{type(inner).__name__}")
        self.inner = inner
        self.league = league
        self.metric_names = (*inner.metric_names, *LEAGUE_METRICS)
        self.num_steps = inner.num_steps

    @property
    def resume_notes(self) -> tuple[str, ...]:
        return self.inner.resume_notes

    @property
    def policy(self) -> nn.Module:
        return self.inner.policy

    def iterate(self, *, phase: PhaseTimer = no_phase) -> Iteration:
        self.league.before_iteration()
        result = Iteration.of(self.inner.iterate(phase=phase))
        return result.adding(learner=self.league.after_iteration(self.inner.last_rollout))

    def initial_policy(self) -> nn.Module:
        return self.inner.initial_policy()

    def set_progress(self, fraction: float | Tensor) -> None:
        self.inner.set_progress(fraction)

    def state_dict(self) -> dict[str, Any]:
        return {**self.inner.state_dict(), "league": self.league.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = dict(state)
        self.league.load_state_dict(state.pop("league"))
        self.inner.load_state_dict(state)
