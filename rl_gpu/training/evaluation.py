"""Evaluating a policy on fresh environments: win rates with confidence intervals, per seat, and returns."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from torch import Tensor

from rl_gpu.collect.reference import collect, episode_horizon
from rl_gpu.core.seeding import derive_seed
from rl_gpu.core.types import Actor, VecEnv
from rl_gpu.envs.seat_agents import seat_game


def normal_half_width(std: float, n: int, z: float = 1.959964) -> float:
    """Half-width of the 95% normal-approximation interval of a mean of ``n`` values of standard deviation ``std``."""
    return z * std / math.sqrt(n)


def wilson_interval(successes: int, trials: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (95% by default); ``(0, 1)`` with no trials."""
    if trials <= 0:
        return 0.0, 1.0
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def improvement_z(p_new: float, n_new: int, p_old: float, n_old: int) -> float:
    """z statistic of ``p_new - p_old`` for two independent proportions (unpooled standard error)."""
    se = math.sqrt(p_new * (1 - p_new) / max(n_new, 1) + p_old * (1 - p_old) / max(n_old, 1))
    if se == 0:
        return math.inf if p_new > p_old else (0.0 if p_new == p_old else -math.inf)
    return (p_new - p_old) / se


@dataclass
class SeatResult:
    """Outcome counts of the games the learner played from one seat."""

    seat: int
    games: int
    wins: int
    win_rate: float
    ci_low: float
    ci_high: float


WIN_FIELDS = ("wins", "win_rate", "ci_low", "ci_high", "seats")
"""What only a game of several players reports (a single-agent task's "win" would be any positive return)."""


@dataclass
class EvalResult:
    """What :func:`evaluate_policy` measured. Win rates count episodes with a positive learner return; they are
    reported (:meth:`to_dict`) for games of several players only."""

    episodes: int
    wins: int
    win_rate: float
    ci_low: float
    ci_high: float
    mean_return: float
    return_ci: float
    """half-width of the 95% normal-approximation interval of ``mean_return``"""
    mean_length: float
    seats: list[SeatResult]
    seed: int
    deterministic: bool
    num_players: int = 2
    """Players of the game (1: a single-agent task, whose record leaves the win counts out)."""
    successes: int | None = None
    """Episodes that ended in the task's own success (a ``success`` reward term, as ``PandaPickCube-v0`` logs), when
    the task has one; None otherwise."""
    tasks: list[dict] | None = None
    """A batch of several tasks (:mod:`rl_gpu.envs.multitask`): each task's ``{"task", "episodes", "mean_return",
    "return_ci"}``; None otherwise."""

    def to_dict(self) -> dict:
        data = asdict(self)
        players = data.pop("num_players")
        if self.successes is None:
            data.pop("successes")
        if self.tasks is None:
            data.pop("tasks")
        return {k: v for k, v in data.items() if players > 1 or k not in WIN_FIELDS}

    def success_line(self) -> str:
        """``"success rate p [lo, hi] (95% Wilson CI), k/n episodes"``, or "" for a task without a success."""
        if self.successes is None:
            return ""
        lo, hi = wilson_interval(self.successes, self.episodes)
        return (f"success rate {self.successes / self.episodes:.4f} [{lo:.4f}, {hi:.4f}] (95% Wilson CI), "
                f"{self.successes}/{self.episodes} episodes")

    @classmethod
    def from_dict(cls, data: dict) -> EvalResult:
        """Inverse of :meth:`to_dict` (a record without win counts is a single-agent task's)."""
        data = dict(data)
        if "seats" not in data:
            return cls(**{**dict(wins=0, win_rate=0.0, ci_low=0.0, ci_high=0.0, seats=[]), **data}, num_players=1)
        seats = [SeatResult(**s) for s in data.pop("seats")]
        return cls(seats=seats, **data)

    def describe(self, multi_player: bool) -> str:
        """A few human-readable lines."""
        if not multi_player:
            return (
                f"mean return {self.mean_return:.2f} ± {self.return_ci:.2f} (95% CI) over {self.episodes} episodes, "
                f"mean length {self.mean_length:.1f}" + (f"; {self.success_line()}" if self.successes is not None
                                                         else "")
            ) + "".join(f"\n  task {i} {t['task']}: mean return {t['mean_return']:.2f} ± {t['return_ci']:.2f} over "
                        f"{t['episodes']} episodes" + (f", success {t['successes']}/{t['episodes']}"
                                                       if "successes" in t else "")
                        for i, t in enumerate(self.tasks or ()) if t["episodes"])
        # The game's own units first (chips for poker): a win rate alone hides how much each game wins or loses.
        lines = [
            f"mean return {self.mean_return:+.4f} ± {self.return_ci:.4f} (95% CI) per game; "
            f"win rate {self.win_rate:.4f} [{self.ci_low:.4f}, {self.ci_high:.4f}] (95% Wilson CI), "
            f"{self.wins}/{self.episodes} games"
        ]
        for s in self.seats:
            lines.append(
                f"  seat {s.seat} ({'first' if s.seat == 0 else 'second'} to act): {s.win_rate:.4f} "
                f"[{s.ci_low:.4f}, {s.ci_high:.4f}], {s.wins}/{s.games} games"
            )
        return "\n".join(lines)


