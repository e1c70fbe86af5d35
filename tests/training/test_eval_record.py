"""An evaluation's record speaks the task's units: a single-agent task's has no win counts ("win rate 1.0" for an
untrained CartPole policy said nothing), a game's keeps them per seat; both read back as they were written."""

import torch

from rl_gpu.envs.registry import make
from rl_gpu.nn.actor_critic import UniformRandomPolicy
from rl_gpu.training.evaluation import WIN_FIELDS, EvalResult, evaluate_policy


def _evaluate(env_id):
    return evaluate_policy(UniformRandomPolicy(), lambda n, s: make(env_id, num_envs=n, seed=s), 16, seed=3)


def test_a_single_agent_record_has_no_win_counts_and_a_games_has_them_per_seat():
    solo, game = _evaluate("CartPole-v1"), _evaluate("RussianRoulette-v0")
    solo_record, game_record = solo.to_dict(), game.to_dict()
    assert not set(WIN_FIELDS) & set(solo_record) and solo_record["mean_return"] == solo.mean_return
    assert set(WIN_FIELDS) <= set(game_record) and sum(s["games"] for s in game_record["seats"]) == 16
    for result, record in ((solo, solo_record), (game, game_record)):
        back = EvalResult.from_dict(record)
        assert back.to_dict() == record and back.num_players == result.num_players


def test_a_task_with_a_success_term_reports_its_success_rate():
    def scored(n, s):  # a task that logs a per-episode success, here 3 of every round's episodes
        env = make("CartPole-v1", num_envs=n, seed=s)
        env.reward_terms = ("success",)
        env.reward_term_totals = lambda: ({"success": torch.tensor(3.0, dtype=torch.float64)}, torch.tensor(n))
        return env

    def gathered(*columns):  # two processes with the same episodes
        return tuple(torch.cat([c, c]) for c in columns)

    alone = evaluate_policy(UniformRandomPolicy(), scored, 20, seed=3, num_envs=10)
    together = evaluate_policy(UniformRandomPolicy(), scored, 20, seed=3, num_envs=10, gather=gathered)
    assert (alone.successes, alone.episodes) == (6, 20) and (together.successes, together.episodes) == (12, 40)
    record = alone.to_dict()
    assert record["successes"] == 6 and EvalResult.from_dict(record).to_dict() == record
    assert "success rate 0.3000" in alone.describe(False)
    assert "successes" not in _evaluate("CartPole-v1").to_dict()
