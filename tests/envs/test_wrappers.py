"""Observation wrappers written in an id (``ID?obs_mask=...&frame_stack=K``): step for step the wrapped
environment's transitions, its observations masked and stacked as a hand-kept window of the last K says, resets and
final observations included; the contract checks; clear refusals; a training run that carries the id."""

import json

import pytest
import torch

from rl_gpu import make
from rl_gpu.core.errors import UsageError
from rl_gpu.envs.testing import check_env


def _actions(env, g):
    if env.is_continuous:
        return torch.rand(env.num_envs, *env.spec.action_shape, generator=g) * 2 - 1
    return torch.randint(0, env.spec.num_actions, (env.num_envs,), generator=g)


@pytest.mark.parametrize("base, keep, k, limit", [
    ("CartPole-v1", [2, 0], 3, 25),
    ("MinAtar-Breakout-v1", None, 4, 40),
    ("MinAtar-SpaceInvaders-v1", [0, 3, 5], 2, 30),
])
def test_masked_and_stacked_observations_follow_the_environment_step_for_step(base, keep, k, limit):
    n = 8
    query = "&".join(([f"obs_mask={','.join(map(str, keep))}"] if keep else []) + [f"frame_stack={k}"])
    a = make(f"{base}?{query}", num_envs=n, seed=3, max_episode_steps=limit)
    b = make(base, num_envs=n, seed=3, max_episode_steps=limit)

    def frame(obs):
        return obs if keep is None else obs[..., keep]

    c = frame(b.observe().obs).shape[-1]
    assert a.spec.obs_shape == (*b.spec.obs_shape[:-1], c * k)
    assert a.spec.obs_dtypes == b.spec.obs_dtypes and a.spec.has_action_mask == b.spec.has_action_mask
    window = [frame(b.observe().obs)] * k  # oldest first; a fresh episode's first observation fills it
    assert torch.equal(a.observe().obs, torch.cat(window, -1))
    g, ended = torch.Generator().manual_seed(1), 0
    for _ in range(3 * limit):
        action = _actions(a, g)
        x, y = a.step(action), b.step(action)
        for name in ("reward", "terminated", "truncated", "episode_return", "episode_length"):
            assert torch.equal(getattr(x, name), getattr(y, name)), name
        finished = x.terminated | x.truncated
        final = torch.cat([*window[1:], frame(y.final_obs)], -1)
        assert torch.equal(x.final_obs, final)
        shape = (n,) + (1,) * (final.dim() - 1)
        shifted = [*window[1:], frame(y.obs)]
        window = [torch.where(finished.view(shape), frame(y.obs), w) for w in shifted]
        assert torch.equal(x.obs, torch.cat(window, -1))
        ended += int(finished.sum())
    assert ended > n


def test_a_masked_mujoco_task_keeps_its_transitions():
    a = make("HalfCheetah-v5?obs_mask=0,1,2,3,4,5,6,7", num_envs=4, seed=0)
    b = make("HalfCheetah-v5", num_envs=4, seed=0)
    assert a.spec.obs_shape == (8,)
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        action = _actions(a, g)
        x, y = a.step(action), b.step(action)
        assert torch.equal(x.obs, y.obs[:, :8]) and torch.equal(x.reward, y.reward)


@pytest.mark.parametrize("env_id", ["CartPole-v1?obs_mask=0,2&frame_stack=3"])
def test_wrapped_environments_keep_the_contract(env_id):
    def factory(num_envs, *, seed, autoreset):
        return make(env_id, num_envs=num_envs, seed=seed, autoreset=autoreset, max_episode_steps=20)

    reports = check_env(factory)
    assert reports["autoreset"].episodes > 0


