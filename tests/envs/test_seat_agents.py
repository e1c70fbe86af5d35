"""A turn-based game's seats as agents (rl_gpu/envs/seat_agents.py): the view steps exactly as the game, its
evaluation equals the turn-based one, exploitability reads through it, and self-play learns on it."""

from __future__ import annotations

import json

import pytest
import torch

from rl_gpu.core.errors import UsageError
from rl_gpu.envs import env_class, make
from rl_gpu.envs.testing import sample_actions
from rl_gpu.interop.exploitability import has_exploitability, measure_exploitability
from rl_gpu.nn.actor_critic import PolicyOutput, UniformRandomPolicy
from rl_gpu.training.evaluation import evaluate_policy

GAMES = ("RussianRoulette-v0", "LeducHoldem-v0")


def seats(game: str) -> str:
    return f"{game}?seats_as_agents=1"


@pytest.mark.parametrize("game", GAMES)
def test_the_view_steps_exactly_as_the_game(game):
    n, p = 64, 2
    base, view = make(game, num_envs=n, seed=3), make(seats(game), num_envs=n, seed=3)
    assert (view.spec.num_agents, view.spec.num_players, view.spec.obs_shape) == (p, 1, base.spec.obs_shape)
    assert view.spec.obs_groups["critic"] == (p * base.spec.obs_shape[0],)
    g = torch.Generator().manual_seed(0)
    b, v = base.reset(), view.reset()
    rows, ended = torch.arange(n), 0
    for step in range(40):
        to_act = b.current_player
        assert torch.equal(v.acting, torch.nn.functional.one_hot(to_act, p).bool()), step
        assert torch.equal(v.obs[rows, to_act], b.obs), step
        for seat in range(p):  # each seat's row is its own view, whether or not it is to act
            mine = base._observe_seat(base.state.inner, torch.full((n,), seat))
            assert torch.equal(v.obs[:, seat], mine), step
        assert torch.equal(v.critic_obs, v.obs.flatten(1)), step
        assert torch.equal(v.action_mask[rows, to_act], b.action_mask), step
        assert bool(v.action_mask[rows, 1 - to_act].all()), step  # the seat not to act may send anything
        action = sample_actions(base, b.action_mask, g)
        junk = torch.randint(0, base.num_actions, (n,), generator=g)  # ignored: not that seat's turn
        joint = torch.where(torch.nn.functional.one_hot(to_act, p).bool(), action[:, None], junk[:, None])
        b, v = base.step(action), view.step(joint)
        for name in ("reward", "terminated", "truncated", "episode_return", "episode_length"):
            assert torch.equal(getattr(v, name), getattr(b, name)), (step, name)
        for mine, theirs in zip(view.state.inner, base.state.inner):
            assert torch.equal(mine, theirs), step
        ended += int(b.done.sum())
    assert ended > n  # resets happened, and took the same fresh starts


def test_the_view_is_refused_where_it_does_not_apply():
    for bad, says in (("CartPole-v1?seats_as_agents=1", "turn-based game"),
                      ("RussianRoulette-v0?seats_as_agents=2", "is 1"),
                      ("RussianRoulette-v0?seats_as_agents=1&obs_mask=0,1", "neither obs_mask")):
        with pytest.raises(UsageError, match=says):
            env_class(bad)


class FirstLegal:
    """Plays the first legal action: the same game whichever view carries it."""

    is_continuous = False

    def act(self, obs, action_mask, generator=None, deterministic=False, **_):
        action = action_mask.long().argmax(-1)
        zeros = torch.zeros(obs.shape[0])
        return PolicyOutput(action, zeros, zeros)

    def value(self, obs, **_):
        return torch.zeros(obs.shape[0])


@pytest.mark.parametrize("game", GAMES)
def test_evaluation_gives_the_learner_one_seat_as_the_turn_based_view_does(game):
    def run(env_id):
        return evaluate_policy(FirstLegal(), lambda n, s: make(env_id, num_envs=n, seed=s), 300, seed=5,
                               num_envs=128, opponent=FirstLegal())

    turn_based, view = run(game), run(seats(game))
    assert view.num_players == 2 and view.episodes == 300
    assert view.to_dict() == turn_based.to_dict()
    assert {s.seat for s in view.seats} == {0, 1}


