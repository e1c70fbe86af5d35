"""The command-line tools as a user runs them: train, evaluate, the quickstart, and bad input."""

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
TINY = ["--num-envs", "256", "--min-updates", "2", "--eval-every", "2", "--max-updates", "4",
        "--eval-episodes", "512", "--final-eval-episodes", "512", "--device", "cpu", "--log-every", "1"]


def run(*args, cwd=ROOT, timeout=300):
    return subprocess.run([sys.executable, *args], cwd=cwd, env=ENV, capture_output=True, text=True,
                          timeout=timeout)


def call(command, *args):
    """``command``'s ``main`` run in this process, as its entry point runs it, as a finished process (a process of
    its own costs seconds of imports; the tests that need one, for what a fresh interpreter does, use :func:`run`)."""
    from cli_call import call_main

    code, out, err = call_main(command, *args)
    return subprocess.CompletedProcess(args, code, out, err)


def train(*args):
    from rl_gpu.cli.train import main

    return call(main, *args)


def evaluate(*args):
    from rl_gpu.cli.evaluate import main

    return call(main, *args)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "run"
    # z = 0 makes any non-worse validation pass, so the tiny run finishes quickly and succeeds.
    proc = train("--output", out, "--seeds", "3", *TINY, "--success-z", "-100", "--consecutive-passes", "1")
    return out, proc


def test_train_writes_run_files_and_succeeds(trained):
    out, proc = trained
    assert proc.returncode == 0, proc.stderr
    run_dir = out / "seed-3"
    for name in ("config.json", "metrics.jsonl", "summary.json", "best.pt", "last.pt"):
        assert (run_dir / name).is_file(), name
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["success"] is True
    assert set(summary["final_evaluation"]) == {"best", "initial", "random"}
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in lines] == list(range(len(lines)))
    assert "validation" in lines[0]
    assert all(r["global_step"] > 0 and "loss" in r for r in lines[1:])
    assert all(r["learning_rate"] > 0 for r in lines[1:])  # the learning rate is a per-update metric
    assert json.loads((run_dir / "config.json").read_text())["num_envs"] == 256
    assert "steps/s" in proc.stdout and "final evaluation" in proc.stdout


def test_train_refuses_existing_run_dir_and_keeps_files(trained):
    out, _ = trained
    def snapshot():
        return {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    before = snapshot()
    proc = train("--output", out, "--seeds", "3", *TINY)
    assert proc.returncode == 2
    assert "already exists" in proc.stderr and "Traceback" not in proc.stderr
    assert snapshot() == before


def test_train_fails_with_exit_1_when_goal_not_met(tmp_path, call_main):
    from rl_gpu.cli.train import main as train_main

    code, _, err = call_main(train_main, "--output", tmp_path / "r", *TINY, "--success-z", "1000")
    assert code == 1
    assert "did not reach its goal" in err and "goal not met" in err
    assert (tmp_path / "r" / "seed-11" / "summary.json").is_file()


def test_evaluate_reports_per_seat_and_interval(trained):
    out, _ = trained
    report = out.parent / "eval.json"
    proc = evaluate("--checkpoint", out / "seed-3" / "best.pt", "--device", "cpu", "--episodes", "1000",
                    "--json-output", report)
    assert proc.returncode == 0, proc.stderr
    assert "seat 0" in proc.stdout and "seat 1" in proc.stdout and "95% Wilson CI" in proc.stdout
    data = json.loads(report.read_text())
    assert data["policy"]["episodes"] == 1000
    assert sum(s["games"] for s in data["policy"]["seats"]) == 1000


def test_evaluate_seeds_are_disjoint_from_training_and_repeatable(trained, call_main):
    from rl_gpu.cli.evaluate import main as evaluate

    out, _ = trained
    args = ("--checkpoint", out / "seed-3" / "best.pt", "--device", "cpu", "--episodes", "300")
    a, b, c = call_main(evaluate, *args), call_main(evaluate, *args), call_main(evaluate, *args, "--seed", "1")
    assert a[0] == b[0] == c[0] == 0, (a[2], c[2])
    assert a[1] == b[1]
    assert a[1] != c[1]


def test_quickstart_runs_unchanged():
    proc = run("quickstart.py")
    assert proc.returncode == 0, proc.stderr
    assert "learner decisions:" in proc.stdout and "loss:" in proc.stdout


def _one_line_error(proc):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, proc.stderr
    assert "error:" in lines[0]
    return lines[0]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--bogus-flag", "1"], "bogus"),
        (["--num-envs", "0"], "num-envs"),
        (["--num-envs", "-5"], "num-envs"),
        (["--num-envs", "many"], "num-envs"),
        (["--max-updates", "0"], "max-updates"),
        (["--min-updates", "10", "--max-updates", "5"], "min-updates"),
        (["--env", "NoSuchEnv-v9"], "known"),
        (["--seeds"], "seeds"),
        (["--gamma", "1.5"], "gamma=1.5"),
        (["--num-envs", "10", "--num-minibatches", "3"], "divisible"),
        (["--device", "tpu"], "device"),
    ],
)
def test_train_bad_input_one_line_exit_2(tmp_path, args, needle, call_main):
    # Two cases as a user meets them (a process of their own: its exit code, nothing on stderr but the line), the
    # rest through the same entry point in this process (each process costs seconds of imports).
    if needle in ("bogus", "gamma=1.5"):
        proc = run("-m", "rl_gpu.train", "--output", str(tmp_path / "x"), *args)
    else:
        from rl_gpu.cli.train import main as train_main

        code, out, err = call_main(train_main, "--output", tmp_path / "x", *args)
        proc = subprocess.CompletedProcess(args, code, out, err)
    assert needle in _one_line_error(proc)
    assert not (tmp_path / "x").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error for a machine without CUDA")