@torch.inference_mode()
def evaluate_policy(
    policy: Actor,
    make_env: Callable[[int, int], VecEnv],
    episodes: int,
    seed: int,
    *,
    num_envs: int = 4096,
    opponent: Actor | None = None,
    deterministic: bool = False,
    gather: Callable[..., tuple[Tensor, ...]] | None = None,
    success_return: float | None = None,
) -> EvalResult:
    """Play ``episodes`` complete episodes of fresh environments and summarise the learner's results.

    Args:
        policy: the learner.
        make_env: ``make_env(num_envs, seed)`` builds a fresh batch (its own reset stream).
        episodes: how many episodes to play (rounded up to whole batches is *not* done: exactly this many).
        seed: seeds the environments, the seat draw and the policies' sampling.
        num_envs: the largest batch to use at once.
        opponent: the other seat's player in multi-player games (default uniform random).
        deterministic: the learner plays its most probable action.
        gather: ``gather(returns, lengths, seats, successes)`` (``[E]`` each, ``successes`` ``[R]``: each round's
            count of episodes that ended in the task's success) -> every process's together (torchrun), so the
            result is that of all of them.
        success_return: count an episode whose return reaches this as a success (``successes``), for a task
            without a success of its own.
    """
    if episodes <= 0:
        raise ValueError(f"episodes must be positive, got {episodes}")
    remaining, round_index = episodes, 0
    returns, lengths, seats, row_tasks, row_success, task_ids = [], [], [], [], [], None
    success_counts: list[Tensor] = []
    while remaining > 0:
        n = min(num_envs, remaining)
        env = make_env(n, derive_seed(seed, f"env-{round_index}"))
        device, players = env.device, env.spec.num_players
        policy_rng = torch.Generator(device=device).manual_seed(derive_seed(seed, f"policy-{round_index}"))
        opponent_rng = torch.Generator(device=device).manual_seed(derive_seed(seed, f"opponent-{round_index}"))
        learner_seat = None
        if seat_game(env) is not None:
            # A game's seats as agents: the learner plays one seat per game against the opponent, as in the
            # turn-based view (a world's mean over both seats of a zero-sum game would always be 0).
            players = env.spec.num_agents
            learner_seat = torch.randint(0, players, (n,), generator=opponent_rng, device=device)
        tally = collect(
            policy, env, episode_horizon(env), policy_rng, episodic=True, learner_seat=learner_seat,
            opponent=opponent, opponent_rng=opponent_rng, deterministic=deterministic, record="episodes",
        )
        if "success" in getattr(env, "reward_terms", ()):
            # Each row plays one episode within the horizon; a success is paid only at an episode's full length,
            # so the successes counted here are those of the rows' episodes (as many first episodes as there are).
            sums, _ = env.reward_term_totals()
            success_counts.append(sums["success"].detach().reshape(1).cpu())
        if getattr(env, "row_tasks", None) is not None:
            row_tasks.append(env.row_tasks)
            task_ids = env.task_ids
            if callable(getattr(env, "row_success", None)):
                row_success.append(env.row_success())
        # Rows whose episode never ended count as draws (return 0).
        returns.append(tally.episode_return)
        lengths.append(tally.episode_length)
        seats.append(tally.learner_seat)
        remaining -= n
        round_index += 1
    ret = torch.cat(returns).double().cpu()
    length = torch.cat(lengths).double().cpu()
    seat = torch.cat(seats).cpu()
    success = torch.cat(success_counts) if success_counts else torch.zeros(0, dtype=torch.float64)
    task = torch.cat(row_tasks) if row_tasks else torch.zeros(0, dtype=torch.long)
    hit = torch.cat(row_success) if row_success else torch.zeros(0, dtype=torch.bool)
    if gather is not None:
        ret, length, seat, success, task, hit = gather(ret, length, seat, success, task, hit)
        episodes = ret.numel()
    wins = int((ret > 0).sum())
    lo, hi = wilson_interval(wins, episodes)
    std = float(ret.std()) if episodes > 1 else 0.0
    seat_results = []
    for s in sorted(set(seat.tolist())):
        in_seat = seat == s
        games, seat_wins = int(in_seat.sum()), int(((ret > 0) & in_seat).sum())
        s_lo, s_hi = wilson_interval(seat_wins, games)
        seat_results.append(SeatResult(s, games, seat_wins, seat_wins / games, s_lo, s_hi))
    return EvalResult(
        episodes=episodes, wins=wins, win_rate=wins / episodes, ci_low=lo, ci_high=hi,
        mean_return=float(ret.mean()), return_ci=normal_half_width(std, episodes),
        mean_length=float(length.mean()), seats=seat_results, seed=seed, deterministic=deterministic,
        num_players=players, successes=(int((ret >= success_return).sum()) if success_return is not None
                                        else int(round(float(success.sum()))) if success_counts else None),
        tasks=None if task_ids is None else per_task(ret, task, task_ids, _episode_successes(hit, ret, success_return)),
    )


def _episode_successes(reported: Tensor, returns: Tensor, success_return: float | None) -> Tensor | None:
    """``[E]`` bool: the environment's own per-episode successes when it reports them, else returns reaching
    ``success_return``; None when neither applies."""
    if reported.numel():
        return reported
    return returns >= success_return if success_return is not None else None


def per_task(returns: Tensor, task: Tensor, task_ids: tuple[str, ...], success: Tensor | None = None) -> list[dict]:
    """Each task's episodes, mean return and its 95% interval's half-width (tasks without rows: 0 episodes, NaN),
    and with ``success`` (``[E]`` bool) its successes."""
    results = []
    for i, name in enumerate(task_ids):
        mine = task == i
        r = returns[mine]
        n = r.numel()
        std = float(r.std()) if n > 1 else 0.0
        results.append({"task": name, "episodes": n, "mean_return": float(r.mean()) if n else math.nan,
                        "return_ci": normal_half_width(std, n) if n else math.nan})
        if success is not None:
            results[-1]["successes"] = int(success[mine].sum())
    return results
