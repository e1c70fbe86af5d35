"""Populations: member k of a population equals seed k run alone (rollouts exactly, parameters to rounding),
frozen members stay untouched, PBT's exploit-and-explore on hand-made cases, and benchmarks/population.py runs."""

import dataclasses
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rl_gpu.algos.base import Setup
from rl_gpu.algos.population.pbt import PBT, exploit_and_explore
from rl_gpu.algos.population.ppo import PopulationPPO
from rl_gpu.algos.ppo.algorithm import PPO
from rl_gpu.algos.ppo.config import PPOConfig
from rl_gpu.core.seeding import derive_seed
from rl_gpu.envs.registry import make

TOLERANCE = 1e-5
"""Parameters of a population member and of its lone run after the updates below: a batched matrix multiply
rounds differently from a plain one (about 1e-7 per forward), nothing else differs."""


def member(env_id: str, seed: int, n: int, config: PPOConfig, num_steps: int | None = 16,
           normalize_obs: bool = False) -> PPO:
    """Seed ``seed``'s PPO, built as the runner builds a lone run."""
    torch.manual_seed(derive_seed(seed, "torch"))
    env = make(env_id, num_envs=n, device="cpu", seed=derive_seed(seed, "train-env"), validate_actions=False)
    setup = Setup(env=env, seed=seed, num_steps=num_steps, learning_rate=1e-3, normalize_obs=normalize_obs)
    return PPO.from_setup(setup, config)


def population(env_id: str, seeds, n: int, config: PPOConfig, num_steps: int | None = 16,
               normalize_obs: bool = False):
    members = [member(env_id, s, n, config, num_steps, normalize_obs) for s in seeds]
    stepper = make(env_id, num_envs=len(members) * n, device="cpu", seed=0, validate_actions=False)
    return PopulationPPO(members, stepper), members


def max_param_diff(a: torch.nn.Module, b: torch.nn.Module) -> float:
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


CASES = {
    # continuing single-player task, unweighted update; epochs 1 so that no sample sits at PPO's clip boundary
    # (where a rounding difference switches a gradient on or off and the runs drift apart by ~lr).
    "cartpole": ("CartPole-v1", PPOConfig(num_minibatches=4, update_epochs=1), 16),
    # continuous actions with each member's own observation and reward normalisers.
    "pendulum-normalized": ("Pendulum-v1", PPOConfig(num_minibatches=4, update_epochs=1, norm_reward=True), 16),
    # categorical members with observation and reward normalisers (collected outside vmap, normalised in it).
    "cartpole-normalized": ("CartPole-v1", PPOConfig(num_minibatches=4, update_epochs=1, norm_reward=True), 16),
    # turn-based game: episodic collection, seats, opponent noise, weighted GAE and losses; the KL stop fires
    # after the first epoch, so the second epoch's steps are undone on the device (per member).
    "roulette-kl": ("RussianRoulette-v0", PPOConfig(num_minibatches=2, update_epochs=2, target_kl=1e-9), None),
    # minibatches of 512 rows: the hidden layers take the CPU's fused Linear + tanh node in both runs (8 rows
    # above take torch.tanh), in the population under vmap.
    "cartpole-fused": ("CartPole-v1", PPOConfig(num_minibatches=4, update_epochs=1), 16, 128),
}


@pytest.mark.parametrize("case", list(CASES))
def test_member_equals_its_lone_run(case):
    env_id, config, num_steps, *rows = CASES[case]
    seeds, n, iterations = (1, 2, 3), rows[0] if rows else 8, 2
    normalize = config.norm_reward
    pop, members = population(env_id, seeds, n, config, num_steps, normalize)
    assert pop.actor.direct  # the members' networks collect through stacked_mlp, outside vmap
    lone = [member(env_id, s, n, config, num_steps, normalize) for s in seeds]
    for _ in range(iterations):
        metrics = pop.iterate()
    for k, run in enumerate(lone):
        for _ in range(iterations):
            expected = run.iterate()
        cols = slice(k * n, (k + 1) * n)
        got, want = pop.storage, run.last_rollout
        if run.policy.is_continuous:
            # A Gaussian action is mean + std * noise: the mean's rounding reaches the actions and the states.
            for name in ("obs", "action", "reward"):
                assert torch.allclose(getattr(got, name)[:, cols], getattr(want, name), atol=1e-5), name
        else:  # sampled by argmax over Gumbel noise: the same actions, so the very same rollout
            assert torch.equal(got.obs[:, cols], want.obs) and torch.equal(got.action[:, cols], want.action)
            assert torch.equal(got.reward[:, cols], want.reward)
        assert torch.equal(got.weight[:, cols], want.weight)
        assert max_param_diff(members[k].policy, run.policy) < TOLERANCE
        for name, value in run.policy.state_dict().items():  # normaliser statistics included
            assert torch.allclose(members[k].policy.state_dict()[name], value, rtol=1e-5, atol=TOLERANCE), name
        if normalize:
            assert torch.allclose(members[k].reward_normalizer.ret, run.reward_normalizer.ret, atol=1e-5)
        for name in ("episodes", "episode_return", "transitions"):
            assert metrics[name][k].item() == pytest.approx(expected[name].item(), rel=1e-6)
        for name in ("loss", "approx_kl", "grad_norm"):
            assert metrics[name][k].item() == pytest.approx(expected[name].item(), rel=1e-3, abs=1e-6)
        assert torch.equal(members[k].shuffle_rng.get_state(), run.shuffle_rng.get_state())
        assert torch.equal(members[k].env.generator.get_state(), run.env.generator.get_state())


