"""``rl-gpu tune`` on Optuna: a sweep in SQLite that a second command continues, its table and best settings file
(which ``rl-gpu train --config`` takes), pruning through the run's validations, every search space valid, and bad
input refused in one line before anything is written."""

import csv
import json

import pytest

optuna = pytest.importorskip("optuna")

from rl_gpu.cli import search_spaces  # noqa: E402
from rl_gpu.cli.api import build_config  # noqa: E402
from rl_gpu.cli.tune import main  # noqa: E402
from rl_gpu.cli.tune_trials import Pruning  # noqa: E402
from rl_gpu.training.config import config_from_dict  # noqa: E402

FIXED = ["--fixed", "num_envs=8", "num_steps=32", "eval_episodes=8", "final_eval_episodes=8"]


def test_a_sweep_is_stored_continued_and_leaves_its_best_settings(call_main, tmp_path, monkeypatch):
    # A one-setting space keeps each trial to a second; the real spaces are checked below.
    monkeypatch.setitem(search_spaces.SPACES, "ppo",
                        lambda trial, budget: {"learning_rate": trial.suggest_float("learning_rate", 1e-4, 3e-2,
                                                                                    log=True)})
    out = tmp_path / "sweep"
    args = ["--env", "CartPole-v1", "--algo", "ppo", "--budget", "512", "--evals", "2", "--pruner", "none",
            "--output", out, "--device", "cpu", *FIXED]
    code, text, err = call_main(main, *args, "--trials", "1")
    assert code == 0, err
    assert "0 of 1 trials done" in text and "trial 0: budget_spent" in text
    code, text, err = call_main(main, *args, "--trials", "2")  # the same study, one more trial
    assert code == 0, err
    assert "1 of 2 trials done" in text and "trial 1: budget_spent" in text and "trial 2" not in text
    with open(out / "trials.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["trial"] for r in rows] == ["0", "1"] and {r["state"] for r in rows} == {"complete"}
    scores = {r["trial"]: float(r["score"]) for r in rows}
    best = max(scores, key=scores.get)
    summary = json.loads((out / f"trial-{best}" / "seed-0" / "summary.json").read_text())
    assert summary["final_evaluation"]["best"]["mean_return"] == pytest.approx(scores[best], rel=1e-5)
    saved = config_from_dict(json.loads((out / "best.json").read_text()))
    trial = json.loads((out / f"trial-{best}" / "seed-0" / "config.json").read_text())
    assert saved.learning_rate == trial["learning_rate"] and saved.num_envs == 8 and saved.total_timesteps == 512
    assert f"best: trial {best}" in text and str(saved.output) == str(out / "best")
    study = optuna.load_study(study_name="CartPole-v1-ppo", storage=f"sqlite:///{out / 'sweep.db'}")
    assert len(study.trials) == 2


def test_trials_run_as_one_population_each_as_its_lone_run(call_main, tmp_path, monkeypatch):
    import threading
    import time

    from rl_gpu.cli import tune_trials
    from rl_gpu.training.runner import train

    # The members' own work (callbacks, validations, evaluations) runs one member at a time: a callback that yields
    # the interpreter mid-call, right after the population iteration that wakes every member, is never entered by
    # a second member meanwhile.
    inside, most, lock = [0], [0], threading.Lock()

    def on_iteration(self, event):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.05)
        with lock:
            inside[0] -= 1

    monkeypatch.setattr(tune_trials.Pruning, "on_iteration", on_iteration, raising=False)
    out = tmp_path / "pop"
    code, text, err = call_main(main, "--env", "CartPole-v1", "--algo", "ppo", "--budget", "512", "--evals", "1",
                                "--trials", "2", "--population", "2", "--output", out, "--device", "cpu", *FIXED)
    assert code == 0, err
    assert most == [1]
    assert "batch of trials 0..1" in text and "trial 0: budget_spent" in text and "trial 1: budget_spent" in text
    with open(out / "trials.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["state"] for r in rows] == ["complete"] * 2
    configs = [json.loads((out / f"trial-{n}" / "seed-0" / "config.json").read_text()) for n in (0, 1)]
    drawn = [(c["learning_rate"], c["ppo"]["clip_coef"], c["ppo"]["ent_coef"]) for c in configs]
    assert drawn[0] != drawn[1] and configs[0]["num_envs"] == 8
    # Trial 1 trained alone with its own settings: the same losses (a batched update rounds differently only).
    lone = config_from_dict({**configs[1], "output": str(tmp_path / "lone"), "overwrite": False})
    (result,) = train(lone, log=lambda line: None, display="off")
    lines = [(out / "trial-1" / "seed-0" / "metrics.jsonl"), result.run_dir / "metrics.jsonl"]
    member, alone = ([m for m in map(json.loads, f.read_text().splitlines()) if "loss" in m] for f in lines)
    assert [m["global_step"] for m in member] == [m["global_step"] for m in alone] == [256, 512]
    for a, b in zip(member, alone):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4, abs=1e-6)


class _Trial:
    def __init__(self, prune_after: int) -> None:
        self.reports, self.prune_after = [], prune_after

    def report(self, value, step):
        self.reports.append((value, step))

    def should_prune(self):
        return len(self.reports) >= self.prune_after


def test_pruning_reports_each_validation_and_pauses_the_run(tmp_path):
    from rl_gpu.training.runner import train

    trial = _Trial(prune_after=2)
    pruning = Pruning(trial)
    config = build_config("CartPole-v1", "ppo", output=tmp_path / "r", seed=1, max_updates=6, eval_every=1,
                          num_envs=8, num_steps=32, eval_episodes=8, final_eval_episodes=8, min_updates=1)
    (result,) = train(config, log=lambda line: None, display="off", callbacks=[pruning])
    assert result.status == "paused" and [step for _, step in trial.reports] == [256, 512]
    assert pruning.pruned_at == 512


@pytest.mark.parametrize("algo,env", [("ppo", "CartPole-v1"), ("ppo", "HalfCheetah-v5"), ("sac", "Pendulum-v1"),
                                      ("td3", "Pendulum-v1")])
def test_every_draw_of_a_search_space_is_a_valid_run(tmp_path, algo, env):
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(25):
        overrides = search_spaces.SPACES[algo](study.ask(), 20_000)
        build_config(env, algo, 20_000, output=tmp_path / "x", **overrides)
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("args,needle", [
    (["--algo", "neurd", "--env", "RussianRoulette-v0"], "--algo neurd has no search space"),
    (["--env", "CartPole-v1", "--fixed", "learning_rate=0.1"], "--fixed learning_rate: the search draws it"),
    (["--env", "CartPole-v1", "--fixed", "num_env=3"], "unknown setting 'num_env' (did you mean 'num_envs'?)"),
    (["--env", "CartPole-v1", "--fixed", "num_envs"], "give NAME=VALUE"),
    (["--env", "CartPole-v1", "--budget", "0"], "--budget"),
    (["--env", "NoSuchEnv-v0"], "NoSuchEnv-v0"),
    (["--algo", "sac", "--env", "Pendulum-v1", "--population", "2"], "--population: --algo sac trains no popul"),
    (["--env", "HalfCheetah-v5", "--population", "2"], "stepped on the host"),
    (["--env", "CartPole-v1", "--population", "2", "--fixed", "clip_coef=0.3"], "--fixed clip_coef: the search dr"),
])
def test_bad_sweeps_are_refused_in_one_line(call_main, tmp_path, args, needle):
    code, _, err = call_main(main, *args, "--output", tmp_path / "s")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "s").exists()