def test_cuda_without_gpu_is_a_clear_error(tmp_path):
    proc = train("--output", tmp_path / "x", "--device", "cuda")
    assert "CUDA" in _one_line_error(proc)
    assert not (tmp_path / "x").exists()


def test_evaluate_bad_checkpoints(tmp_path, trained, call_main):
    out, _ = trained
    good = (out / "seed-3" / "best.pt").read_bytes()
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good[: len(good) // 2])
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(os.urandom(4096))
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(3)}, foreign)
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    crafted = tmp_path / "crafted.pt"
    crafted.write_bytes(pickle.dumps(Exploit()))
    from rl_gpu.cli.evaluate import main as evaluate

    # In this process (the command's main, as rl-gpu evaluate runs it); the crafted pickle also through the old
    # module entry point in a process of its own.
    for path, needle in [(tmp_path / "missing.pt", "no such"), (truncated, "truncated"), (garbage, "not"),
                         (foreign, "not an rl_gpu checkpoint"), (crafted, "")]:
        code, _, err = call_main(evaluate, "--checkpoint", path, "--device", "cpu", "--episodes", "10")
        assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert str(path) in err and needle in err
    proc = run("-m", "rl_gpu.evaluate", "--checkpoint", str(crafted), "--device", "cpu", "--episodes", "10")
    assert str(crafted) in _one_line_error(proc)
    assert not marker.exists(), "the crafted checkpoint executed code"


def test_evaluate_bad_flags(call_main):
    from rl_gpu.cli.evaluate import main as evaluate

    for args in ((), ("--checkpoint", "x.pt", "--episodes", "0")):
        code, _, err = call_main(evaluate, *args)
        lines = [x for x in err.splitlines() if x.strip()]
        assert code == 2 and len(lines) == 1 and "error:" in lines[0] and "Traceback" not in err, err


def test_output_into_a_closed_pipe_ends_quietly():
    """``rl-gpu --help | head -1``: the reader goes away (here before the command writes anything, so the write
    always fails); no BrokenPipeError traceback, 141 like a tool SIGPIPE killed."""
    commands = [["-m", "rl_gpu", "train", "--help"], ["-m", "rl_gpu.train", "--version"]]
    procs = [subprocess.Popen([sys.executable, *c], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for c in commands]
    for proc in procs:
        proc.stdout.close()  # before the command writes anything
    for command, proc in zip(commands, procs):
        err = proc.stderr.read()
        assert proc.wait(timeout=120) == 141, (command, err)
        assert err == "", (command, err)


def test_top_level_help_and_unknown_command():
    ok = run("-m", "rl_gpu", "--help")
    assert ok.returncode == 0 and "train" in ok.stdout and "evaluate" in ok.stdout
    bad = run("-m", "rl_gpu", "fly")
    assert bad.returncode == 2 and "unknown command" in bad.stderr


@pytest.mark.slow  # long: keeps the default suite under 8 minutes on 2 cores (make test-slow runs it)
def test_config_file_repeats_a_run_exactly(tmp_path):
    args = ["--env", "CartPole-v1", "--device", "cpu", "--num-envs", "16", "--num-steps", "16", "--max-updates", "3",
            "--eval-every", "3", "--eval-episodes", "8", "--final-eval-episodes", "8", "--solve-threshold", "1e9"]
    first = run("-m", "rl_gpu.train", "--output", str(tmp_path / "a"), *args)
    assert first.returncode == 1, first.stderr
    saved = tmp_path / "a" / "seed-11" / "config.json"
    recorded = json.loads(saved.read_text())
    assert torch.__version__.startswith(recorded["run_environment"]["packages"]["torch"])
    again = run("-m", "rl_gpu.train", "--config", str(saved), "--output", str(tmp_path / "b"))
    assert again.returncode == 1, again.stderr

    def losses(d):
        return [json.loads(x).get("loss") for x in (d / "seed-11" / "metrics.jsonl").read_text().splitlines()]

    assert losses(tmp_path / "a") == losses(tmp_path / "b")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert "not valid JSON" in _one_line_error(run("-m", "rl_gpu.train", "--config", str(bad)))
