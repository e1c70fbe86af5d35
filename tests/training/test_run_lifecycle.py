"""A run's life: finished runs are not trained again, stop signals cut evaluations short and leave a run that
resumes exactly, non-finite parameters never reach a checkpoint, a step budget ends a run, and a multi-seed run
is summarised (or, when stopped, says how to continue). In process, on tiny runs of the roulette game (games of
at most 10 actions make evaluations cheap) and of Pendulum where a single-player task is needed."""

import contextlib
import dataclasses
import io
import json
import os
import re
import shlex
import shutil
import signal

import pytest
import torch

from rl_gpu.cli.presets import preset_config
from rl_gpu.cli.train import main
from rl_gpu.runtime.checkpoint import load_checkpoint
from rl_gpu.training.runner import Trainer, resume, train
from rl_gpu.training.seed_summary import bootstrap_ci, iqm

QUIET = lambda line: None  # noqa: E731
TINY = ["--env", "RussianRoulette-v0", "--device", "cpu", "--num-envs", "16", "--max-updates", "4",
        "--min-updates", "1", "--eval-every", "2", "--checkpoint-every", "2", "--eval-episodes", "16",
        "--final-eval-episodes", "16", "--success-z", "1e9", "--log-every", "1", "--quiet"]
PENDULUM = ["--env", "Pendulum-v1", "--device", "cpu", "--num-envs", "16", "--num-steps", "16", "--max-updates", "4",
            "--eval-every", "2", "--checkpoint-every", "2", "--eval-episodes", "4", "--final-eval-episodes", "4",
            "--log-every", "1", "--quiet"]


