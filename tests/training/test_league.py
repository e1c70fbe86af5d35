"""Self-play against a league: the stacked opponents' batched forward, PFSP weights, Elo, exact resume with the
league, the CLI's refusals, and exploitability falling in a short roulette self-play run."""

import contextlib
import dataclasses
import io
import json

import pytest
import torch

from rl_gpu.cli.presets import preset_config
from rl_gpu.cli.train import main as train_main
from rl_gpu.envs.registry import make
from rl_gpu.interop.exploitability import measure_exploitability
from rl_gpu.nn import distributions as D
from rl_gpu.nn.actor_critic import ActorCritic, UniformRandomPolicy
from rl_gpu.nn.opponents import StackedActors, block_count
from rl_gpu.runtime.checkpoint import load_checkpoint
from rl_gpu.training.league import League, LeagueSettings, elo_expected, elo_update, pfsp_weights
from rl_gpu.training.runner import VOLATILE_METRICS, resume, train


def quiet(line):
    pass


def _trained_like(seed: int, normalize_obs: bool = False) -> ActorCritic:
    """An actor-critic with non-trivial weights (and observation statistics)."""
    torch.manual_seed(seed)
    policy = ActorCritic(6, 3, (16, 8), normalize_obs=normalize_obs)
    with torch.no_grad():
        for p in policy.actor.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    if normalize_obs:
        policy.update_normalizer(torch.randn(50, 6) * 3 + seed)
    return policy