def test_frozen_member_is_untouched_and_others_continue():
    config = PPOConfig(num_minibatches=4, update_epochs=1)
    pop, members = population("CartPole-v1", (1, 2, 3), 8, config)
    pop.iterate()
    frozen = members[1]
    params = [p.detach().clone() for p in frozen.policy.parameters()]
    rngs = [frozen.policy_rng.get_state(), frozen.shuffle_rng.get_state(), frozen.env.generator.get_state()]
    moments = [s["exp_avg"].clone() for s in frozen.optimizer.state.values()]
    pop.iterate([True, False, True])
    pop.iterate([True, False, True])
    assert all(torch.equal(p, q) for p, q in zip(params, frozen.policy.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(rngs, [frozen.policy_rng.get_state(),
                                                        frozen.shuffle_rng.get_state(),
                                                        frozen.env.generator.get_state()]))
    assert all(torch.equal(a, s["exp_avg"]) for a, s in zip(moments, frozen.optimizer.state.values()))
    lone = member("CartPole-v1", 3, 8, config)
    for _ in range(3):
        lone.iterate()
    assert max_param_diff(members[2].policy, lone.policy) < TOLERANCE


def test_batched_clip_and_adam_step_equal_each_members_own_step_bit_for_bit(monkeypatch):
    """With every member active and no KL stop, the population clips and steps all members at once
    (``clip_grad_norms``, ``fused_adam_steps``): the same parameters, moments, step counters and norms, bit for
    bit, as each member's own ``UpdateUnits.step`` on the same gradients, with a learning rate of its own."""
    import rl_gpu.algos.population.ppo as population_ppo
    import rl_gpu.algos.ppo.update as update_module

    config = PPOConfig(num_minibatches=4, update_epochs=2, max_grad_norm=0.05)  # small: the clip acts
    runs = []
    for batched in (True, False):
        pop, members = population("CartPole-v1", (1, 2, 3), 8, config)
        pop.set_hyper_parameters(1, {"learning_rate": 3e-3})
        with monkeypatch.context() as patch:
            if not batched:
                patch.setattr(population_ppo, "fused_adam_ready", lambda optimizer: False)
                patch.setattr(update_module, "fused_adam_ready", lambda optimizer: False)  # optimizer.step()
            metrics = [pop.iterate() for _ in range(2)]
        runs.append((members, metrics))
    (fast, fast_metrics), (slow, slow_metrics) = runs
    for a, b in zip(fast, slow):
        assert all(torch.equal(p, q) for p, q in zip(a.policy.parameters(), b.policy.parameters()))
        for p, q in zip(a.policy.parameters(), b.policy.parameters()):
            assert all(torch.equal(a.optimizer.state[p][n], b.optimizer.state[q][n])
                       for n in ("exp_avg", "exp_avg_sq", "step"))
    assert all(torch.equal(x["grad_norm"], y["grad_norm"]) for x, y in zip(fast_metrics, slow_metrics))
    assert fast_metrics[-1]["grad_norm"].min() > config.max_grad_norm
    assert fast[1].optimizer.param_groups[0]["lr"].item() == pytest.approx(3e-3)


def test_population_refuses_mismatched_members():
    a = member("CartPole-v1", 1, 8, PPOConfig(num_minibatches=4))
    b = member("CartPole-v1", 2, 8, PPOConfig(num_minibatches=4, gamma=0.9))
    stepper = make("CartPole-v1", num_envs=16, device="cpu", seed=0)
    with pytest.raises(ValueError, match="may differ only in learning_rate, ent_coef, clip_coef"):
        PopulationPPO([a, b], stepper)
    with pytest.raises(ValueError, match="has 8 rows, not K \\* N = 2 \\* 8"):
        PopulationPPO([a, a], make("CartPole-v1", num_envs=8, device="cpu", seed=0))


class Scripted(random.Random):
    """``randrange`` answers from a script (the sources and factor choices of a hand case)."""

    def __init__(self, answers):
        super().__init__(0)
        self.answers = list(answers)

    def randrange(self, n):
        value = self.answers.pop(0)
        assert 0 <= value < n
        return value


HYPER = {"learning_rate": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], "ent_coef": [0.1] * 8,
         "clip_coef": [0.2] * 8}


