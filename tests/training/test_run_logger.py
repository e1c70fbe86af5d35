"""RunLogger: whole JSON lines, TensorBoard events, and the plain and live progress views."""

import importlib.util
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from rl_gpu.cli import plot
from rl_gpu.training import run_logger
from rl_gpu.training.run_logger import JsonLines, RunLogger

HAS_TENSORBOARD = importlib.util.find_spec("tensorboard") is not None
ROOT = Path(__file__).resolve().parents[2]


def _lines(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


class _Clock:
    """A perf_counter that moves only when told to, so phase timings are exact under any machine load."""

    def __init__(self):
        self.now = 1000.0

    def perf_counter(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def _train(logger, updates=4, validate_at=(2,), sleep=time.sleep):
    logger.log_validation(0, 0, {"score": 0.25, "passed": False, "streak": 0})
    for update in range(1, updates + 1):
        with logger.phase("collect"):
            sleep(0.002)
        with logger.phase("update"):
            sleep(0.001)
        if update in validate_at:
            result = {"score": torch.tensor(0.5), "passed": True, "streak": 1}
            logger.log_validation(update, 64 * update, result)
        scalars = {"episodes": 0 if update == 3 else 5, "episode_return": np.float32(update),
                   "train_win_rate": 0.5, "loss": torch.tensor(0.125), "entropy": 0.6, "approx_kl": 0.01}
        logger.log_update(update, 64 * update, scalars)


def test_jsonl_one_line_per_update_with_validations_merged(tmp_path, monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(run_logger, "time", clock)
    with RunLogger(tmp_path, total_updates=4, display="off", tensorboard=False) as logger:
        _train(logger, sleep=clock.sleep)
        logger.log_validation(4, 256, {"score": 0.75})
    lines = _lines(tmp_path)
    assert [line["update"] for line in lines] == [0, 1, 2, 3, 4, 4]
    assert lines[0]["validation"] == {"score": 0.25, "passed": False, "streak": 0} and "loss" not in lines[0]
    assert lines[2]["validation"] == {"score": 0.5, "passed": True, "streak": 1}
    assert "validation" not in lines[1] and "validation" not in lines[3]
    assert lines[-1]["validation"] == {"score": 0.75}
    for line in lines[1:5]:
        assert line["global_step"] == 64 * line["update"]
        assert line["loss"] == 0.125 and isinstance(line["episode_return"], float)
        assert line["collect_seconds"] == pytest.approx(0.002) and line["update_seconds"] == pytest.approx(0.001)
        assert line["steps_per_second"] > 0 and line["time"] > 0
    assert [line["time"] for line in lines] == sorted(line["time"] for line in lines)


def test_torn_last_line_is_cut_when_reopened(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"update": 1, "global_step": 8}\n{"update": 2, "glo')
    with RunLogger(tmp_path, display="off", tensorboard=False) as logger:
        logger.log_update(2, 16, {"loss": 1.0})
    assert [line["update"] for line in _lines(tmp_path)] == [1, 2]
    only_torn = tmp_path / "other.jsonl"
    only_torn.write_bytes(b'{"upd' * 30000)
    JsonLines(only_torn).close()
    assert only_torn.read_bytes() == b""


def test_a_killed_writer_leaves_only_whole_lines(tmp_path):
    script = (
        "import sys\n"
        "from rl_gpu.training.run_logger import RunLogger\n"
        "logger = RunLogger(sys.argv[1], display='off', tensorboard=False)\n"
        "print('ready', flush=True)\n"
        "u = 0\n"
        "while True:\n"
        "    u += 1\n"
        "    logger.log_update(u, u, {'payload': 'x' * 5000, 'loss': 0.5})\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE,
                            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
    assert proc.stdout.readline().strip() == b"ready"
    path, deadline = tmp_path / "metrics.jsonl", time.monotonic() + 30
    while (not path.exists() or path.stat().st_size < 200_000) and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    data = path.read_bytes()
    # SIGKILL may stop the last os.write at a page boundary: whole lines, then at most a prefix of the next one.
    whole, _, torn = data.rpartition(b"\n")
    updates = [json.loads(line)["update"] for line in whole.splitlines()]
    assert updates == list(range(1, len(updates) + 1)) and len(updates) > 10
    next_line = f'{{"update": {len(updates) + 1}, "global_step": '.encode()
    assert torn[:len(next_line)] == next_line[:len(torn)]
    assert plot.read_metrics(tmp_path).skipped_lines == (1 if torn else 0)
    JsonLines(path).close()
    assert path.read_bytes() == whole + b"\n"


def test_plain_lines_when_not_a_terminal(tmp_path):
    stream = io.StringIO()
    with RunLogger(tmp_path, total_updates=4, label="seed 7", log_every=2, stream=stream,
                   tensorboard=False) as logger:
        assert logger.display == "plain"
        _train(logger)
        logger.print("a trainer message")
    out = stream.getvalue().splitlines()
    assert [line.split()[3] for line in out[:-1]] == ["1/4", "2/4", "4/4"]
    first = out[0]
    assert first.startswith("[seed 7] update     1/4")
    for needle in ("steps/s", "collect", "update ", "return 1", "win 0.5", "loss 0.125", "budget ETA"):
        assert needle in first, needle
    # Update 3 ended no episode: the recent mean return is over updates 1, 2 and 4.
    assert "return 2.333" in out[2] and "validation 0.5 @ 2" in out[2]
    assert out[-1] == "a trainer message"


def test_quiet_is_plain_and_live_view_renders(tmp_path):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    with RunLogger(tmp_path / "q", stream=Terminal(), quiet=True, tensorboard=False) as quiet:
        assert quiet.display == "plain"
    stream = Terminal()
    with RunLogger(tmp_path / "live", total_updates=4, label="seed 7", stream=stream,
                   tensorboard=False) as logger:
        assert logger.display == "live"
        _train(logger)
        logger.print("a trainer message")
    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", stream.getvalue())
    assert "seed 7" in text and "4/4" in text and "steps/s" in text and "a trainer message" in text
    assert len(_lines(tmp_path / "live")) == 5


@pytest.mark.skipif(not HAS_TENSORBOARD, reason="needs tensorboard")
def test_tensorboard_events_are_readable(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with RunLogger(tmp_path, display="off") as logger:
        _train(logger)
    files = list((tmp_path / "tb").glob("events.out.tfevents.*"))
    assert len(files) == 1
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/loss", "train/episode_return", "validation/score", "time/steps_per_second",
            "time/collect_seconds"} <= tags
    assert [e.step for e in events.Scalars("train/loss")] == [64, 128, 192, 256]
    assert [e.value for e in events.Scalars("validation/score")] == [0.25, 0.5]


def test_without_tensorboard_one_notice_and_no_events(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    monkeypatch.setattr(run_logger, "_tensorboard_notice_shown", False)
    for name in ("a", "b"):
        with RunLogger(tmp_path / name, display="off") as logger:
            _train(logger, updates=1)
    err = capsys.readouterr().err
    assert err.count("tensorboard is not installed") == 1
    assert not (tmp_path / "a" / "tb").exists() and len(_lines(tmp_path / "b")) == 2


def test_bad_arguments():
    with pytest.raises(ValueError, match="display"):
        RunLogger("unused", display="fancy")
    with pytest.raises(ValueError, match="log_every"):
        RunLogger("unused", log_every=0)


def test_a_resumed_run_appends_and_rates_count_from_the_resume_point(tmp_path):
    with RunLogger(tmp_path, display="off", tensorboard=False) as logger:
        logger.log_update(1, 1000, {"loss": 1.0})
    with RunLogger(tmp_path, display="off", tensorboard=False, start_update=1, start_step=1000) as logger:
        time.sleep(0.01)
        record = logger.log_update(2, 1100, {"loss": 0.5})
    assert record["steps_per_second"] < 100 / 0.01
    assert [line["update"] for line in _lines(tmp_path)] == [1, 2]


def test_rates_follow_the_lines_own_times_when_many_are_logged_at_once(tmp_path):
    # The trainer reads metrics back once per log interval and logs that many lines in one go, each with its
    # update's own training time: the progress line's rate and ETA must come from those times, not from when the
    # lines happened to be written.
    stream = io.StringIO()
    with RunLogger(tmp_path, total_updates=200, log_every=100, stream=stream, tensorboard=False,
                   start_update=50, start_step=5000, start_time=7.0) as logger:
        for update in range(51, 151):
            record = logger.log_update(update, update * 100, {"time": 7.0 + 0.01 * (update - 50)})
    assert record["steps_per_second"] == pytest.approx(100 / 0.01)
    line = stream.getvalue().splitlines()[-1]
    assert "10,000 steps/s" in line and "budget ETA 0:00:00" not in line and "budget ETA 0:00:01" in line, line


def test_a_step_budget_shows_progress_and_eta_in_steps(tmp_path):
    # A turn-based game's update counts only live transitions, so the updates a step budget takes are not known
    # in advance: the line shows the steps against the budget, and the ETA follows the step rate.
    stream = io.StringIO()
    with RunLogger(tmp_path, total_steps=10_000, stream=stream, tensorboard=False) as logger:
        for update in range(1, 5):
            logger.log_update(update, 1_000 * update, {"time": float(update)})  # 1,000 steps/s
    line = stream.getvalue().splitlines()[-1]
    assert "update     4  " in line and "steps       4,000/10,000" in line, line
    assert "1,000 steps/s" in line and "budget ETA 0:00:06" in line, line
    with pytest.raises(ValueError, match="total_updates or total_steps"):
        RunLogger("unused", total_updates=4, total_steps=100)


def test_the_live_view_of_a_step_budget_counts_steps(tmp_path):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    with RunLogger(tmp_path, total_steps=4_000, label="seed 7", stream=stream, tensorboard=False) as logger:
        for update in range(1, 3):
            logger.log_update(update, 1_000 * update, {"time": float(update)})
    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", stream.getvalue())
    assert "2000/4000" in text and "steps, elapsed" in text, text