@pytest.mark.parametrize("normalize_obs, num_blocks", [(False, None), (True, None), (False, 8)])
def test_stacked_forward_equals_each_members_own_forward_row_by_row(normalize_obs, num_blocks):
    policies = [_trained_like(s, normalize_obs) for s in range(3)]
    n = 64
    stacked = StackedActors(policies[0], capacity=4, num_rows=n, num_blocks=num_blocks)
    assert stacked.num_blocks == (num_blocks or n)
    for k, policy in enumerate(policies):
        stacked.load_member(k, policy)
    stacked.make_uniform(3)
    gen = torch.Generator().manual_seed(0)
    obs = torch.randn(n, 6, generator=gen) * 2
    mask = torch.rand(n, 3, generator=gen) < 0.7
    mask[:, 0] = True
    stacked.assign(torch.arange(stacked.num_blocks)[torch.randperm(stacked.num_blocks, generator=gen)] % 4)
    slot = stacked.slot
    assert torch.equal(slot, stacked.block_slot.repeat_interleave(n // stacked.num_blocks))
    noise = D.categorical_noise((n, 3), gen, "cpu")
    out = stacked.act(obs, mask, noise=noise)
    logits = stacked.logits(obs)
    assert set(slot.tolist()) == {0, 1, 2, 3}
    for row in range(n):
        k = int(slot[row])
        player = policies[k] if k < 3 else UniformRandomPolicy()
        own = player.act(obs[row:row + 1], mask[row:row + 1], noise=noise[row:row + 1])
        assert int(out.action[row]) == int(own.action[0])
        torch.testing.assert_close(out.log_prob[row], own.log_prob[0])
        if k < 3:
            expected = player.actor(player.preprocess(obs[row:row + 1]))[0]
        else:
            expected = torch.zeros(3)
        torch.testing.assert_close(logits[row], expected)


def test_block_count_splits_rows_evenly():
    assert [block_count(n) for n in (64, 4096, 1000, 4099, 34)] == [64, 256, 250, 4099, 34]


def test_pfsp_weights_and_elo_on_hand_cases():
    x = torch.tensor([0.0, 0.25, 0.5, 1.0])
    assert pfsp_weights(x, "hard").tolist() == [1.0, 0.5625, 0.25, 0.0]
    assert pfsp_weights(x, "variance").tolist() == [0.0, 0.1875, 0.25, 0.0]
    assert pfsp_weights(x, "uniform").tolist() == [1.0, 1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="unknown PFSP weighting 'easy'"):
        pfsp_weights(x, "easy")
    a, b = torch.tensor(1000.0, dtype=torch.float64), torch.tensor(600.0, dtype=torch.float64)
    # 400 points apart: the stronger player is expected to score 10/11.
    assert elo_expected(a, b).item() == pytest.approx(10 / 11)
    new_a, new_b = elo_update(a, b, torch.tensor(1.0, dtype=torch.float64), k=22.0)
    assert new_a.item() == pytest.approx(1002.0) and new_b.item() == pytest.approx(598.0)
    new_a, new_b = elo_update(b, b, torch.tensor(0.0, dtype=torch.float64), k=32.0)
    assert new_a.item() == pytest.approx(584.0) and new_b.item() == pytest.approx(616.0)


def test_league_assignment_follows_the_mixture_and_ratings_move_with_results():
    learner = _trained_like(0)
    settings = LeagueSettings(snapshot_every=1, pool_size=2, pfsp="hard", latest_share=0.5, baseline_share=0.2)
    league = League(learner, num_rows=4000, settings=settings, seed=3)
    # No snapshot yet: the snapshots' share goes to the latest self.
    assert league.distribution().tolist() == pytest.approx([0.8, 0.0, 0.0, 0.2])
    league.before_iteration()
    assert league.members.num_blocks == 250  # blocks of 16 rows
    counts = torch.bincount(league.members.block_slot, minlength=4).tolist()
    assert counts[1] == counts[2] == 0 and abs(counts[3] - 50) < 20
    league.iteration = 1
    league.rating[0] = 100.0
    league.before_iteration()  # the first snapshot, rated as the learner: expected score 1/2, weight 1/4
    assert league.pool_held == 1 and league.rating[1].item() == 100.0
    assert league.distribution().tolist() == pytest.approx([0.5, 0.3, 0.0, 0.2])
    with pytest.raises(ValueError, match="sum of at most 1"):
        LeagueSettings(latest_share=0.6, baseline_share=0.5)


def test_one_iteration_of_games_rates_each_member_met_as_one_match():
    from types import SimpleNamespace

    learner = _trained_like(0)
    league = League(learner, num_rows=4, settings=LeagueSettings(pool_size=1, elo_k=16.0), seed=0)
    league.before_iteration()
    league.members.assign(torch.tensor([2, 2, 1, 0]))  # baseline, baseline, snapshot, latest self
    # One game per row, ending at step 1: the learner wins, loses, wins, wins.
    ret = torch.tensor([[0.0, 0.0, 0.0, 0.0], [1.0, -1.0, 1.0, 1.0]])
    done = torch.tensor([[False] * 4, [True] * 4])
    metrics = league.after_iteration(SimpleNamespace(episode_return=ret, done=done))
    # Baseline: mean score 1/2 as expected (and anchored); snapshot: 1 against 1/2 expected, 16 * 1/2 = 8.
    assert league.rating.tolist() == [8.0, -8.0, 0.0]
    assert league.games.tolist() == [0.0, 1.0, 2.0] and league.score.tolist() == [0.0, 1.0, 1.0]
    assert metrics["league/score_vs_league"].item() == pytest.approx(2 / 3)
    assert metrics["league/elo_learner"].item() == 8.0


def _config(out, **kw):
    base = {"device": "cpu", "seeds": (5,), "num_envs": 64, "max_updates": 4, "min_updates": 4, "eval_every": 2,
            "eval_episodes": 64, "final_eval_episodes": 32, "checkpoint_every": 2, "output": out,
            "overwrite": True, "self_play": True, "snapshot_every": 1, "pool_size": 2, "latest_share": 0.4,
            "baseline_share": 0.2}
    base.update(kw)
    return dataclasses.replace(preset_config("RussianRoulette-v0"), **base)


def _metrics(run_dir):
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for r in records:
        for k in VOLATILE_METRICS:
            r.pop(k, None)
    return records


@pytest.mark.parametrize("memory", [{}, {"memory": "gru", "memory_size": 8}])
def test_league_checkpoint_resumes_exactly(tmp_path, memory):
    """Feed-forward, and with memory (the members' cells travel in the league's state)."""
    (full,) = train(_config(tmp_path / "a", **memory), log=quiet)
    stopped = _config(tmp_path / "b", **memory)
    (paused,) = train(stopped, log=quiet, stop_after=2)
    assert paused.status == "paused"
    resumed = resume(tmp_path / "b" / "seed-5", stopped, log=quiet)
    assert resumed.status == full.status == "budget_spent"  # self-play has no goal: its updates are the budget
    a = load_checkpoint(tmp_path / "a" / "seed-5" / "last.pt")["trainer"]["algorithm"]
    b = load_checkpoint(tmp_path / "b" / "seed-5" / "last.pt")["trainer"]["algorithm"]
    for k in a["policy"]:
        assert torch.equal(a["policy"][k], b["policy"][k]), k
    la, lb = a["league"], b["league"]
    assert la["iteration"] == lb["iteration"] == 4 and la["snapshots_added"] == lb["snapshots_added"] == 3
    for name in ("rating", "games", "score", "rng"):
        assert torch.equal(la[name], lb[name]), name
    assert ("cell_weight_hh" in la["members"]) == bool(memory)
    for k in la["members"]:
        assert torch.equal(la["members"][k], lb["members"][k]), k
    lines = _metrics(tmp_path / "a" / "seed-5")
    assert lines == _metrics(tmp_path / "b" / "seed-5")
    assert [r["league/pool_size"] for r in lines if "league/pool_size" in r] == [0, 1, 2, 2]
    ratings = json.loads((tmp_path / "a" / "seed-5" / "ratings.json").read_text())
    assert [m["member"] for m in ratings["members"]] == ["learner", "snapshot@2", "snapshot@3", "uniform_random"]


def _call(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = train_main(list(args))
        except SystemExit as e:
            code = e.code
    return code, err.getvalue()


@pytest.mark.parametrize("args, needle", [
    (["--env", "CartPole-v1", "--self-play"], "--self-play needs a two-player game; CartPole-v1 has 1 player"),
    (["--self-play", "--latest-share", "0.8", "--baseline-share", "0.5"], "sum to at most 1"),
    (["--self-play", "--pool-size", "0"], "--pool-size must be a positive integer"),
    (["--self-play", "--pfsp", "easy"], "--pfsp"),
    (["--env", "vmas:navigation", "--algo", "mappo", "--self-play"], "--self-play needs a two-player game"),
    (["--env", "RussianRoulette-v0?seats_as_agents=1", "--algo", "ippo", "--self-play", "--no-share-params"],
     "the league's members are snapshots of one shared actor"),
])
def test_self_play_input_errors_exit_2(tmp_path, monkeypatch, args, needle):
    monkeypatch.chdir(tmp_path)
    code, err = _call("--output", "out", "--device", "cpu", *args)
    assert code == 2 and needle in err, err
    assert not (tmp_path / "out").exists()


def test_short_roulette_self_play_lowers_exploitability(tmp_path):
    env = make("RussianRoulette-v0", num_envs=1, seed=0)
    config = _config(tmp_path / "run", num_envs=256, max_updates=12, min_updates=12, eval_every=6,
                     learning_rate=3e-3, snapshot_every=5, pool_size=4, checkpoint_every=12)
    (result,) = train(config, log=quiet, measure=lambda policy: measure_exploitability(env, policy))
    assert result.status == "budget_spent"  # self-play trains until its limit, which is its budget
    curve = [r["validation"]["exploitability"] for r in _metrics(tmp_path / "run" / "seed-5") if "validation" in r]
    assert len(curve) == 3
    assert curve[0] == pytest.approx(0.151, abs=0.002)  # a fresh network plays almost uniformly
    assert curve[0] > curve[1] > curve[2] and curve[2] < curve[0] - 0.05, curve
    summary = json.loads((tmp_path / "run" / "seed-5" / "summary.json").read_text())
    assert summary["best_update"] == 12  # self-play keeps the least exploitable validation
    # The final evaluation measures best.pt's exploitability again: the last validation's policy.
    exploit = summary["exploitability"]
    assert exploit["best"] == pytest.approx(curve[2]) and exploit["initial"] == pytest.approx(curve[0])
    assert exploit["unit"]


@pytest.mark.slow
def test_compiled_collection_plays_the_league_as_eager_collection_does():
    """The compiled rollout step reads the members and the row assignment from their buffers: an assignment
    changed in place between rollouts is seen, and the actions equal eager collection's."""
    import copy

    from rl_gpu.collect.engine import RolloutEngine
    from rl_gpu.nn.actor_critic import policy_for_env

    env = make("RussianRoulette-v0", num_envs=128, seed=0, validate_actions=False)
    torch.manual_seed(0)
    learner, other = policy_for_env(env.spec), policy_for_env(env.spec)
    with torch.no_grad():
        for p in other.actor.parameters():
            p.mul_(30.0)  # a decisive opponent, whose games differ from the uniform player's
    league = StackedActors(learner, 3, 128)
    league.load_member(0, learner)
    league.load_member(1, other)
    saved = copy.deepcopy(env.state_dict())
    actions = {}
    for mode in ("off", "inductor"):
        engine = RolloutEngine(learner, env, 10, episodic=True, opponent=league, compile=mode)
        for slot in (1, 2):
            league.assign(torch.full((128,), slot))
            env.load_state_dict(copy.deepcopy(saved))
            rollout = engine.collect(torch.Generator().manual_seed(1), torch.Generator().manual_seed(2))
            actions[mode, slot] = rollout.action.clone()
    assert not torch.equal(actions["off", 1], actions["off", 2])
    assert torch.equal(actions["off", 1], actions["inductor", 1])
    assert torch.equal(actions["off", 2], actions["inductor", 2])


def test_a_league_over_seats_rates_every_game_from_the_learners_seat():
    """Seats as agents (M = 2): whole worlds per block; continuing rollouts hold several games per world, each
    scored from the seat the learner controls; worlds against the latest self are not rated."""
    from types import SimpleNamespace

    league = League(_trained_like(0), num_rows=4, settings=LeagueSettings(pool_size=1, elo_k=16.0), seed=0, agents=2)
    assert league.members.slot.shape == (8,) and league.members.num_blocks == 4  # one world (two seats) per block
    league.before_iteration()
    league.members.assign(torch.tensor([2, 1, 0, 2]))  # baseline, snapshot, latest self, baseline
    assert league.world_slot.tolist() == [2, 1, 0, 2] and league.members.slot.tolist() == [2, 2, 1, 1, 0, 0, 2, 2]
    controlled = torch.tensor([[True, False], [False, True], [True, True], [False, True]])
    done = torch.tensor([[True, False, True, False], [False, True, False, False], [True, True, True, True]])
    ret = torch.zeros(3, 4, 2)
    ret[0, 0], ret[2, 0] = torch.tensor([1.0, -1.0]), torch.tensor([-1.0, 1.0])  # world 0: a win, then a loss
    ret[1, 1], ret[2, 1] = torch.tensor([1.0, -1.0]), torch.tensor([-2.0, 2.0])  # world 1, seat 1: a loss, a win
    ret[0, 2], ret[2, 2] = torch.tensor([1.0, -1.0]), torch.tensor([1.0, -1.0])  # latest: not rated
    # world 3 (seat 1, against the baseline): one draw at step 2
    league.after_iteration(SimpleNamespace(episode_return=ret * done[..., None], done=done, controlled=controlled))
    assert league.games.tolist() == [0.0, 2.0, 3.0] and league.score.tolist() == [0.0, 1.0, 1.5]
    # Both matches at the expected score 1/2: no rating moves.
    assert league.rating.tolist() == [0.0, 0.0, 0.0]


def _seats_config(out, **kw):
    base = {"device": "cpu", "seeds": (5,), "num_envs": 32, "num_steps": 8, "total_timesteps": 1536,
            "eval_every": 2, "eval_episodes": 64, "final_eval_episodes": 64, "checkpoint_every": 1, "output": out,
            "overwrite": True, "self_play": True, "snapshot_every": 1, "pool_size": 2, "latest_share": 0.3,
            "baseline_share": 0.3}
    base.update(kw)
    return dataclasses.replace(preset_config("RussianRoulette-v0?seats_as_agents=1", algo="ippo"), **base)


def test_a_league_over_seats_trains_the_learners_seats_only_and_resumes_exactly(tmp_path):
    """IPPO against a league on a game's seats: the learner plays both seats of the worlds given to its latest self
    and one seat elsewhere (its only weighted rows); a paused run resumed ends as the run never paused."""
    from rl_gpu.training.runner import Trainer

    trainer = Trainer(_seats_config(tmp_path / "t"), 5, tmp_path / "t" / "seed-5", log=quiet)
    result = trainer.algo.iterate()
    assert "league/elo_learner" in result.learner
    rollout = trainer.algo.inner.last_rollout
    member = trainer.league.world_slot
    assert (member == 0).any() and (member != 0).any()
    controlled = rollout.controlled
    assert controlled[member == 0].all()
    assert controlled[member != 0].sum(-1).eq(1).all()
    assert (rollout.weight * ~controlled).sum() == 0 and (rollout.weight * controlled).sum() > 0

    (full,) = train(_seats_config(tmp_path / "a"), log=quiet)
    (paused,) = train(_seats_config(tmp_path / "b"), log=quiet, stop_after=3)
    assert paused.status == "paused"
    resumed = resume(tmp_path / "b" / "seed-5", _seats_config(tmp_path / "b"), log=quiet)
    assert resumed.status == full.status == "budget_spent"
    a = load_checkpoint(tmp_path / "a" / "seed-5" / "last.pt")["trainer"]["algorithm"]
    b = load_checkpoint(tmp_path / "b" / "seed-5" / "last.pt")["trainer"]["algorithm"]
    for k in a["policy"]:
        assert torch.equal(a["policy"][k], b["policy"][k]), k
    for name in ("rating", "games", "score"):
        assert torch.equal(a["league"][name], b["league"][name]), name
    assert a["league"]["games"].sum() > 0
    assert _metrics(tmp_path / "a" / "seed-5") == _metrics(tmp_path / "b" / "seed-5")
    ratings = json.loads((tmp_path / "a" / "seed-5" / "ratings.json").read_text())
    assert ratings["members"][0]["member"] == "learner" and ratings["members"][-1]["member"] == "uniform_random"


def test_a_seats_league_with_memory_carries_the_opponents_memory_across_rollouts(tmp_path):
    """Continuing rollouts of a game's seats: the league opponents' memory goes on from one rollout to the next
    (reset in the worlds given another member meanwhile), and a paused run resumes exactly with it."""
    from rl_gpu.training.runner import Trainer

    config = _seats_config(tmp_path / "t", memory="gru", memory_size=8)
    trainer = Trainer(config, 5, tmp_path / "t" / "seed-5", log=quiet)
    for _ in range(3):  # past the first snapshots: some worlds play a member other than the latest self
        trainer.algo.iterate()
    mappo = trainer.algo.inner
    state, slot = mappo._opponent_state
    assert state.abs().sum() > 0 and torch.equal(slot, mappo.opponent.slot)
    saved = mappo.state_dict()  # checkpoints hold it
    mappo._opponent_state = None
    mappo.load_state_dict(saved)
    assert torch.equal(mappo._opponent_state[0], state) and torch.equal(mappo._opponent_state[1], slot)
    moved = slot.clone()
    moved[: slot.shape[0] // 2] += 1  # half the rows as if their worlds had been given another member
    mappo._opponent_state = (state, moved)
    carried = mappo._opponent_memory()
    half = slot.shape[0] // 2
    assert torch.equal(carried[half:], state[half:])
    assert torch.equal(carried[:half], mappo.opponent.initial_state(slot.shape[0])[:half])

    (full,) = train(_seats_config(tmp_path / "a", memory="gru", memory_size=8), log=quiet)
    (paused,) = train(_seats_config(tmp_path / "b", memory="gru", memory_size=8), log=quiet, stop_after=3)
    resumed = resume(tmp_path / "b" / "seed-5", _seats_config(tmp_path / "b", memory="gru", memory_size=8),
                     log=quiet)
    assert resumed.status == full.status == "budget_spent"
    a = load_checkpoint(tmp_path / "a" / "seed-5" / "last.pt")["trainer"]["algorithm"]
    b = load_checkpoint(tmp_path / "b" / "seed-5" / "last.pt")["trainer"]["algorithm"]
    for k in a["policy"]:
        assert torch.equal(a["policy"][k], b["policy"][k]), k
    assert torch.equal(a["opponent_state"], b["opponent_state"]) and torch.equal(a["opponent_slot"],
                                                                                b["opponent_slot"])
    assert _metrics(tmp_path / "a" / "seed-5") == _metrics(tmp_path / "b" / "seed-5")