def test_state_round_trips_with_the_stack():
    a = make("CartPole-v1?frame_stack=4", num_envs=5, seed=2)
    g = torch.Generator().manual_seed(0)
    for _ in range(7):
        a.step(_actions(a, g))
    saved = a.state_dict()
    b = make("CartPole-v1?frame_stack=4", num_envs=5, seed=9)
    b.load_state_dict(saved)
    for _ in range(30):
        action = _actions(a, g)
        assert torch.equal(a.step(action).obs, b.step(action).obs)
    assert type(a) is type(b)  # one class per (environment, wrapping)


@pytest.mark.parametrize("env_id, says", [
    ("CartPole-v1?obs_mask=4", "obs_mask index 4 is out of range"),
    ("CartPole-v1?obs_mask=1,1", "names an index twice"),
    ("CartPole-v1?obs_mask=-1", "list of indices"),
    ("CartPole-v1?frame_stack=0", "integer from 1 to 64"),
    ("CartPole-v1?frame_stack=2.5", "integer from 1 to 64"),
    ("CartPole-v1?framestack=2", "unknown id parameter 'framestack'"),
    ("CartPole-v1?", "nothing follows '?'"),
    ("LeducHoldem-v0?frame_stack=2", "turn-based game"),
    ("gym:CartPole-v1?obs_mask=0", "take neither obs_mask nor frame_stack"),
    ("vmas:navigation?n_agents=2&frame_stack=2", "take neither obs_mask nor frame_stack"),
])
def test_bad_wrappings_are_refused_in_one_line(env_id, says):
    with pytest.raises(UsageError, match=says) as info:
        make(env_id, num_envs=2)
    assert "\n" not in str(info.value)


def test_the_cli_refuses_a_bad_wrapping_and_trains_a_good_one(call_main, tmp_path):
    from rl_gpu.cli.evaluate import main as evaluate_main
    from rl_gpu.cli.train import main as train_main

    code, out, err = call_main(train_main, "--env", "CartPole-v1?obs_mask=7", "--output", tmp_path / "bad")
    assert code == 2 and "obs_mask index 7 is out of range" in err and not (tmp_path / "bad").exists()
    run = tmp_path / "run"
    code, out, err = call_main(train_main, "--env", "CartPole-v1?obs_mask=0,2&frame_stack=2", "--device", "cpu",
                               "--num-envs", "16", "--num-steps", "16", "--max-updates", "2", "--min-updates", "2",
                               "--eval-episodes", "4", "--final-eval-episodes", "4", "--output", run, "--quiet")
    assert code in (0, 1) and (run / "seed-11" / "best.pt").exists(), err  # 1: CartPole's goal not reached yet
    assert json.loads((run / "seed-11" / "config.json").read_text())["env"] == "CartPole-v1?obs_mask=0,2&frame_stack=2"
    code, out, err = call_main(evaluate_main, run / "seed-11" / "best.pt", "--episodes", "4")
    assert code == 0 and "policy:" in out, err


@pytest.mark.parametrize("env_id", ["CartPole-v1?obs_mask=1,3&frame_stack=3", "MinAtar-Breakout-v1?frame_stack=2"])
def test_the_functional_collector_equals_the_reference_on_a_wrapped_environment(env_id):
    from rl_gpu.collect.engine import RolloutEngine
    from rl_gpu.collect.reference import collect
    from rl_gpu.nn.actor_critic import policy_for_env

    torch.manual_seed(0)
    ref_env, eng_env = (make(env_id, num_envs=8, seed=1, max_episode_steps=15) for _ in range(2))
    policy = policy_for_env(ref_env.spec, hidden_sizes=(8,), normalize_obs=False)
    reference = collect(policy, ref_env, 40, torch.Generator().manual_seed(2))
    engine = RolloutEngine(policy, eng_env, 40)
    fast = engine.run(engine.draw(torch.Generator().manual_seed(2)), out=engine.empty_rollout())[0]
    assert reference.obs.dtype == ref_env.observe().obs.dtype
    for name in ("obs", "action", "log_prob", "value", "reward", "terminated", "truncated"):
        assert torch.equal(getattr(reference, name), getattr(fast, name)), name
    assert bool(reference.truncated.any())
