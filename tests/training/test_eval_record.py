"""An evaluation's record speaks the task's units: a single-agent task's has no win counts ("win rate 1.0" for an
untrained CartPole policy said nothing), a game's keeps them per seat; both read back as they were written."""

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