def test_exploitability_reads_the_game_through_the_view():
    cls = env_class(seats("RussianRoulette-v0"))
    assert has_exploitability(cls)
    ours = measure_exploitability(cls, UniformRandomPolicy())
    assert ours.value == measure_exploitability(env_class("RussianRoulette-v0"), UniformRandomPolicy()).value


@pytest.mark.parametrize("mode", [(), ("--parallel", "--seeds", "11", "12")])
def test_self_play_on_the_view_trains_and_is_measured(tmp_path, call_main, mode):
    """Alone or as a population (--parallel), every run's validations are scored by the exact exploitability."""
    from rl_gpu.cli.train import main

    code, out, err = call_main(main, "--env", seats("RussianRoulette-v0"), "--algo", "ippo", "--device", "cpu",
                               "--output", tmp_path, "--num-envs", 64, "--num-steps", 16, "--total-timesteps", 2048,
                               "--eval-every", 1, "--eval-episodes", 64, "--final-eval-episodes", 64, "--quiet",
                               *mode)
    assert code == 0, err
    for seed in (11, 12) if mode else (11,):
        summary = json.loads((tmp_path / f"seed-{seed}" / "summary.json").read_text())
        assert summary["exploitability"]["unit"] == "win probability"
        lines = (tmp_path / f"seed-{seed}" / "metrics.jsonl").read_text().splitlines()
        assert any("exploitability" in json.loads(line).get("validation", {}) for line in lines)


@pytest.mark.slow
def test_self_play_on_the_view_lowers_roulette_exploitability(tmp_path):
    """IPPO with the view's preset: 0.151 (uniform) -> 0.023 at 0.66M steps, 0.007 at 1.6M (seed 11)."""
    import rl_gpu

    run = rl_gpu.train(env=seats("RussianRoulette-v0"), algo="ippo", device="cpu", output=tmp_path,
                       total_timesteps=700_000, quiet=True)
    best = json.loads((tmp_path / "seed-11" / "summary.json").read_text())["exploitability"]
    assert best["best"] < 0.05, (run, best)


def test_ippo_with_memory_on_the_seats_resumes_exactly(tmp_path):
    """A paused run of one network with memory over the seats, resumed, ends as the run never paused: the agents'
    states travel in the checkpoint."""
    import dataclasses

    from rl_gpu.cli.presets import preset_config
    from rl_gpu.runtime.checkpoint import load_checkpoint
    from rl_gpu.training.runner import VOLATILE_METRICS, resume, train

    def config(out):
        return dataclasses.replace(preset_config(seats("RussianRoulette-v0"), algo="ippo"), device="cpu", seeds=(5,),
                                   memory="gru", memory_size=8, num_envs=16, num_steps=8, total_timesteps=384,
                                   eval_every=2, eval_episodes=32, final_eval_episodes=32, checkpoint_every=1,
                                   output=out, overwrite=True)

    def metrics(run):
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if k not in VOLATILE_METRICS} for r in records]

    quiet = lambda line: None  # noqa: E731
    (full,) = train(config(tmp_path / "a"), log=quiet)
    (paused,) = train(config(tmp_path / "b"), log=quiet, stop_after=1)
    assert paused.status == "paused"
    resumed = resume(tmp_path / "b" / "seed-5", config(tmp_path / "b"), log=quiet)
    assert resumed.status == full.status
    a, b = tmp_path / "a" / "seed-5", tmp_path / "b" / "seed-5"
    assert metrics(a) == metrics(b)
    pa, pb = (load_checkpoint(run / "last.pt")["trainer"]["algorithm"] for run in (a, b))
    for name in pa["policy"]:
        assert torch.equal(pa["policy"][name], pb["policy"][name]), name
    assert pa["policy_state"].shape == (16 * 2, 2, 8)  # one state per seat of every game
    assert torch.equal(pa["policy_state"], pb["policy_state"])