def test_exploit_bottom_quarter_copies_top_quarter_with_perturbed_values():
    scores = [5.0, 1.0, 3.0, 8.0, 2.0, 7.0, 6.0, 4.0]
    # Ranking: bottom two are members 1 (1.0) and 4 (2.0); top two are 5 (7.0) and 3 (8.0), in that order.
    # Member 1 picks top[1] = 3, factors: clip x0.8 (0), ent x1.2 (1), lr x1.2 (1) (sorted names);
    # member 4 picks top[0] = 5, factors all x0.8.
    rng = Scripted([1, 0, 1, 1, 0, 0, 0, 0])
    exploits = exploit_and_explore(scores, HYPER, rng)
    assert [(e.target, e.source) for e in exploits] == [(1, 3), (4, 5)]
    first, second = exploits
    assert first.factors == {"clip_coef": 0.8, "ent_coef": 1.2, "learning_rate": 1.2}
    assert first.hyper_parameters == pytest.approx({"clip_coef": 0.16, "ent_coef": 0.12, "learning_rate": 4.8})
    assert second.hyper_parameters == pytest.approx({"clip_coef": 0.16, "ent_coef": 0.08, "learning_rate": 4.8})


def test_exploit_ranks_nan_lowest_skips_ineligible_and_needs_four_members():
    scores = [5.0, math.nan, 3.0, 8.0, 2.0, 7.0, 6.0, 4.0]
    exploits = exploit_and_explore(scores, HYPER, random.Random(1))
    assert sorted(e.target for e in exploits) == [1, 4]
    assert all(e.source in (3, 5) for e in exploits)
    # Member 3 (the best) is finished: not a source; member 1 is finished: not a target either.
    eligible = [True, False, True, False, True, True, True, True]
    exploits = exploit_and_explore(scores, HYPER, random.Random(1), eligible=eligible)
    assert [e.target for e in exploits] == [4] and exploits[0].source == 5
    assert exploit_and_explore([1.0, 2.0, 3.0], HYPER, random.Random(1)) == []
    for e in exploit_and_explore(scores, HYPER, random.Random(2)):
        for name, factor in e.factors.items():
            assert factor in (0.8, 1.2)
            assert e.hyper_parameters[name] == pytest.approx(HYPER[name][e.source] * factor)


def test_pbt_round_copies_weights_and_optimizer_state_and_sets_hyper_parameters():
    config = PPOConfig(num_minibatches=2, update_epochs=1)
    pop, members = population("CartPole-v1", (1, 2, 3, 4), 8, config, num_steps=8)
    pbt = PBT(pop, interval=2, seed=0)
    start = pbt.lineage["initial"]
    assert [m.initial_learning_rate for m in members] == pytest.approx([s["learning_rate"] for s in start])
    assert pop.ent_coef.tolist() == pytest.approx([s["ent_coef"] for s in start])
    assert pbt.after_iteration(pop.iterate(), [True] * 4) == []
    result = pop.iterate()
    # Hand-set returns: member 2 is best, member 0 worst.
    metrics = dataclasses.replace(result, collected=result.collected._replace(
        episode_return=torch.tensor([1.0, 5.0, 9.0, 4.0]), episodes=torch.ones(4)))
    pbt._returns.zero_()
    pbt._episodes.zero_()
    before = pop.hyper_parameters()
    (exploit,) = pbt.after_iteration(metrics, [True] * 4)
    assert (exploit.target, exploit.source) == (0, 2)
    src, dst = members[2], members[0]
    assert max_param_diff(src.policy, dst.policy) == 0.0
    for p_src, p_dst in zip(src.policy.parameters(), dst.policy.parameters()):
        assert torch.equal(src.optimizer.state[p_src]["exp_avg_sq"], dst.optimizer.state[p_dst]["exp_avg_sq"])
        assert p_src.data_ptr() != p_dst.data_ptr()
    after = pop.hyper_parameters()
    for name in ("learning_rate", "ent_coef", "clip_coef"):
        assert after[name][0] / before[name][2] == pytest.approx(exploit.factors[name], rel=1e-5)
        assert after[name][1:] == pytest.approx(before[name][1:])
    assert dst.lr.item() == pytest.approx(after["learning_rate"][0], rel=1e-6)
    assert pbt.lineage["rounds"][-1]["exploits"][0]["source"] == 2
    out = pop.iterate()  # per-member coefficients inside the vmapped loss
    assert all(torch.isfinite(v).all() for v in out.values())


@pytest.mark.slow  # long: keeps the default suite under 8 minutes on 2 cores (make test-slow runs it)
def test_the_population_benchmark_runs_and_refuses_bad_sizes():
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "population.py"

    def run(*args):
        return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120,
                              check=False, env={**os.environ, "OMP_NUM_THREADS": "1"})

    out = run("--members", "2", "--num-envs", "4", "--num-steps", "16", "--iterations", "1",
              "--per-call-rounds", "1")
    assert out.returncode == 0, out.stderr
    assert "speed-up:" in out.stdout and "at N=1" in out.stdout
    assert "[4, 64] x [64, 64]" in out.stdout and "as one batched product of 2" in out.stdout
    bad = run("--num-steps", "20")
    assert bad.returncode == 2 and "--num-steps must be a multiple of 16, got 20" in bad.stderr
