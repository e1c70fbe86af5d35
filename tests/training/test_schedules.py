"""Learning-rate and entropy schedules: their values at chosen progress points, rsl_rl's adaptive-KL rule and where
PPO applies it, an exact resume, and the flags' refusals."""

import dataclasses
import json
import math

import pytest
import torch

from rl_gpu.algos.base import Setup
from rl_gpu.algos.ppo.config import PPOConfig
from rl_gpu.algos.registry import make_algorithm
from rl_gpu.algos.schedules import LRSchedule, adapt_to_kl
from rl_gpu.cli.train import main
from rl_gpu.envs.registry import make
from rl_gpu.training.runner import resume, train

from test_reliability import QUIET, _config, assert_same_run  # noqa: I001 (a sibling)


@pytest.mark.parametrize("kind, points", [
    ("constant", {0.0: 1.0, 0.5: 1.0, 1.0: 1.0}),
    ("linear", {0.0: 1.0, 0.25: 0.75, 1.0: 0.0}),
    ("cosine", {0.0: 1.0, 0.5: 0.5, 0.25: 0.5 * (1 + math.cos(math.pi / 4)), 1.0: 0.0}),
    ("step", {0.0: 1.0, 0.2: 1.0, 0.25: 0.5, 0.6: 0.25, 0.75: 0.125, 1.0: 0.0625}),
])
def test_each_schedule_at_chosen_points_as_numbers_and_as_device_tensors(kind, points):
    schedule = LRSchedule(kind)
    for fraction, want in points.items():
        assert schedule.factor(fraction) == pytest.approx(want, abs=1e-12)
        got = schedule.factor(torch.tensor(fraction, dtype=torch.float64))
        assert isinstance(got, torch.Tensor) or kind == "constant"
        assert float(got) == pytest.approx(want, abs=1e-12)


def test_step_every_third_drops_at_each_third_despite_rounding():
    schedule = LRSchedule("step", step_every=1 / 3, step_gamma=0.1)
    assert schedule.factor(2 / 3) == pytest.approx(0.01)
    assert schedule.factor(0.66) == pytest.approx(0.1)


def test_the_adaptive_rule_is_rsl_rls():
    s = LRSchedule("adaptive-kl", desired_kl=0.01)
    lr = torch.tensor(1e-3)
    assert float(adapt_to_kl(lr, torch.tensor(0.03), s)) == pytest.approx(1e-3 / 1.5)   # above 2x: slower
    assert float(adapt_to_kl(lr, torch.tensor(0.004), s)) == pytest.approx(1.5e-3)     # below half: faster
    assert float(adapt_to_kl(lr, torch.tensor(0.01), s)) == pytest.approx(1e-3)        # in between: kept
    assert float(adapt_to_kl(lr, torch.tensor(0.0), s)) == pytest.approx(1e-3)         # no KL measured: kept
    assert float(adapt_to_kl(torch.tensor(1.2e-5), torch.tensor(1.0), s)) == pytest.approx(1e-5)   # floor
    assert float(adapt_to_kl(torch.tensor(9e-3), torch.tensor(0.0001), s)) == pytest.approx(1e-2)  # ceiling


@pytest.mark.parametrize("bad, match", [
    (dict(kind="exponential"), "must be one of"), (dict(kind="step", step_every=0.0), "lr-step-every"),
    (dict(kind="step", step_gamma=1.5), "lr-step-gamma"), (dict(kind="adaptive-kl", desired_kl=-1.0), "desired-kl"),
])
def test_bad_schedules_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        LRSchedule(**bad)


def _ppo(schedule=None, **config):
    torch.manual_seed(0)  # the same initial networks every time
    env = make("CartPole-v1", num_envs=16, seed=0)
    setup = Setup(env=env, seed=0, num_steps=8, lr_schedule=schedule)
    return make_algorithm("ppo", setup, PPOConfig(**config))


def test_adaptive_kl_moves_the_rate_by_each_minibatchs_kl_before_its_step():
    schedule = LRSchedule("adaptive-kl", desired_kl=1e-9)
    # One epoch of one minibatch (the ratio is 1, the KL about 0), then a second one after a step (a KL far above
    # twice 1e-9): the first epoch's KL is read from a twin that stops there (the same first minibatch).
    first = _ppo(schedule, num_minibatches=1, update_epochs=1).iterate()
    algo = _ppo(schedule, num_minibatches=1, update_epochs=2)
    result = algo.iterate()
    kl1 = first["approx_kl"]
    kl2 = 2 * result["approx_kl"] - kl1
    assert float(kl2) > 1e-6
    expected = adapt_to_kl(adapt_to_kl(torch.tensor(1e-3), kl1, schedule), kl2, schedule)
    assert float(result.learning_rate) == pytest.approx(float(expected), rel=1e-6)
    assert float(first.learning_rate) == pytest.approx(float(adapt_to_kl(torch.tensor(1e-3), kl1, schedule)))
    assert algo.optimizer.param_groups[0]["lr"] is algo.lr
    # Progress does not move an adaptive rate.
    algo.set_progress(0.9)
    assert float(algo.lr) == pytest.approx(float(expected), rel=1e-6)


