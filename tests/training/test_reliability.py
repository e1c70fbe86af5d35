"""Exact resume, crash safety (SIGKILL, SIGTERM), numerical faults and refusing foreign checkpoints."""

import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rl_gpu.runtime.checkpoint import load_checkpoint, save_checkpoint
from rl_gpu.cli.presets import preset_config
from rl_gpu.envs.cartpole import CartPoleEnv
from rl_gpu.envs.registry import register
from rl_gpu.training.runner import VOLATILE_METRICS, resume, train

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
QUIET = lambda line: None  # noqa: E731


def _config(env_id, out, **kw):
    base = dict(device="cpu", seeds=(5,), num_envs=32, max_updates=7, eval_every=3, eval_episodes=64,
                final_eval_episodes=32, checkpoint_every=2, min_updates=7, output=out, overwrite=True)
    if env_id == "RussianRoulette-v0":
        base.update(success_z=1e9)
    else:
        base.update(solve_threshold=1e9, num_steps=32)
    base.update(kw)
    return dataclasses.replace(preset_config(env_id), **base)


def _metrics(run_dir):
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for r in records:
        for k in VOLATILE_METRICS:
            r.pop(k, None)
    return records


def _params(run_dir):
    return load_checkpoint(run_dir / "last.pt")["trainer"]["algorithm"]


def assert_same_run(expected_dir, run_dir):
    """``run_dir`` (stopped and resumed) equals ``expected_dir`` (never stopped): metrics.jsonl (times aside),
    parameters and optimiser state, and the final evaluation."""
    assert _metrics(expected_dir) == _metrics(run_dir)
    _assert_same_state(_params(expected_dir), _params(run_dir))
    summaries = [json.loads((p / "summary.json").read_text()) for p in (expected_dir, run_dir)]
    assert summaries[0]["final_evaluation"] == summaries[1]["final_evaluation"]


def _assert_same_state(a, b):
    for key in ("policy",):
        assert a[key].keys() == b[key].keys()
        for k in a[key]:
            assert torch.equal(a[key][k], b[key][k]), k
    assert torch.equal(a["policy_rng"], b["policy_rng"]) and torch.equal(a["shuffle_rng"], b["shuffle_rng"])
    sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
    assert sa.keys() == sb.keys()
    for k in sa:
        for name in sa[k]:
            assert torch.equal(sa[k][name], sb[k][name]), (k, name)


# A pause after 4 updates on CartPole and Pendulum repeats what the pause after 1 and Roulette's after 4 check: slow.
@pytest.mark.parametrize("env_id, pause_at", [
    ("CartPole-v1", 1), ("RussianRoulette-v0", 1), pytest.param("Pendulum-v1", 1, marks=pytest.mark.slow),
    pytest.param("RussianRoulette-v0", 4, marks=pytest.mark.slow),
    pytest.param("CartPole-v1", 4, marks=pytest.mark.slow), pytest.param("Pendulum-v1", 4, marks=pytest.mark.slow),
])
def test_stop_and_resume_is_bit_identical(tmp_path, env_id, pause_at):
    straight = _config(env_id, tmp_path / "a")
    (full,) = train(straight, log=QUIET)
    stopped = _config(env_id, tmp_path / "b")
    (paused,) = train(stopped, log=QUIET, stop_after=pause_at)
    assert paused.status == "paused"
    resumed = resume(tmp_path / "b" / "seed-5", stopped, log=QUIET)
    assert resumed.status == full.status == "goal_not_met"
    _assert_same_state(_params(tmp_path / "a" / "seed-5"), _params(tmp_path / "b" / "seed-5"))
    assert _metrics(tmp_path / "a" / "seed-5") == _metrics(tmp_path / "b" / "seed-5")
    sa = json.loads((tmp_path / "a" / "seed-5" / "summary.json").read_text())
    sb = json.loads((tmp_path / "b" / "seed-5" / "summary.json").read_text())
    assert sa["final_evaluation"] == sb["final_evaluation"]


def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "rl_gpu.train", *args], cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=300, **kw)


CLI_RUN = ["--env", "CartPole-v1", "--device", "cpu", "--seeds", "5", "--num-envs", "32", "--num-steps", "32",
           "--max-updates", "12", "--eval-every", "4", "--eval-episodes", "16", "--final-eval-episodes", "16",
           "--solve-threshold", "1e9", "--checkpoint-every", "2", "--log-every", "1"]


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory, call_main):
    from rl_gpu.cli.train import main as train_main

    # Trained in this process; the signal tests' runs, each in a process of its own, must still end equal to it.
    out = tmp_path_factory.mktemp("ref")
    code, _, err = call_main(train_main, "--output", out, *CLI_RUN)
    assert code == 1, err  # goal (1e9) not met: a complete run
    return out / "seed-5"


def _wait_for_updates(run_dir, count, proc, timeout=120):
    deadline = time.time() + timeout
    metrics = run_dir / "metrics.jsonl"
    while time.time() < deadline:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= count:
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.02)
    return False