def call(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


def _config(out, **kw):
    base = dict(device="cpu", seeds=(5,), num_envs=16, max_updates=4, eval_every=2, checkpoint_every=2,
                eval_episodes=16, final_eval_episodes=16, success_z=1e9, min_updates=1, output=out, quiet=True)
    return dataclasses.replace(preset_config("RussianRoulette-v0"), **{**base, **kw})


def _files(run_dir):
    return {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}


def _policy(run_dir, name="last.pt"):
    return load_checkpoint(run_dir / name)["algorithm"]["policy"]


def _lines(run_dir):
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_finished_run_is_refused_unless_its_limit_is_raised(tmp_path):
    code, _, err = call(*TINY, "--seeds", "5", "--output", tmp_path / "run")
    assert code == 1, err
    run_dir = tmp_path / "run" / "seed-5"
    before = _files(run_dir)
    for extra in ([], ["--max-updates", "4"], ["--max-updates", "3"]):
        code, _, err = call("--resume", run_dir, *extra)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "is finished" in err and "--max-updates above 4" in err
    # A config file naming the run: the same rule, and new hyper-parameters are refused as flags are.
    settings = tmp_path / "resume.json"
    settings.write_text(json.dumps({"env": "RussianRoulette-v0", "resume": str(run_dir), "learning_rate": 0.5}))
    code, _, err = call("--config", settings)
    assert code == 2 and "settings are refused on resume" in err and "--learning-rate" in err
    # Repeating the run from its config.json never replaces it (--overwrite is not saved).
    assert json.loads((run_dir / "config.json").read_text())["overwrite"] is False
    code, _, err = call("--config", run_dir / "config.json")
    assert code == 2 and "already exists" in err
    assert _files(run_dir) == before
    # Raising --max-updates continues the run and then replaces the result.
    code, out, err = call("--resume", run_dir, "--max-updates", "6")
    assert code == 1, err
    assert "resumed at update 4" in out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["updates"] == 6 and summary["status"] == "goal_not_met"
    assert [r["update"] for r in _lines(run_dir)] == list(range(7))


def test_a_succeeded_run_is_finished(tmp_path):
    code, _, err = call(*TINY, "--seeds", "5", "--output", tmp_path, "--success-z", "-100",
                        "--consecutive-passes", "1")
    assert code == 0, err
    code, _, err = call("--resume", tmp_path / "seed-5", "--max-updates", "10")
    assert code == 2 and "met its goal at update 2" in err


def _stop_in(monkeypatch, purpose, update):
    """SIGTERM ourselves as the evaluation ``purpose`` at ``update`` starts (once)."""
    evaluate, fired = Trainer.evaluate, []

    def evaluate_then_signal(self, policy, episodes, which):
        if which == purpose and self.state.update == update and not fired:
            fired.append(True)
            os.kill(os.getpid(), signal.SIGTERM)
        return evaluate(self, policy, episodes, which)

    monkeypatch.setattr(Trainer, "evaluate", evaluate_then_signal)
    return fired


def test_sigterm_in_the_final_evaluation_stops_and_resume_finishes_it(tmp_path, monkeypatch):
    fired = _stop_in(monkeypatch, "final-eval", 4)
    code, _, err = call(*TINY, "--seeds", "5", "--output", tmp_path)
    assert fired and code == 128 + signal.SIGTERM, err
    run_dir = tmp_path / "seed-5"
    assert "during the final evaluation" in err and f"--resume {run_dir}" in err
    assert not (run_dir / "summary.json").exists()
    assert load_checkpoint(run_dir / "last.pt")["update"] == 4
    monkeypatch.undo()
    code, _, err = call("--resume", run_dir)
    assert code == 1, err
    assert json.loads((run_dir / "summary.json").read_text())["updates"] == 4
    assert [r["update"] for r in _lines(run_dir)] == [0, 1, 2, 3, 4]  # no further training


@pytest.mark.parametrize("update", [0, 2])
def test_sigterm_in_a_validation_resumes_exactly(tmp_path, monkeypatch, update):
    (straight,) = train(_config(tmp_path / "a"), log=QUIET)
    fired = _stop_in(monkeypatch, "validation", update)
    (stopped,) = train(_config(tmp_path / "b"), log=QUIET)
    assert fired and stopped.status == "interrupted" and stopped.signum == signal.SIGTERM
    run_dir = tmp_path / "b" / "seed-5"
    where = "the initial validation" if update == 0 else f"the validation at update {update}"
    assert f"during {where}" in stopped.reason and "--resume" in stopped.reason
    assert load_checkpoint(run_dir / "last.pt")["update"] == update
    monkeypatch.undo()
    resumed = resume(run_dir, _config(tmp_path / "b"), log=QUIET)
    assert resumed.status == straight.status == "goal_not_met"
    a, b = _policy(tmp_path / "a" / "seed-5"), _policy(run_dir)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert resumed.summary["final_evaluation"] == straight.summary["final_evaluation"]
    validations = [r["update"] for r in _lines(run_dir) if "validation" in r]
    assert validations == [0, 2, 4]


def test_non_finite_parameters_never_reach_a_checkpoint(tmp_path, monkeypatch):
    one_update = Trainer.train_one_update

    def poisoned(self, logger):
        values = one_update(self, logger)
        if self.state.update == 4:  # after the update's loss was computed: only the parameters show it
            with torch.no_grad():
                next(iter(self.algo.policy.parameters())).fill_(float("inf"))
        return values

    monkeypatch.setattr(Trainer, "train_one_update", poisoned)
    (result,) = train(_config(tmp_path, max_updates=6), log=QUIET)
    assert result.status == "numerical_error"
    assert "non-finite parameters or optimiser state after update 4" in result.reason
    assert "(update 2)" in result.reason
    assert load_checkpoint(tmp_path / "seed-5" / "last.pt")["update"] == 2
    for name in ("last.pt", "best.pt"):
        assert all(torch.isfinite(t).all() for t in _policy(tmp_path / "seed-5", name).values())


def test_a_huge_learning_rate_exits_3_with_finite_checkpoints(tmp_path):
    code, _, err = call(*TINY, "--seeds", "5", "--output", tmp_path, "--learning-rate", "1e38",
                        "--eval-every", "1", "--checkpoint-every", "1", "--max-updates", "8")
    assert code == 3, err
    run_dir = tmp_path / "seed-5"
    saved = load_checkpoint(run_dir / "last.pt")
    assert f"holds the last finite state (update {saved['update']})" in err
    for path in run_dir.glob("*.pt"):
        payload = load_checkpoint(path)
        # best.pt holds the policy only; last.pt the whole training state.
        trainer = payload.get("trainer", {"algorithm": {"policy": {}, "optimizer": {"state": {}}}})
        tensors = [*payload["algorithm"]["policy"].values(), *trainer["algorithm"]["policy"].values(),
                   *[t for s in trainer["algorithm"]["optimizer"]["state"].values() for t in s.values()]]
        assert all(torch.isfinite(t).all() for t in tensors if t.is_floating_point()), path
    assert "trainer" in saved
    assert all("trainer" not in load_checkpoint(path) for path in run_dir.glob("best.pt"))


def test_a_step_budget_ends_the_run_and_drives_the_schedule(tmp_path):
    budget = 700  # 256 steps per update: the budget is spent during the third update
    code, out, err = call(*PENDULUM, "--seeds", "5", "--output", tmp_path, "--total-timesteps", budget,
                          "--solve-threshold", "None", "--anneal-lr", "--learning-rate", "0.002",
                          "--eval-every", "100")
    assert code == 0, err
    run_dir = tmp_path / "seed-5"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "budget_spent" and summary["global_step"] == 768 and summary["updates"] == 3
    assert "final_evaluation" in summary  # the last update was validated, so best.pt exists
    lines = [r for r in _lines(run_dir) if r["update"] > 0]
    assert all("learning_rate" in r for r in lines)
    expected = [0.002 * (1 - k * 256 / budget) for k in range(3)]
    assert [r["learning_rate"] for r in lines] == pytest.approx(expected, rel=1e-6)
    code, _, err = call("--resume", run_dir)
    assert code == 2 and "--total-timesteps above 768" in err
    code, _, err = call("--resume", run_dir, "--total-timesteps", "1000")
    assert code == 0, err
    assert json.loads((run_dir / "summary.json").read_text())["updates"] == 4


def test_the_schedule_counts_the_steps_a_turn_based_game_takes(tmp_path):
    # A turn-based game pads finished games, so an update takes fewer than N * T transitions: the learning
    # rate decays over the steps actually taken and reaches 0 only when the budget is spent.
    budget = 2000
    code, out, err = call(*TINY, "--seeds", "5", "--output", tmp_path, "--total-timesteps", budget,
                          "--anneal-lr", "--learning-rate", "0.002", "--max-updates", "100", "--num-steps", "32")
    assert code in (0, 1), err
    lines = [r for r in _lines(tmp_path / "seed-5") if r["update"] > 0 and "learning_rate" in r]
    assert len(lines) > budget // (16 * 32) + 1  # more updates than full ones would need: games were padded
    taken = [0] + [sum(r["transitions"] for r in lines[:k]) for k in range(1, len(lines))]
    assert [r["learning_rate"] for r in lines] == pytest.approx([0.002 * (1 - t / budget) for t in taken], rel=1e-6)
    assert lines[-1]["learning_rate"] > 0 and taken[-1] < budget <= taken[-1] + lines[-1]["transitions"]
    # Nor are the updates it takes known in advance: the progress lines count the steps against the budget.
    progress = [line for line in out.splitlines() if "] update " in line]
    assert progress and all(f"/{budget:,}  " in line and "update /" not in line for line in progress), progress
    assert not any(re.search(r"update +[0-9]+/", line) for line in progress), progress


def test_multi_seed_summary_and_a_stopped_multi_seed_run(tmp_path, monkeypatch):
    code, out, err = call(*TINY, "--seeds", "1", "2", "3", "--output", tmp_path / "all")
    assert code == 1, err
    summary = json.loads((tmp_path / "all" / "summary.json").read_text())
    scores = [s["score"] for s in summary["seeds"]]
    finals = [json.loads((tmp_path / "all" / f"seed-{s}" / "summary.json").read_text()) for s in (1, 2, 3)]
    assert scores == [f["final_evaluation"]["best"]["win_rate"] for f in finals]
    assert summary["iqm"] == pytest.approx(iqm(scores)) and summary["successes"] == 0
    assert summary["iqm_ci95"] == list(bootstrap_ci(scores))
    assert "IQM" in out
    # Stopped during seed 2: the message says what is done and how to continue the others, exactly.
    one_update, fired = Trainer.train_one_update, []

    def signal_in_seed_2(self, logger):
        values = one_update(self, logger)
        if self.seed == 2 and self.state.update == 1 and not fired:
            fired.append(True)
            os.kill(os.getpid(), signal.SIGTERM)
        return values

    monkeypatch.setattr(Trainer, "train_one_update", signal_in_seed_2)
    out_dir = tmp_path / "stopped"
    code, _, err = call(*TINY, "--seeds", "1", "2", "3", "--output", out_dir)
    assert code == 128 + signal.SIGTERM, err
    assert "seeds finished: 1" in err
    commands = [line.split(": ", 2)[2] for line in err.splitlines() if line.startswith("rl-gpu train: continue")
                or line.startswith("rl-gpu train: start")]
    assert commands == [f"rl-gpu train --resume {out_dir / 'seed-2'}",
                        f"rl-gpu train --config {out_dir / 'seed-1' / 'config.json'} --output {out_dir} --seeds 3"]
    monkeypatch.undo()
    for command in commands:
        code, _, err = call(*shlex.split(command)[2:])
        assert code == 1, err
    for seed in (1, 2, 3):
        again = json.loads((out_dir / f"seed-{seed}" / "summary.json").read_text())
        assert again["final_evaluation"] == finals[seed - 1]["final_evaluation"]


def test_a_foreign_last_pt_is_refused_before_metrics_are_touched(tmp_path):
    assert call(*TINY, "--seeds", "5", "6", "--output", tmp_path / "game", "--max-updates", "2")[0] == 1
    assert call(*PENDULUM, "--seeds", "5", "--output", tmp_path / "pendulum", "--max-updates", "1",
                "--solve-threshold", "1e9")[0] == 1
    run_dir = tmp_path / "game" / "seed-5"
    (run_dir / "summary.json").unlink()  # not finished: a resume would go ahead
    for source, needle in [(tmp_path / "pendulum" / "seed-5", "env 'Pendulum-v1'"),
                           (tmp_path / "game" / "seed-6", "seed 6")]:
        shutil.copy(source / "last.pt", run_dir / "last.pt")
        before = _files(run_dir)
        code, _, err = call("--resume", run_dir)
        assert code == 2 and needle in err and "belongs to another run" in err, err
        assert _files(run_dir) == before


def test_iqm_and_its_bootstrap_interval():
    scores = [5.0, 1.0, 100.0, 2.0, 3.0, 4.0, -50.0, 6.0]
    assert iqm(scores) == pytest.approx((2 + 3 + 4 + 5) / 4)  # the middle half of the sorted eight
    assert iqm([1.0, 2.0, 3.0]) == pytest.approx(2.0)
    lo, hi = bootstrap_ci(scores)
    assert (lo, hi) == bootstrap_ci(scores)  # fixed bootstrap seed
    assert lo <= iqm(scores) <= hi and lo < hi
    assert bootstrap_ci([7.0] * 5) == (7.0, 7.0)


def test_the_seed_summary_aggregates_exploitability_where_every_seed_measured_it():
    from rl_gpu.training.seed_summary import describe, seed_summary

    def summary(seed, exploit):
        return {"seed": seed, "status": "budget_spent", "success": False,
                "final_evaluation": {"best": {"win_rate": 0.45}},
                **({"exploitability": {"best": exploit, "initial": 2.37, "unit": "chips per game"}}
                   if exploit is not None else {})}

    values = [0.05, 0.07, 0.06, 0.09, 0.20]
    across = seed_summary([summary(s, v) for s, v in enumerate(values)], multi_player=True)
    measured = across["exploitability"]
    assert measured["unit"] == "chips per game" and [p["value"] for p in measured["seeds"]] == values
    assert measured["iqm"] == pytest.approx(iqm(values)) and measured["iqm_ci95"] == list(bootstrap_ci(values))
    assert measured["median"] == pytest.approx(0.07)
    assert "exploitability of best.pt (chips per game): seed 0 0.0500" in describe(across)
    # Self-play has no goal to meet: the seeds trained their budget, not "goal met by 0/5".
    assert "all 5 seeds trained their whole budget" in describe(across) and "goal met" not in describe(across)
    ended = [summary(0, 0.05), {**summary(1, 0.05), "status": "goal_not_met"}]
    assert "goal met by 0/2 seeds" in describe(seed_summary(ended, multi_player=True))
    # A seed that measured none (stopped before its final evaluation): no aggregate of a part of the seeds.
    assert "exploitability" not in seed_summary([summary(0, 0.05), summary(1, None)], multi_player=True)


def test_max_updates_and_a_step_budget_both_count_whichever_comes_first(tmp_path):
    # 256 steps per update: --max-updates 2 comes long before the budget (issue 37, item 5: the flag was ignored).
    code, _, err = call(*PENDULUM, "--seeds", "5", "--output", tmp_path / "goal", "--total-timesteps", 100_000,
                        "--max-updates", 2)
    assert code == 1, err  # a goal (Pendulum's return threshold) not met within the updates: exit 1, as without
    summary = json.loads((tmp_path / "goal" / "seed-5" / "summary.json").read_text())
    assert summary["status"] == "goal_not_met" and summary["updates"] == 2 and summary["global_step"] == 512
    assert "within --max-updates 2 (step 512 of the --total-timesteps 100,000)" in summary["reason"]
    code, _, err = call("--resume", tmp_path / "goal" / "seed-5")
    assert code == 2 and "pass a --max-updates above 2" in err
    code, _, err = call("--resume", tmp_path / "goal" / "seed-5", "--max-updates", 3)
    assert code == 1 and json.loads((tmp_path / "goal" / "seed-5" / "summary.json").read_text())["updates"] == 3
    # Without a goal the updates are the budget that ran out: budget_spent, exit 0.
    code, _, err = call(*PENDULUM, "--seeds", "5", "--output", tmp_path / "budget", "--total-timesteps", 100_000,
                        "--max-updates", 2, "--solve-threshold", "None")
    assert code == 0, err
    summary = json.loads((tmp_path / "budget" / "seed-5" / "summary.json").read_text())
    assert summary["status"] == "budget_spent" and summary["updates"] == 2
    assert summary["reason"].startswith("trained the --max-updates 2 updates (step 512 of the --total-timesteps")