def test_progress_sets_the_rate_and_the_entropy_coefficient_in_place():
    algo = _ppo(LRSchedule("cosine"), ent_coef=0.02, ent_coef_final=0.0)
    lr, ent = algo.lr, algo.ent_coef
    algo.set_progress(torch.tensor(0.5, dtype=torch.float64))
    assert algo.lr is lr and algo.ent_coef is ent
    assert float(lr) == pytest.approx(5e-4) and float(ent) == pytest.approx(0.01)
    result = algo.iterate()
    assert float(result["ent_coef"]) == pytest.approx(0.01)
    # The loss reads the moved coefficient: the same update as a PPO whose ent_coef is 0.01 throughout.
    twin = _ppo(LRSchedule("cosine"), ent_coef=0.01)
    twin.set_progress(0.5)
    assert float(twin.iterate()["loss"]) == pytest.approx(float(result["loss"]), rel=1e-6)


def test_a_run_with_adaptive_kl_and_an_entropy_schedule_resumes_exactly(tmp_path):
    def config(out):
        base = _config("CartPole-v1", out, lr_schedule="adaptive-kl", desired_kl=0.003, max_updates=5,
                       min_updates=5)
        return dataclasses.replace(base, algo_params=dataclasses.replace(base.algo_params, ent_coef_final=0.0))

    (full,) = train(config(tmp_path / "a"), log=QUIET)
    (paused,) = train(config(tmp_path / "b"), log=QUIET, stop_after=3)
    assert paused.status == "paused"
    resume(tmp_path / "b" / "seed-5", config(tmp_path / "b"), log=QUIET)
    assert_same_run(tmp_path / "a" / "seed-5", tmp_path / "b" / "seed-5")
    rates = [r["learning_rate"] for r in map(json.loads, (tmp_path / "a" / "seed-5" / "metrics.jsonl")
                                                    .read_text().splitlines()) if "loss" in r]
    assert all(r != pytest.approx(config(tmp_path).learning_rate) for r in rates)  # the rule moved the rate


@pytest.mark.parametrize("args, needle", [
    (["--lr-step-every", "0.5"], "--lr-step-every applies only with --lr-schedule step"),
    (["--lr-schedule", "cosine", "--desired-kl", "0.02"], "--desired-kl applies only with --lr-schedule adaptive-kl"),
    (["--lr-schedule", "cosine", "--anneal-lr"], "--anneal-lr contradicts --lr-schedule cosine"),
    (["--lr-schedule", "warm"], "warm"),
    (["--lr-schedule", "step", "--lr-step-gamma", "2"], "--lr-step-gamma must be in (0, 1]"),
    (["--lr-schedule", "adaptive-kl", "--parallel", "--seeds", "1", "2"], "--parallel with --lr-schedule adaptive-kl"),
    (["--ent-coef-final", "0", "--parallel", "--seeds", "1", "2"], "--parallel with --ent-coef-final"),
    (["--env", "RussianRoulette-v0", "--algo", "neurd", "--lr-schedule", "cosine"], "--lr-schedule cosine does not "
     "apply to --algo neurd"),
])
def test_schedule_flags_that_cannot_work_are_one_line_exit_2(tmp_path, call_main, args, needle):
    env = [] if "--env" in args else ["--env", "CartPole-v1"]
    out = tmp_path / "never"
    code, _, err = call_main(main, *env, *args, "--output", out, "--device", "cpu", "--max-updates", "1",
                            "--min-updates", "1")
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err
    assert not out.exists()


def test_an_explicit_constant_schedule_overrides_a_presets_anneal_lr(tmp_path, call_main):
    out = tmp_path / "run"
    code, _, err = call_main(main, "--env", "CartPole-v1", "--lr-schedule", "constant", "--output", out, "--device",
                             "cpu", "--num-envs", "16", "--num-steps", "8", "--max-updates", "3", "--min-updates", "3",
                             "--eval-every", "3", "--eval-episodes", "4", "--final-eval-episodes", "4", "--seeds", "1")
    assert code in (0, 1), err
    saved = json.loads((out / "seed-1" / "config.json").read_text())
    assert saved["lr_schedule"] == "constant" and saved["anneal_lr"] is False
    rates = {json.loads(r)["learning_rate"] for r in (out / "seed-1" / "metrics.jsonl").read_text().splitlines()
             if "loss" in r}
    assert len(rates) == 1