@pytest.mark.slow  # long: keeps the default suite under 8 minutes on 2 cores (make test-slow runs it)
def test_sigkill_at_random_moments_then_resume(tmp_path, reference_run):
    rng = random.Random(1234)
    killed = 0
    for trial in range(3):
        out = tmp_path / f"t{trial}"
        proc = subprocess.Popen([sys.executable, "-m", "rl_gpu.train", "--output", str(out), *CLI_RUN], cwd=ROOT,
                                env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        run_dir = out / "seed-5"
        if _wait_for_updates(run_dir, rng.randint(2, 10), proc):
            time.sleep(rng.uniform(0.0, 0.3))
            proc.send_signal(signal.SIGKILL)
            killed += 1
        proc.wait(timeout=120)
        for name in ("best.pt", "last.pt"):
            if (run_dir / name).exists():
                load_checkpoint(run_dir / name)  # never corrupt, whenever the kill came
        logged = []
        for line in (run_dir / "metrics.jsonl").read_text().splitlines():
            try:
                logged.append(json.loads(line)["update"])
            except json.JSONDecodeError:
                pass  # a line cut short by the kill: dropped on resume
        saved = load_checkpoint(run_dir / "last.pt")["update"] if (run_dir / "last.pt").exists() else 0
        assert max(logged) - saved <= 2  # at most one checkpoint interval (2 updates) is lost
        if not (run_dir / "last.pt").exists():
            continue
        done = _cli("--resume", str(run_dir))
        assert done.returncode == 1, done.stderr
        assert f"resumed at update {saved}" in done.stdout or saved == 0
        _assert_same_state(_params(reference_run), _params(run_dir))
        assert _metrics(reference_run) == _metrics(run_dir)
    assert killed >= 2


@pytest.mark.slow  # long: keeps the default suite under 8 minutes on 2 cores (make test-slow runs it)
def test_sigterm_saves_and_exits_with_a_message(tmp_path, reference_run):
    out = tmp_path / "term"
    proc = subprocess.Popen([sys.executable, "-m", "rl_gpu.train", "--output", str(out), *CLI_RUN], cwd=ROOT,
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert _wait_for_updates(out / "seed-5", 3, proc)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "SIGTERM received" in stderr and "--resume" in stderr
    last_logged = json.loads((out / "seed-5" / "metrics.jsonl").read_text().splitlines()[-1])["update"]
    assert load_checkpoint(out / "seed-5" / "last.pt")["update"] == last_logged
    done = _cli("--resume", str(out / "seed-5"))
    assert done.returncode == 1
    _assert_same_state(_params(reference_run), _params(out / "seed-5"))


def test_resume_refuses_changed_settings_and_missing_runs(tmp_path, reference_run, call_main):
    from rl_gpu.cli.train import main as train_main

    code, _, err = call_main(train_main, "--resume", reference_run, "--learning-rate", "0.5")
    assert code == 2 and "--learning-rate" in err and "Traceback" not in err
    code, _, err = call_main(train_main, "--resume", tmp_path / "nowhere")
    assert code == 2 and "no such run directory" in err


class _ExplodingCartPole(CartPoleEnv):
    """CartPole whose training batch (32 rows) earns NaN rewards from its 161st step, provoking a non-finite
    loss in the sixth update; evaluation batches (other sizes) stay finite."""

    def _transition(self, inner, action):
        next_inner, reward, terminated = super()._transition(inner, action)
        self.calls = getattr(self, "calls", 0) + 1
        if self.num_envs == 32 and self.calls > 32 * 5:
            reward = reward * float("nan")
        return next_inner, reward, terminated


def test_non_finite_loss_stops_training_and_keeps_last_good_checkpoint(tmp_path):
    register("Exploding-v0", _ExplodingCartPole, override=True)
    config = dataclasses.replace(_config("CartPole-v1", tmp_path), env="Exploding-v0", max_updates=20,
                                 checkpoint_every=1, eval_every=100, min_updates=1)
    (result,) = train(config, log=QUIET)
    assert result.status == "numerical_error" and "non-finite" in result.reason
    payload = load_checkpoint(tmp_path / "seed-5" / "last.pt")
    assert payload["update"] == 5
    assert all(torch.isfinite(t).all() for t in payload["trainer"]["algorithm"]["policy"].values())

    from rl_gpu.train import main

    code = main(["--env", "Exploding-v0", "--output", str(tmp_path / "cli"), "--device", "cpu", "--seeds", "5",
                 "--num-envs", "32", "--num-steps", "32", "--solve-threshold", "1e9", "--max-updates", "20",
                 "--eval-every", "100", "--min-updates", "1", "--eval-episodes", "8"])
    assert code == 3


def test_checkpoint_of_another_env_or_architecture_is_refused(tmp_path, reference_run, call_main):
    from rl_gpu.cli.evaluate import main as evaluate_main

    payload = load_checkpoint(reference_run / "best.pt")
    other_env = dict(payload, env_id="Acrobot-v1")
    save_checkpoint(tmp_path / "other_env.pt", other_env)
    other_arch = dict(payload, policy_config=dict(payload["policy_config"], hidden_sizes=[8]))
    save_checkpoint(tmp_path / "other_arch.pt", other_arch)
    for path, needle in [(tmp_path / "other_env.pt", "observes 4 values"),
                         (tmp_path / "other_arch.pt", "usable policy")]:
        code, _, err = call_main(evaluate_main, "--checkpoint", path, "--device", "cpu", "--episodes", "4")
        assert code == 2 and needle in err and str(path) in err, err
        assert len(err.strip().splitlines()) == 1


def test_atomic_write_leaves_old_file_when_writing_fails(tmp_path, monkeypatch):
    from rl_gpu.runtime import files

    target = tmp_path / "last.pt"
    save_checkpoint(target, {"update": 1})

    def broken_fsync(fd):
        raise OSError("disk full")

    monkeypatch.setattr(files.os, "fsync", broken_fsync)
    with pytest.raises(OSError):
        save_checkpoint(target, {"update": 2})
    monkeypatch.undo()
    assert load_checkpoint(target)["update"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]
