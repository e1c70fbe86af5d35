"""One process per run folder, and no command writes over a run's files.

Every ``train`` (fresh, ``--resume``, ``--overwrite``) holds its folder's lock for the run's whole life: a second
process refuses in one line naming the holder, and a lock whose holder died is taken over with a note. Export,
evaluate, bench and plot refuse an output that is one of a run's files or lies inside a live run."""

import json
import os

import pytest

from rl_gpu.runtime.run_files import LOCK_FILE, RunLock, RunLockedError, RunLocks, live_holder, run_file_reason

TINY = ["--env", "CartPole-v1", "--num-envs", "4", "--num-steps", "8", "--max-updates", "2", "--min-updates", "1",
        "--eval-every", "1", "--eval-episodes", "4", "--final-eval-episodes", "4", "--solve-threshold", "1e9",
        "--device", "cpu", "--hidden-sizes", "8", "--quiet"]


@pytest.fixture(scope="session")
def call(call_main):
    return call_main


@pytest.fixture(scope="module")
def run(tmp_path_factory, call):
    from rl_gpu.cli.train import main

    out = tmp_path_factory.mktemp("locked") / "out"
    code, _, err = call(main, *TINY, "--output", out)
    assert code == 1, err
    return out / "seed-11"


def test_a_held_lock_refuses_a_second_holder_naming_it(tmp_path):
    with RunLock(tmp_path / "a"):
        assert f"process {os.getpid()}" in live_holder(tmp_path / "a")
        with pytest.raises(RunLockedError, match=f"in use by process {os.getpid()} on "):
            RunLock(tmp_path / "a").acquire()
    assert live_holder(tmp_path / "a") is None
    assert (tmp_path / "a" / LOCK_FILE).read_text() == ""  # a clean end leaves no holder behind
    notes = []
    with RunLock(tmp_path / "a", notes.append):
        pass
    assert notes == []


def test_a_dead_holders_lock_is_taken_over_with_a_note(tmp_path):
    folder = tmp_path / "b"
    folder.mkdir()
    (folder / LOCK_FILE).write_text(json.dumps({"pid": 999999, "host": "gone", "command": "rl-gpu train"}))
    notes = []
    with RunLock(folder, notes.append):
        assert f"process {os.getpid()}" in live_holder(folder)
    assert len(notes) == 1 and "took over the lock" in notes[0] and "process 999999 on gone" in notes[0]


def test_locks_are_all_or_none_and_leave_no_empty_folder(tmp_path):
    with RunLock(tmp_path / "held"):
        with pytest.raises(RunLockedError):
            RunLocks([tmp_path / "new", tmp_path / "held"])
        assert not (tmp_path / "new").exists()  # created for the lock, removed when the lock failed


@pytest.mark.parametrize("flags", [["--resume", "{run}", "--max-updates", "3"],
                                   [*TINY, "--output", "{out}", "--overwrite"]])
def test_a_live_run_refuses_a_second_train(run, flags, call):
    from rl_gpu.cli.train import main

    def files():
        return {p.name: p.stat().st_mtime_ns for p in run.iterdir() if p.name != LOCK_FILE}

    before = files()
    with RunLock(run):  # a live run holds its folder
        code, _, err = call(main, *[f.format(run=run, out=run.parent) for f in flags])
    assert code == 2 and f"run folder {run} is in use by process {os.getpid()}" in err, err
    assert len(err.strip().splitlines()) == 1
    assert files() == before


def test_outputs_never_land_on_a_runs_files(run, tmp_path, call):
    from rl_gpu.cli.bench import main as bench
    from rl_gpu.cli.evaluate import main as evaluate
    from rl_gpu.cli.export import main as export
    from rl_gpu.cli.plot import main as plot

    best = run / "best.pt"
    def contents():
        return {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != LOCK_FILE}

    before = contents()
    cases = [
        (evaluate, [best, "--episodes", "2", "--device", "cpu", "--json-output", run / "last.pt"], "own last.pt"),
        (evaluate, [best, "--episodes", "2", "--device", "cpu", "--json-output", run / "summary.json"],
         "own summary.json"),
        (export, [best, "--output", run / "metrics.jsonl", "--format", "onnx"], "own metrics.jsonl"),
        (export, [best, "--output", run / "config.json", "--format", "torchscript"], "own config.json"),
        (export, [best, "--output", run / "tb" / "policy.pt"], "TensorBoard folder of run"),
        (plot, [run, "--output", run / "best.pt"], "own best.pt"),
        (bench, ["--output", run / "config.json", "--num-envs", "4"], "own config.json"),
    ]
    for command, args, needle in cases:
        code, _, err = call(command, *args)
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, (args, err)
    with RunLock(run):  # inside a live run, no new file either
        code, _, err = call(export, best, "--output", run / "policy.onnx")
        assert code == 2 and f"lies inside run {run}, which process {os.getpid()}" in err, err
    assert contents() == before
    code, _, err = call(export, best, "--output", tmp_path / "policy.onnx")  # elsewhere: written
    assert code == 0 and (tmp_path / "policy.onnx").is_file(), err
    assert run_file_reason(tmp_path / "last.pt") is None  # a name alone makes no run file


@pytest.mark.parametrize("kind", ["directory", "symlink", "fifo"])
def test_a_lock_that_is_not_a_regular_file_is_refused_in_one_line(tmp_path, kind, call):
    from rl_gpu.cli.train import main

    folder = tmp_path / "out" / "seed-11"
    folder.mkdir(parents=True)
    lock = folder / LOCK_FILE
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    {"directory": lock.mkdir, "symlink": lambda: lock.symlink_to(target),
     "fifo": lambda: os.mkfifo(lock)}[kind]()
    code, _, err = call(main, *TINY, "--output", tmp_path / "out", "--overwrite")
    assert code == 2 and f"cannot take its lock {lock}" in err and len(err.strip().splitlines()) == 1, err
    assert target.read_text() == "keep me" and sorted(p.name for p in folder.iterdir()) == [LOCK_FILE]
    assert run_file_reason(folder / "x.onnx") is None or "training" not in run_file_reason(folder / "x.onnx")
