"""A damaged or edited run folder met by a resume (issue 37, item 7): refused in one line before training, or
(a missing best.pt) said in one line with the final evaluation still done; files read within limits."""

import dataclasses
import json
import os

import pytest

from rl_gpu.cli.train import main
from rl_gpu.core.errors import UsageError
from rl_gpu.runtime.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from rl_gpu.runtime.hardware import host_memory_bytes
from rl_gpu.training.runner import resume, train
from test_reliability import QUIET, _config  # noqa: I001 (a sibling)


@pytest.fixture
def stopped(tmp_path):
    """A CartPole run paused after 3 of its 7 updates (validations at 3 and 6)."""
    config = _config("CartPole-v1", tmp_path)
    (result,) = train(config, log=QUIET, stop_after=3)
    assert result.status == "paused"
    return config, tmp_path / "seed-5"


def test_an_edited_config_json_is_refused_and_a_resume_rewrites_it(stopped):
    config, run_dir = stopped
    path = run_dir / "config.json"
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "learning_rate": 0.5}))
    with pytest.raises(UsageError, match=r"config.json was edited: it says learning_rate 0.5 \(last.pt: 0.001\)"):
        resume(run_dir, config, log=QUIET)
    path.write_text(json.dumps({**record, "max_updates": 9}))  # a setting a resume may change: not refused
    result = resume(run_dir, dataclasses.replace(config, max_updates=8), log=QUIET)
    assert result.status == "goal_not_met"
    assert json.loads(path.read_text())["max_updates"] == 8  # the settings the run continued with
    path.write_text("{not json")
    (run_dir / "summary.json").unlink()
    with pytest.raises(UsageError, match="not a run's settings"):
        resume(run_dir, dataclasses.replace(config, max_updates=9), log=QUIET)


def test_a_deleted_best_pt_is_said_and_made_again(stopped):
    config, run_dir = stopped
    (run_dir / "best.pt").unlink()
    lines = []
    result = resume(run_dir, config, log=lines.append)
    notes = [line for line in lines if "best.pt (the best validation, update 3) is missing" in line]
    assert len(notes) == 1 and result.status == "goal_not_met"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (run_dir / "best.pt").is_file() and "final_evaluation" in summary
    assert summary["best_update"] in (6, 7) and "best_missing" not in summary


def test_a_best_pt_deleted_after_the_last_validation_still_gets_a_final_evaluation(tmp_path):
    config = _config("CartPole-v1", tmp_path)
    train(config, log=QUIET)
    run_dir = tmp_path / "seed-5"
    (run_dir / "best.pt").unlink()
    (run_dir / "summary.json").unlink()  # as if a stop had cut the final evaluation short
    lines = []
    result = resume(run_dir, config, log=lines.append)
    assert any("the final evaluation uses the policy at update 7" in line for line in lines)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert result.status == "goal_not_met" and summary["best_missing"] and "final_evaluation" in summary


@pytest.mark.parametrize("name,make,needle", [
    ("metrics.jsonl", os.mkdir, "metrics.jsonl is a directory, not the file the run writes"),
    ("summary.json", os.mkdir, "summary.json is a directory"),
    ("tb", lambda p: open(p, "w").close(), "tb is not a directory"),
    ("ratings.json", lambda p: os.symlink("/etc/hostname", p), "ratings.json is a symbolic link"),
])
def test_a_damaged_run_folder_is_refused_before_training(stopped, name, make, needle):
    config, run_dir = stopped
    target = run_dir / name
    if target.is_dir():
        os.rename(target, run_dir / "tb.kept")
    elif target.exists():
        target.unlink()
    make(target)
    before = (run_dir / "last.pt").read_bytes()
    with pytest.raises(UsageError, match=needle):
        resume(run_dir, config, log=QUIET)
    assert (run_dir / "last.pt").read_bytes() == before


def test_an_env_state_of_another_dtype_is_refused(stopped):
    config, run_dir = stopped
    payload = load_checkpoint(run_dir / "last.pt")
    inner = payload["trainer"]["env"]["inner"]
    inner[0] = inner[0].float()  # CartPole keeps float64 (Gymnasium's arithmetic)
    save_checkpoint(run_dir / "last.pt", payload)
    expected = r"does not match this run \(state field '\w+': expected a torch.float64 tensor of shape \(32,\), got"
    with pytest.raises(CheckpointError, match=expected + " a torch.float32"):
        resume(run_dir, config, log=QUIET)


def test_a_checkpoint_larger_than_memory_allows_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "huge.pt"
    with open(path, "wb") as f:
        f.truncate(host_memory_bytes() // 2 + 1)  # sparse: takes no disk
    with pytest.raises(CheckpointError, match="more than half of this machine's"):
        load_checkpoint(path)


@pytest.mark.parametrize("text,needle", [
    ('{"env": "CartPole-v1", "num_envs": ' + "9" * 5000 + "}", "Exceeds the limit"),
    ('{"env": "CartPole-v1", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
])
def test_a_config_file_is_parsed_within_limits(call_main, tmp_path, text, needle):
    path = tmp_path / "config.json"
    path.write_text(text)
    code, _, err = call_main(main, "--config", path, "--output", tmp_path / "run")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(17 * 2**20)
    code, _, err = call_main(main, "--config", big, "--output", tmp_path / "run")
    assert code == 2 and "over the 16,777,216 a settings file may have" in err, err


def test_a_metrics_line_the_run_did_not_write_is_dropped_on_resume(stopped):
    config, run_dir = stopped
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write('{"update": ' + "9" * 5000 + "}\n" + "[" * 50_000 + "\n")
    result = resume(run_dir, config, log=QUIET)
    assert result.status == "goal_not_met"
    updates = [json.loads(line)["update"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert updates == list(range(8))
